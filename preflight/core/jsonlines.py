"""Reading JSON lines out of another program's output: the last object, or all of them."""

from __future__ import annotations

import json
from typing import Any, Iterable


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
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found
