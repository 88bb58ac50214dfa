"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json)."""

from __future__ import annotations

import json

from preflight.core.model import RunReport
from preflight.reporters.view import build_view

FILENAME = "results.json"  # what this reporter writes in the output directory


def render(report: RunReport) -> str:
    data = report.to_dict()
    view = build_view(report)
    decision = view.decision
    # Derived, for consumers that do not want to re-implement the verdict; ignored on load. `findings`
    # lists the same findings as every other report, in the same order, each with its own fix.
    data["verdict"] = {
        "verdict": decision.verdict.value,
        "exit_code": decision.exit_code,
        "reason": decision.reason,
        "blocking": [{"check_id": r.check_id, "node": r.node, "status": r.status.value} for r in decision.blocking],
        "findings": {
            "blocking": [row.to_dict() for row in view.blocking],
            "warnings": [row.to_dict() for row in view.warnings],
            "not_measured": [row.to_dict() for row in view.skipped],
            "skipped_at_level": view.level_skips.check_ids if view.level_skips else [],
        },
    }
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
