"""A report format a team might add: one CSV row per result (check, node, status, summary)."""

from __future__ import annotations

import csv
import io

from preflight.core.model import RunReport

FILENAME = "results.csv"


def render(report: RunReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["check", "node", "status", "summary"])
    for result in report.results:
        writer.writerow([result.check_id, result.node, result.status.value, result.summary])
    return out.getvalue()
