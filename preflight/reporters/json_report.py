"""results.json: the whole run report, versioned (see preflight/schema/run-report.schema.json).

Laid out for people and tools alike: one top-level key per line, and in the lists and objects at the
top (nodes, results, the verdict) one item per line, in JSON's compact form. A results file of a
1,000-node run is streamed item by item through json's C encoder (`write`), never built as one
copy of the report first.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any, TextIO

from preflight.core.finite import finite
from preflight.core.model import RunReport, json_text
from preflight.core.results_file import dumps
from preflight.core.verdict import decide

FILENAME = "results.json"  # what this reporter writes in the output directory
PRETTY_DEPTH = 2  # containers at depths 0 and 1 get one member per line; deeper ones are compact


def render(report: RunReport) -> str:
    buffer = io.StringIO()
    write(report, buffer)
    return buffer.getvalue()


def write(report: RunReport, out: TextIO) -> None:
    """Write results.json to `out`, one top-level item at a time."""
    data: dict[str, Any] = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    decision = decide(report)
    # Derived, for consumers that do not want to re-implement the verdict; ignored on load.
    data["verdict"] = {
        "verdict": decision.verdict.value,
        "exit_code": decision.exit_code,
        "reason": decision.reason,
        "blocking": [{"check_id": r.check_id, "node": r.node, "status": r.status.value} for r in decision.blocking],
    }
    buffer = io.StringIO()
    try:
        _write_value(buffer, data, 0)
    except ValueError:
        # Strict JSON: a NaN or infinity still in the report (an older results file) is written as null.
        plain = {**report.to_dict(), "verdict": data["verdict"]}
        out.write(dumps(finite(plain)[0], indent=2, sort_keys=True, default=str) + "\n")
        return
    out.write(buffer.getvalue())
    out.write("\n")


def _write_value(out: TextIO, value: Any, depth: int) -> None:
    if depth >= PRETTY_DEPTH or not isinstance(value, (dict, list, tuple)) or not value:
        out.write(json_text(value, sort_keys=True, allow_nan=False))
        return
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        out.write("{\n")
        for index, key in enumerate(sorted(value)):
            out.write(",\n" if index else "")
            out.write(f"{pad}{json.dumps(str(key))}: ")
            _write_value(out, value[key], depth + 1)
        out.write(f"\n{'  ' * depth}}}")
    else:
        out.write("[\n")
        for index, item in enumerate(value):
            out.write(",\n" if index else "")
            out.write(pad)
            _write_value(out, item, depth + 1)
        out.write(f"\n{'  ' * depth}]")
