"""Which nodes meet in which round: the one pair scheduler of the cross-node checks, and what the
results of a round-robin pass point at. Pure.

A round is a list of disjoint pairs, so the pairs of a round can run at the same time and no node
is in two of them: a figure then belongs to its pair and not to a busy neighbour.
"""

from __future__ import annotations

from typing import Any


def round_robin(names: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint pairs in which every pair of nodes meets once (circle method): N-1 rounds,
    N with an odd count (one node sits out each round)."""
    players: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def both_directions(rounds: list[list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
    """Each round as two: one direction of all its pairs, then the other. Every ordered pair is
    measured on its own (traffic the other way would share the link with its ACKs)."""
    out = []
    for pairs in rounds:
        out.append(list(pairs))
        out.append([(b, a) for a, b in pairs])
    return out


def ring_rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    """Every node to its successor, the direction a ring all-reduce uses, in as few rounds as
    disjoint pairs allow: two with an even count, a third for the closing link with an odd one."""
    n = len(names)
    if n < 2:
        return []
    if n == 2:
        return [[(names[0], names[1])], [(names[1], names[0])]]
    edges = [(names[i], names[(i + 1) % n]) for i in range(n)]
    paired = n - n % 2  # with an odd count, the closing edge goes to a round of its own
    rounds = [edges[0:paired:2], edges[1:paired:2]]
    if n % 2:
        rounds.append([edges[-1]])
    return [r for r in rounds if r]


def full_rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    """Every ordered pair once: the round-robin rounds, each direction on its own."""
    return both_directions(round_robin(names))


def attribute(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Which nodes or pairs the pairwise results point at (each {"nodes": [a, b], "state": ...}).

    A node is at fault when every pair it was in is bad and some pair without it is good. The bad
    pairs that involve no such node are at fault as pairs. All pairs bad: nothing to single out.
    """
    measured = [p for p in pairs if p.get("state") in ("good", "bad")]
    good = [p for p in measured if p["state"] == "good"]
    bad = [p for p in measured if p["state"] == "bad"]
    count: dict[str, int] = {}
    bad_count: dict[str, int] = {}
    for pair in measured:
        for node in pair["nodes"]:
            count[node] = count.get(node, 0) + 1
            if pair["state"] == "bad":
                bad_count[node] = bad_count.get(node, 0) + 1
    # A node whose every pair is bad is in no good pair, so any good pair is one without it.
    at_fault_nodes = [n for n in sorted(count) if bad_count.get(n, 0) == count[n] and good]
    faulty = set(at_fault_nodes)
    at_fault_pairs = [p["nodes"] for p in bad if not set(p["nodes"]) & faulty]
    return {"nodes": at_fault_nodes, "pairs": at_fault_pairs, "all_bad": bool(measured) and not good,
            "measured": len(measured), "bad": len(bad)}
