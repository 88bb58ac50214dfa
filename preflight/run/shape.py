"""The shape's answer for a run (preflight.core.shape), with which blocking findings are a node's own
read from preflight.core.blame as drain and cordon read it, and answered again when a recorded run is
re-judged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preflight.core.model import RunReport


def answer(report: RunReport, shape: Any, groups: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Set and return report.subset: the largest healthy subset of the run's nodes in `shape`."""
    from preflight.core.blame import own_findings
    from preflight.core.shape import subset_for

    report.subset = subset_for(report, shape, own_findings(report), groups)
    return report.subset


def answer_again(report: RunReport) -> None:
    """After re-judging: the same shape answered from the new results (a stale answer is never kept)."""
    if not isinstance(report.subset, dict):
        return
    from preflight.core.shape import ShapeError, parse

    try:
        shape = parse([str(report.subset.get("shape") or "")])
    except ShapeError:
        shape = None
    if shape is None:
        report.subset = None
        return
    answer(report, shape, report.subset.get("groups") or None)


def plan_defaults(config: Any, checks: Mapping[str, Any]) -> dict[str, int]:
    """The shape keys the job's plan gives (Check.shape_defaults: [job] nodes and gpus_per_node), for
    the keys `--shape` leaves out."""
    found: dict[str, int] = {}
    for check in checks.values():
        for key, name in getattr(check, "shape_defaults", {}).items():
            value = (config.params.get(check.id) or {}).get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                found.setdefault(key, value)
    return found
