"""Strict JSON for what a worker prints or writes: standard library only, as every worker is.

JSON has no NaN or infinity, and a worker's figures can be either (a canary's loss that went NaN is
the very thing it reports). `dumps` writes each non-finite float as {"$nonfinite": "NaN"} (or
"Infinity", "-Infinity"), so the line is JSON every reader accepts and the value is not lost:
preflight.core.jsonlines.loads, which reads worker output, turns the marker back into the float.
"""

from __future__ import annotations

import json
import math
from typing import Any

NONFINITE_KEY = "$nonfinite"


def _word(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def marked(data: Any) -> Any:
    """A copy of `data` in which every NaN and infinity is a {"$nonfinite": word} marker."""
    if isinstance(data, float) and not math.isfinite(data):
        return {NONFINITE_KEY: _word(data)}
    if isinstance(data, dict):
        return {key: marked(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [marked(value) for value in data]
    return data


def dumps(data: Any, **options: Any) -> str:
    """json.dumps that never writes a bare NaN or Infinity token (see the module docstring)."""
    return json.dumps(marked(data), allow_nan=False, **options)
