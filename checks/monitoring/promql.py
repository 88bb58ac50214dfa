"""What an alerting rule's PromQL expression watches, read from its text (no Prometheus needed): the
side of a top-level comparison that names the GPU utilisation metric. Read the same way for the rules
Prometheus has loaded (monitoring.alarms) and the rule files as written (monitoring.rule_files). Pure."""

from __future__ import annotations

import re

UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"  # GPU utilisation, as dcgm-exporter names it

_OPEN, _CLOSE = "([{", ")]}"
_COMPARISON = re.compile(r"==|!=|>=|<=|>|<")
_SET_OPERATOR = re.compile(r"(?<![A-Za-z0-9_:])(and|or|unless)(?![A-Za-z0-9_:])")
_MODIFIERS = re.compile(r"^\s*(?:bool\s+)?(?:(?:on|ignoring|group_left|group_right)\s*(?:\([^)]*\))?\s*)*")


def _top_level(text: str) -> list[bool]:
    """For each character: whether it is outside every bracket and string."""
    depth, quote, flags = 0, "", []
    for i, ch in enumerate(text):
        if quote:
            flags.append(False)
            if ch == quote and text[i - 1] != "\\":
                quote = ""
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        flags.append(depth == 0 and not quote and ch not in _CLOSE)
    return flags


def watched_expression(query: str) -> str | None:
    """What an alert's expression compares, without the threshold: `avg_over_time(X[10m])` of
    `avg_over_time(X[10m]) < 50` (the side that names the GPU utilisation metric, in the part of an
    `and`/`or`/`unless` that does). None when the expression has no such top-level comparison."""
    top = _top_level(query)
    cuts = [m.span() for m in _SET_OPERATOR.finditer(query) if top[m.start()]]
    starts = [0] + [end for _, end in cuts]
    ends = [start for start, _ in cuts] + [len(query)]
    for start, end in zip(starts, ends):
        part = query[start:end]
        if UTIL_METRIC not in part:
            continue
        for m in _COMPARISON.finditer(part):
            if not top[start + m.start()]:
                continue
            left, right = part[:m.start()], _MODIFIERS.sub("", part[m.end():])
            side = left if UTIL_METRIC in left else right
            side = _MODIFIERS.sub("", side).strip()
            return side or None
    return None
