"""Strict JSON for results: a NaN or infinite figure is written as null, with a note in the result.

JSON has no NaN or infinity; Python's json module writes them as bare tokens that other readers
(jq, JavaScript, Go, a CI dashboard) refuse, so a results.json of a canary that caught NaN losses
would not be JSON. Every result passes through `make_finite` before it is written: the figure
becomes null, the result says which figure was not finite, and the judgement made from the real
value (a NaN loss is a FAIL) is kept. `finite` does the same for any JSON-able structure.

`dumps` and `dump` are how preflight writes JSON (files, --json output, job lines, history keys):
a NaN becomes null. Where null would change the meaning, a call passes allow_nan=False and handles
the value itself (a worker marks it: preflight.workers.wire); tests/unit/core/test_strict_json.py
scans the source so that no json.dump or json.dumps call goes without allow_nan=False.
"""

from __future__ import annotations

import json
import math
from typing import Any

from preflight.core.model import CheckResult

# How the note on facts begins: re-judging keeps such a result as recorded (its facts lost the values).
FACTS_NOTE = "recorded facts not finite"


def _bad(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _word(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")


def finite(data: Any) -> tuple[Any, int]:
    """A copy of `data` with every NaN and infinity replaced by None, and how many were replaced."""
    if _bad(data):
        return None, 1
    if isinstance(data, dict):
        count, out = 0, {}
        for key, value in data.items():
            out[key], n = finite(value)
            count += n
        return out, count
    if isinstance(data, (list, tuple)):
        count, items = 0, []
        for value in data:
            item, n = finite(value)
            items.append(item)
            count += n
        return items, count
    return data, 0


def make_finite(result: CheckResult) -> CheckResult:
    """Replace, in place, the non-finite figures of a result by None, each with a note in its details."""
    notes = []
    for m in result.measurements:
        for name in ("value", "threshold", "at"):
            value = getattr(m, name)
            if _bad(value):
                notes.append(f"figure {m.name!r}: {name} was {_word(value)}, written as null")
                setattr(m, name, None)
        if any(_bad(s) for s in m.samples):
            bad = [s for s in m.samples if _bad(s)]
            notes.append(f"figure {m.name!r}: {len(bad)} sample{'s' if len(bad) != 1 else ''} not finite "
                         f"({', '.join(sorted({_word(s) for s in bad}))}), left out of the samples")
            m.samples = [s for s in m.samples if not _bad(s)]
    if _bad(result.duration_s):
        result.duration_s = 0.0
    facts, count = finite(result.facts)
    if count:
        result.facts = facts
        notes.append(f"{FACTS_NOTE}: {count} value{'s' if count != 1 else ''} (NaN or infinity) written as null")
    result.details.extend(n for n in notes if n not in result.details)
    return result


def facts_lost_values(result: CheckResult) -> bool:
    """True when make_finite replaced some of the result's facts: judging them again would not judge what was measured."""
    return any(d.startswith(FACTS_NOTE) for d in result.details)


def dumps(data: Any, **options: Any) -> str:
    """Strict JSON text of `data`: its NaN and infinities written as null (`finite`), never as the
    bare tokens NaN/Infinity. A non-finite float the copy cannot reach (inside an object that
    options["default"] turns into JSON) is refused with ValueError rather than written."""
    return json.dumps(finite(data)[0], allow_nan=False, **options)


def dump(data: Any, handle: Any, **options: Any) -> None:
    """`dumps` written to an open text file."""
    handle.write(dumps(data, **options))
