"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json)."""

from __future__ import annotations

from preflight.core.finite import finite
from preflight.core.model import RunReport
from preflight.core.results_file import dumps
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
    # Strict JSON: a NaN or infinity still in the report (an older results file) is written as null.
    return dumps(finite(data)[0], indent=2, sort_keys=True, default=str) + "\n"
