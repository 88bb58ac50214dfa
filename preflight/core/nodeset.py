"""Node lists folded as node sets: `gpu[001-063,065]` for 64 names, as ClusterShell and Slurm write them.

Every report shows nodes this way, so a 1,000-node run reads as a few rows. Names a node set cannot
hold literally (an IPv6 address in brackets, a name with a comma) are listed as they are, after the
folded ones.
"""

from __future__ import annotations

import re
from typing import Iterable

# What ClusterShell folds without reading it as its own syntax (ranges, groups, operators).
_FOLDABLE = re.compile(r"^[A-Za-z0-9_.:+-]+$")


# The most nodes a hosts file, --nodes or a filter may name, all lines together: checked before a range
# is expanded, so `n[1-100000000]` is refused at once rather than built in memory.
MAX_NODES = 100_000

def fold(names: Iterable[str]) -> str:
    """`gpu[01-03,05],login1` from the names, in ClusterShell's order; "" for none."""
    unique = list(dict.fromkeys(n for n in names if n))
    plain = [n for n in unique if _FOLDABLE.match(n)]
    other = [n for n in unique if not _FOLDABLE.match(n)]
    text = ""
    if plain:
        from ClusterShell.NodeSet import NodeSet, NodeSetException

        try:
            text = str(NodeSet.fromlist(plain))
        except NodeSetException:
            text = ",".join(plain)
    return ",".join(filter(None, [text, *other]))


def count_text(names: Iterable[str]) -> str:
    """'gpu[01-03] (3 nodes)' or 'gpu01' for one."""
    unique = list(dict.fromkeys(names))
    folded = fold(unique)
    return folded if len(unique) == 1 else f"{folded} ({len(unique)} nodes)"
