"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json)."""

from __future__ import annotations

import json

from preflight.core.model import RunReport
from preflight.core.verdict import decide

FILENAME = "results.json"  # what this reporter writes in the output directory


def render(report: RunReport) -> str:
    data = report.to_dict()
    decision = decide(report)
    # Derived, for consumers that do not want to re-implement the verdict; ignored on load.
    data["verdict"] = {
        "verdict": decision.verdict.value,
        "exit_code": decision.exit_code,
        "reason": decision.reason,
        "blocking": [{"check_id": r.check_id, "node": r.node, "status": r.status.value} for r in decision.blocking],
    }
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
