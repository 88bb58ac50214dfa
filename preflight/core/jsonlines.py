"""Reading JSON lines out of another program's output: the last object, or all of them.

A worker writes a NaN or an infinity as {"$nonfinite": "NaN"} (preflight.workers.wire, strict JSON);
`loads` turns the marker back into the float, so a check judges the value that was measured.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

# The key preflight.workers.wire marks a non-finite float with (core may not import workers).
NONFINITE_KEY = "$nonfinite"
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _unmark(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and obj.get(NONFINITE_KEY) in _NONFINITE:
        return _NONFINITE[obj[NONFINITE_KEY]]
    return obj


def loads(text: str | bytes) -> Any:
    """json.loads of a worker's output, its non-finite markers read back as floats."""
    return json.loads(text, object_hook=_unmark)


def last_json(lines: Iterable[str] | str) -> dict[str, Any] | None:
    """The last line of a program's output that is a JSON object; None when there is none."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    found = json_objects(lines)
    return found[-1] if found else None


def json_objects(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Every line of output that is a JSON object, in order."""
    found = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                value = loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found
