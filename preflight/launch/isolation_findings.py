"""What an adaptive isolation pass found (preflight.launch.isolation_launch facts), as findings. Pure.

`judge_isolation` gives one (kind, sentence, measurements, details) per attribution, in the shape
collectives.cluster's pairwise pass uses; the kinds become finding ids under the id of the check
that ran the pass (collectives.cluster, scaling.multi_node), and each such check declares a fix for
every kind in ISOLATION_KINDS:
- `isolated-node`: a node at fault (bad with several known-good partners);
- `isolated-link`: the link between two nodes (bad together, each good with others);
- `isolated-boundary`: the path between two topology groups (a trunk, an uplink);
- `straggler`: a node far slower than its groups' median;
- `isolation-ambiguous`: what the evidence narrowed it down to, and what it could be;
- `isolation-not-reproduced`: nothing was singled out (no group reproduced the fault).
The details show each round: which groups, and how each measured.
"""

from __future__ import annotations

from typing import Any

from preflight.launch.nodes import names_text
from preflight.core.model import Measurement

Judged = tuple[str, str, list[Measurement], list[str]]

ISOLATION_KINDS = ("isolated-node", "isolated-link", "isolated-boundary", "straggler", "isolation-ambiguous",
                   "isolation-not-reproduced")


def judge_isolation(facts: dict[str, Any] | None) -> list[Judged]:
    """One entry per attribution (none without facts); the rounds and notes go with the first."""
    if not facts:
        return []
    result = facts.get("isolation") or {}
    rounds = result.get("round_count", 0)
    prefix = f"adaptive isolation ({facts.get('reason')}; {rounds} round{'' if rounds == 1 else 's'})"
    judged = [(kind, f"{prefix}: {text}") for kind, text in map(describe, result.get("attributions", []))]
    if not judged:
        text = ("no group of nodes reproduced the fault on its own: it appears only with all nodes together "
                "(congestion, an oversubscribed uplink, the size of the job), or it was transient")
        if result.get("stopped"):
            text = f"stopped ({result['stopped']}) before anything was singled out"
        judged = [("isolation-not-reproduced", f"{prefix}: {text}")]
    details = round_lines(result) + list(result.get("notes", []))
    return [(kind, text, [], details if index == 0 else []) for index, (kind, text) in enumerate(judged)]


def describe(found: dict[str, Any]) -> tuple[str, str]:
    """An attribution's finding kind and sentence."""
    kind, members, figures = found["kind"], found["members"], found.get("figures") or {}
    if found.get("ambiguous"):
        could = "; ".join(f"{c['kind']} {' - '.join(c['members'])}" for c in found.get("candidates", []))
        return "isolation-ambiguous", (f"the fault is among {names_text(members)}, but the evidence does not single "
                                       "out one component" + (f" (it could be: {could})" if could else ""))
    if kind == "node":
        return "isolated-node", (f"{members[0]} is at fault: bad with {names_text(figures.get('bad_with') or [])}, "
                                 "while they are good with others")
    if kind == "link":
        return "isolated-link", (f"the link between {members[0]} and {members[1]} is at fault: bad together, twice, "
                                 "while each is good with other nodes")
    if kind == "boundary":
        return "isolated-boundary", (f"the path between topology groups {members[0]} and {members[1]} is at fault "
                                     "(a trunk or uplink between them): different pairs across them are bad while "
                                     "each group is good on its own")
    return "straggler", (f"{members[0]} is a straggler: {figures.get('time_s', 0):.3g} s against its groups' median "
                         f"{figures.get('median_s', 0):.3g} s, slow in {figures.get('slow_in')} of "
                         f"{figures.get('observed')} observations")


def round_lines(result: dict[str, Any], limit: int = 8) -> list[str]:
    """One line per round: its groups and how each measured (the first `limit` groups)."""
    lines = []
    for entry in result.get("rounds", []):
        groups = entry["groups"]
        shown = [f"{_group_text(g['members'])} {_state(g)}" for g in groups[:limit]]
        more = f"; and {len(groups) - limit} more groups" if len(groups) > limit else ""
        lines.append(f"isolation round {entry['round']}: " + "; ".join(shown) + more)
    return lines


def _group_text(members: list[str]) -> str:
    return "{" + names_text(members, limit=4) + "}"


def _state(group: dict[str, Any]) -> str:
    if group.get("ok") is None:
        return "not measured" + (f" ({group['note']})" if group.get("note") else "")
    text = "good" if group["ok"] else "bad"
    if group.get("figure") is not None:
        text += f" ({group['figure']:.3g})"
    if not group["ok"] and group.get("note"):
        text += f": {group['note']}"
    return text
