"""What a configured value may be, by the kind its parameter declares (preflight.core.check.param).

Pure; preflight.core.config calls it for every value of the configuration file, a profile and --set.
"""

from __future__ import annotations

import math
from typing import Any

from preflight.core.check import PARAM_CHOICES, PARAM_KIND, PARAM_MINIMUM


def _not_finite(value: Any) -> Any:
    """The first NaN or infinity in a value (in lists and tables too), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((bad for bad in map(_not_finite, items) if bad is not None), None)


def value_problem(spec: Any, value: Any) -> str:
    """What is wrong with a value for what its field declares (`spec`: the field's metadata), or "".

    A list is checked entry by entry against the kind (a list of sizes, of counts). A field that
    declares no kind is only refused a NaN or an infinity.
    """
    bad = _not_finite(value)
    if bad is not None:
        return f"must be a finite number, got {bad!r}"
    kind = spec.get(PARAM_KIND)
    if isinstance(value, list) and kind != "list":
        problem = next((p for p in (value_problem(spec, v) for v in value) if p), "")
        return f"every entry {problem}" if problem else ""
    if kind == "choice":
        choices = tuple(spec.get(PARAM_CHOICES) or ())
        if value is None or value in choices:
            return ""
        return f"must be one of {', '.join(map(str, choices))}, got {value!r}"
    if kind == "text" and isinstance(value, str) and "://" in value:
        from preflight.core.redact import url_problem

        return url_problem(value)  # a URL whose port is no number: refused, its password masked
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    if kind in ("threshold", "duration", "size", "rate", "count", "fraction") and value < 0:
        return f"must not be negative, got {value!r}"
    if kind == "threshold" and value == 0:
        return "must be greater than zero (a zero threshold judges nothing)"
    if kind in ("duration", "size", "rate") and value == 0:
        return f"must be greater than zero, got {value!r}"
    minimum = spec.get(PARAM_MINIMUM)
    if kind == "count" and minimum is not None and value < minimum:
        return f"must be at least {minimum}, got {value!r}"
    if kind == "fraction" and value > 1:
        return f"is a fraction between 0 and 1, got {value!r}"
    return ""


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
