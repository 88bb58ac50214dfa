"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json)."""

from __future__ import annotations

import json

from preflight.core.model import RunReport
from preflight.reporters.view import build_view

FILENAME = "results.json"  # what this reporter writes in the output directory


def render(report: RunReport) -> str:
    data = report.to_dict()
    # Derived, for consumers that do not want to re-implement the verdict; ignored on load. `findings`
    # lists the same findings as every other report, in the same order, each with its own fix.
    data["verdict"] = verdict_of(build_view(report))
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def summary(report: RunReport) -> dict:
    """What `preflight run --json` prints: the verdict, its findings, the counts, the level."""
    view = build_view(report)
    return {"schema_version": report.schema_version, "preflight_version": report.preflight_version,
            "started_at": report.started_at, "finished_at": report.finished_at, "level": report.level,
            "nodes": view.nodes, "counts": view.counts, "measured": view.decision.measured,
            "checks": view.decision.total, **verdict_of(view)}


def verdict_of(view) -> dict:
    decision = view.decision
    return {
        "verdict": decision.verdict.value,
        "exit_code": decision.exit_code,
        "reason": decision.reason,
        "blocking": [{"check_id": r.check_id, "node": r.node, "status": r.status.value} for r in decision.blocking],
        "findings": {
            "blocking": [row.to_dict() for row in view.blocking],
            "warnings": [row.to_dict() for row in view.warnings],
            "not_measured": [row.to_dict() for row in view.skipped],
            "acknowledged": [row.to_dict() for row in view.acknowledged],
            "skipped_at_level": view.level_skips.check_ids if view.level_skips else [],
        },
    }
