"""Node lists folded as node sets: `gpu[001-063,065]` for 64 names, as ClusterShell and Slurm write them.

Every report shows nodes this way, so a 1,000-node run reads as a few rows. Names a node set cannot
hold literally (an IPv6 address in brackets, a name with a comma) are listed as they are, after the
folded ones.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

# What ClusterShell folds without reading it as its own syntax (ranges, groups, operators).
_FOLDABLE = re.compile(r"^[A-Za-z0-9_.:+-]+$")


# The most nodes a hosts file, --nodes or a filter may name, all lines together: checked before a range
# is expanded, so `n[1-100000000]` is refused at once rather than built in memory.
MAX_NODES = 100_000

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
