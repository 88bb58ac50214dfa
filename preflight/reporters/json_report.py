"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json).

Laid out for people and tools alike: one top-level key per line, and in the lists and objects at the
top (nodes, results, the verdict) one item per line, in JSON's compact form. Each item is encoded by
orjson (a 1,000-node run's 50 MB in a tenth of the time of json's C encoder), walking the report's
objects itself: a dataclass goes through the model's `plain_value` as json.dumps would take it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, TextIO

import orjson

from preflight.core.finite import finite
from preflight.core.model import RunReport, plain_value
from preflight.core.results_file import dumps
from preflight.reporters.view import build_view

FILENAME = "results.json"  # what this reporter writes in the output directory
PRETTY_DEPTH = 2  # containers at depths 0 and 1 get one member per line; deeper ones are compact


def render(report: RunReport) -> str:
    return "".join(_parts(report))


def write(report: RunReport, out: TextIO) -> None:
    """Write results.json to `out`, one top-level item at a time."""
    out.writelines(_parts(report))


def _parts(report: RunReport) -> list[str]:
    """results.json as pieces whose concatenation is the file: all made before any is written, so a
    report that cannot be written strictly (below) leaves nothing half-written."""
    data: dict[str, Any] = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    for name in ("history", "subset"):
        if data[name] is None:
            del data[name]  # written only by a run that read fleet history, or asked for a shape
    # Derived, for consumers that do not want to re-implement the verdict; ignored on load. `findings`
    # lists the same findings as every other report, in the same order, each with its own fix.
    data["verdict"] = verdict_of(build_view(report))
    parts: list[str] = []
    try:
        _write_value(parts.append, data, 0)
    except orjson.JSONEncodeError:
        # What orjson does not write (an integer past 64 bits): the whole report through json, strictly.
        plain = {**report.to_dict(), "verdict": data["verdict"]}
        return [dumps(finite(plain)[0], indent=2, sort_keys=True, default=str) + "\n"]
    parts.append("\n")
    return parts


def summary(report: RunReport) -> dict:
    """What `preflight run --json` prints: the verdict, its findings, the counts, the level."""
    view = build_view(report)
    return {"schema_version": report.schema_version, "preflight_version": report.preflight_version,
            "started_at": report.started_at, "finished_at": report.finished_at, "level": report.level,
            "nodes": view.nodes, "counts": view.counts, "measured": view.decision.measured,
            "checks": view.decision.total, **verdict_of(view)}


def verdict_of(view) -> dict:
    decision = view.decision
    shape = {} if decision.subset is None else {"subset_go": decision.subset_go, "subset": decision.subset_text}
    return {**shape,
        "verdict": decision.verdict.value,
        "exit_code": decision.exit_code,
        "reason": decision.reason,
        "headline": view.headline,
        "blocking": [{"check_id": r.check_id, "node": r.node, "status": r.status.value} for r in decision.blocking],
        "findings": {
            "blocking": [row.to_dict() for row in view.blocking],
            "warnings": [row.to_dict() for row in view.warnings],
            "not_measured": [row.to_dict() for row in view.skipped],
            "acknowledged": [row.to_dict() for row in view.acknowledged],
            "caveats": [row.to_dict() for row in view.caveats],
            "skipped_at_level": view.level_skips.check_ids if view.level_skips else [],
        },
    }


# Keys sorted, dataclasses through the model's own conversion (None fields left out where to_dict leaves
# them out), keys that are not text written as text, as json writes them. orjson writes a NaN or an
# infinity as null, as the strict copy below does.
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS


def _encode(value: Any) -> str:
    return orjson.dumps(value, default=plain_value, option=_OPTIONS).decode()


def _write_value(out: Callable[[str], None], value: Any, depth: int) -> None:
    if depth >= PRETTY_DEPTH or not isinstance(value, (dict, list, tuple)) or not value:
        out(_encode(value))
        return
    pad = "  " * (depth + 1)
    separator = ",\n" + pad
    if isinstance(value, dict):
        out("{\n")
        for index, key in enumerate(sorted(value)):
            out(f"{separator if index else pad}{json.dumps(str(key), allow_nan=False)}: ")
            _write_value(out, value[key], depth + 1)
        out(f"\n{'  ' * depth}}}")
    else:
        out("[\n")
        for index, item in enumerate(value):
            out(separator if index else pad)
            _write_value(out, item, depth + 1)
        out(f"\n{'  ' * depth}]")
