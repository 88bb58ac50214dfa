"""Node sets, as ClusterShell and Slurm write them: `gpu[001-063,065]` for 64 names.

`fold` writes names as a node set: every report shows nodes this way, so a 1,000-node run reads as a
few rows. Names a node set cannot hold literally (an IPv6 address in brackets, a name with a comma)
are listed as they are, after the folded ones.

`expand` reads one: a hosts file line, `--nodes`, `history --nodes`, a Slurm node list. Commas
outside brackets join node sets, kept in the order written; a bracket holds numbers and ranges, with
the zero padding of its lower bound (`gpu[08-11]`; `gpu[01-100]` is gpu01 ... gpu99, gpu100, as pdsh
and Slurm read it); several brackets multiply out. The names are counted from the brackets alone
before anything is expanded, so `n[1-100000000]` is refused at once rather than built in memory.
"""

from __future__ import annotations

import functools
import re
import math
from typing import Iterable

# What ClusterShell folds without reading it as its own syntax (ranges, groups, operators).
_FOLDABLE = re.compile(r"^[A-Za-z0-9_.:+-]+$")

# The most nodes a node set may name (a hosts file all lines together, --nodes, a filter, a Slurm
# node list): counted before a range is expanded.
MAX_NODES = 100_000
_RANGE_BODY = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_OPERATORS = ("!", "&", "^", "@", " ")  # ClusterShell's own syntax, never part of a name here


class NodeSetError(ValueError):
    """A node set that cannot be read; the message names it: `node set 'gpu[3-1]': ...`."""

    def __init__(self, text: str, problem: str) -> None:
        self.text, self.problem = text, problem
        super().__init__(f"node set {text!r}: {problem}")


def expand(text: str, limit: int = MAX_NODES) -> list[str]:
    """`gpu[01-03,07],cpu1` -> gpu01, gpu02, gpu03, gpu07, cpu1 (duplicates dropped): each node set
    of the text by ClusterShell's NodeSet, with group resolution off (a group source may run
    commands); its operators (`!`, `&`, `^`, `@group`) are refused beside a range, and a name
    without one is taken as written (its caller checks it as a name). NodeSetError when the syntax is wrong or the text names more than `limit` nodes."""
    parts = _parts(text)
    counts = [_count(part, text) for part in parts]
    if sum(counts) > limit:
        raise NodeSetError(text, f"names {sum(counts):,} nodes, more than the {limit:,} a node set may name")
    names: list[str] = []
    for part in parts:
        names.extend(_node_set(part, text) if "[" in part else [part])
    return list(dict.fromkeys(names))


def _parts(text: str) -> list[str]:
    """The node sets of `text`, split at the commas outside brackets, with the brackets checked."""
    parts, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeSetError(text, "'[' inside a range: a range holds numbers only")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeSetError(text, "']' without '['")
        elif char == "," and depth == 0:
            parts.append(text[start:pos].strip())
            start = pos + 1
    if depth:
        raise NodeSetError(text, "'[' without ']'")
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _count(part: str, text: str) -> int:
    """How many names one node set stands for, from its brackets' bounds alone (the ranges checked)."""
    sizes = []
    for body in _BRACKET.findall(part):
        size = 0
        for low, high in _bounds(body, text):
            size += int(high) - int(low) + 1
        sizes.append(size)
    return math.prod(sizes)


def _bounds(body: str, text: str) -> list[tuple[str, str]]:
    """(low, high) of each item of a bracket as written: `01-16,20` -> [("01", "16"), ("20", "20")]."""
    body = body.replace(" ", "")
    if not _RANGE_BODY.match(body):
        raise NodeSetError(text, f"bad range [{body}]: expected numbers and ranges such as [01-16] or [1-4,7]")
    found = []
    for item in body.split(","):
        low, _, high = item.partition("-")
        high = high or low
        if int(low) > int(high):
            raise NodeSetError(text, f"bad range [{body}]: {low} is greater than {high}")
        found.append((low, high))
    return found


def _padded(body: str, text: str) -> str:
    """A bracket's items as ClusterShell reads them with pdsh's padding: the lower bound's width holds
    up to its last number (`01-100` -> `01-99,100`), a wider number is written as it is."""
    items = []
    for low, high in _bounds(body, text):
        width = len(low)
        if len(high) <= width or not low.startswith("0"):
            items.append(f"{low}-{high.zfill(width)}" if low != high else low)
            continue
        items.append(f"{low}-{'9' * width}")
        for digits in range(width + 1, len(high) + 1):
            top = high if digits == len(high) else "9" * digits
            items.append(f"{10 ** (digits - 1)}-{top}")
    return ",".join(items)


def _node_set(part: str, text: str) -> list[str]:
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

    pattern = _BRACKET.sub(lambda m: f"[{_padded(m.group(1), text)}]", part)
    operator = next((char for char in _OPERATORS if char in pattern), None)
    if operator:
        raise NodeSetError(text, f"{operator!r} in {part!r}: a node set here holds names and ranges, no operators")
    try:
        return list(NodeSet(pattern, resolver=RESOLVER_NOGROUP))
    except NodeSetException as exc:  # what the brackets' check lets through and ClusterShell refuses
        raise NodeSetError(text, str(exc)) from None


def fold(names: Iterable[str]) -> str:
    """`gpu[01-03,05],login1` from the names, in ClusterShell's order; "" for none."""
    return _fold(tuple(dict.fromkeys(n for n in names if n)))


@functools.lru_cache(maxsize=1024)
def _fold(unique: tuple[str, ...]) -> str:
    """The fold of distinct names, remembered: every report folds the same node lists again, and
    ClusterShell parses each name it is given (a second per thousand names)."""
    plain = [n for n in unique if _FOLDABLE.match(n)]
    other = [n for n in unique if not _FOLDABLE.match(n)]
    text = ""
    if plain:
        from ClusterShell.NodeSet import NodeSet, NodeSetException

        try:
            text = str(NodeSet(_one_pattern(plain) or ",".join(plain)))
        except NodeSetException:
            text = ",".join(plain)
    return ",".join(filter(None, [text, *other]))


_ONE_NUMBER = re.compile(r"^([A-Za-z_.:+-]*[A-Za-z_.:+]|)(\d+)$")


def _one_pattern(names: list[str]) -> str:
    """The names as one node-set pattern (`gpu[0001,0002],login[1]`) when each is a prefix without
    digits and one number of a width its prefix shares: ClusterShell reads that in one pass, where
    it parses each name of a list on its own. "" when a name does not fit: the list is read as it is."""
    numbers: dict[str, list[str]] = {}
    for name in names:
        match = _ONE_NUMBER.match(name)
        if not match or not match.group(1):
            return ""
        numbers.setdefault(match.group(1), []).append(match.group(2))
    for digits in numbers.values():
        if len({len(d) for d in digits}) > 1 and any(d.startswith("0") for d in digits):
            return ""  # mixed padding: left to ClusterShell name by name
    return ",".join(f"{prefix}[{','.join(digits)}]" for prefix, digits in numbers.items())


def count_text(names: Iterable[str]) -> str:
    """'gpu[01-03] (3 nodes)' or 'gpu01' for one."""
    unique = list(dict.fromkeys(names))
    folded = fold(unique)
    return folded if len(unique) == 1 else f"{folded} ({len(unique)} nodes)"
