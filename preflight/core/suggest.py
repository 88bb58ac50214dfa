"""Did you mean: the known names closest to a mistyped one, for every "unknown ..." message."""

from __future__ import annotations

import difflib
from typing import Iterable


def close(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(choices)), n=n, cutoff=0.6)


def suggest(word: str, choices: Iterable[str]) -> str:
    """'; did you mean 'gpu.visibility'?' or "" when nothing is close."""
    found = close(word, choices)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in found) + "?"
