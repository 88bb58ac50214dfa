"""Node names written as ranges (`gpu[01-16,20]`), expanded for the filters of `preflight history`.

The same notation as the hosts file and ClusterShell's NodeSet: a bracket holds comma-separated
numbers or ranges, zero padding is kept, and several brackets in one name multiply out. Folding for
display is preflight.core.nodeset.fold, the one every report uses.
"""

from __future__ import annotations

import math
import re

from preflight.core.nodeset import MAX_NODES

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
MAX_EXPANDED = MAX_NODES


class NodeSetError(ValueError):
    pass


def expand(text: str) -> list[str]:
    """`gpu[01-03],cpu1` -> ['gpu01', 'gpu02', 'gpu03', 'cpu1'] (order kept, duplicates dropped)."""
    names: list[str] = []
    parts = _split_top(text)
    if sum(_count(part, text) for part in parts) > MAX_EXPANDED:  # counted before anything is expanded
        raise NodeSetError(f"{text!r} names more than {MAX_EXPANDED:,} nodes (the most a node set may name)")
    for part in parts:
        names.extend(_expand_one(part, text))
        if len(names) > MAX_EXPANDED:
            raise NodeSetError(f"{text!r} names more than {MAX_EXPANDED} nodes")
    return list(dict.fromkeys(names))


def _count(pattern: str, whole: str) -> int:
    """How many names `pattern` expands to, from its brackets' bounds alone."""
    sizes = []
    for body in _BRACKET.findall(pattern):
        size = 0
        for item in body.split(","):
            bounds = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip(), re.ASCII)
            if not bounds:
                raise NodeSetError(f"bad range {item.strip()!r} in {whole!r}: expected N or N-M")
            low, high = int(bounds.group(1)), int(bounds.group(2) or bounds.group(1))
            if low > high:
                raise NodeSetError(f"bad range {item.strip()!r} in {whole!r}: {low} is above {high}")
            size += high - low + 1
        sizes.append(size)
    return math.prod(sizes)


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeSetError(f"nested '[' in {text!r}: a range holds numbers only")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeSetError(f"unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise NodeSetError(f"unbalanced '[' in {text!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(pattern: str, whole: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    out = []
    for value in _range_values(match.group(1), whole):
        out.extend(_expand_one(head + value + tail, whole))
    return out


def _range_values(body: str, whole: str) -> list[str]:
    values = []
    for item in body.split(","):
        item = item.strip()
        if re.fullmatch(r"\d+", item, re.ASCII):
            values.append(item)
            continue
        bounds = re.fullmatch(r"(\d+)-(\d+)", item, re.ASCII)
        if not bounds:
            raise NodeSetError(f"bad range {item!r} in {whole!r}: expected N or N-M")
        low, high = bounds.groups()
        if int(low) > int(high):
            raise NodeSetError(f"bad range {item!r} in {whole!r}: {low} is above {high}")
        width = len(low) if low.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values
