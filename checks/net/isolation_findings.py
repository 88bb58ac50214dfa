"""What net.bandwidth's adaptive isolation pass found (preflight_checks.net.isolation facts), as findings. Pure.

`judge_isolation` gives one (kind, level, sentence) per attribution; the kinds become finding ids
under net.bandwidth:
- `isolated-node`: a node at fault (its links are bad with several known-good partners);
- `isolated-link`: the link between two nodes (bad together, twice, each good with other nodes);
- `isolated-boundary`: the path between two topology groups;
- `isolation-ambiguous`: what the evidence narrowed it down to, and what it could be;
- `isolation-not-reproduced`: nothing was singled out (no group reproduced the fault).
`round_lines` shows each round: which groups, and each group's links in Gbit/s.
"""

from __future__ import annotations

from typing import Any

from preflight.core.model import Status
from preflight.launch.nodes import names_text

KINDS = ("isolated-node", "isolated-link", "isolated-boundary", "isolation-ambiguous", "isolation-not-reproduced")


def judge_isolation(facts: dict[str, Any] | None) -> list[tuple[str, Status, str]]:
    """One (kind, level, sentence) per attribution; none without facts."""
    if not facts:
        return []
    result = facts.get("isolation") or {}
    rounds = result.get("round_count", 0)
    floor = (facts.get("thresholds") or {}).get("min_gbps")
    prefix = (f"adaptive isolation ({facts.get('reason')}; {rounds} round{'' if rounds == 1 else 's'}"
              + (f" against {floor:g} Gbit/s" if floor is not None else "") + ")")
    judged = [(kind, level, f"{prefix}: {text}") for kind, level, text in map(describe, result.get("attributions", []))]
    if not judged:
        text = ("no group of nodes reproduced the slow or failed link: it was transient, or it shows only while "
                "every link of the ring carries traffic")
        if result.get("stopped"):
            text = f"stopped ({result['stopped']}) before anything was singled out"
        judged = [("isolation-not-reproduced", Status.WARN, f"{prefix}: {text}")]
    return judged


def describe(found: dict[str, Any]) -> tuple[str, Status, str]:
    """An attribution's finding kind, level and sentence."""
    kind, members, figures = found["kind"], found["members"], found.get("figures") or {}
    unconfirmed = " (unconfirmed: measured once)" if found.get("confidence") == "unconfirmed" else ""
    if found.get("ambiguous") or kind not in ("node", "link", "boundary"):
        could = "; ".join(f"{c['kind']} {' - '.join(c['members'])}" for c in found.get("candidates", []))
        return "isolation-ambiguous", Status.WARN, (
            f"the fault is among {names_text(members)}, but the evidence does not single out one component"
            + (f" (it could be: {could})" if could else ""))
    if kind == "node":
        return "isolated-node", Status.FAIL, (
            f"{members[0]} is at fault{unconfirmed}: its links are slow or fail with "
            f"{names_text(figures.get('bad_with') or [])}, while those nodes' links with others are not")
    if kind == "link":
        return "isolated-link", Status.FAIL, (
            f"the link between {members[0]} and {members[1]} is at fault: slow or failed between the two, twice, "
            "while each of them is good with other nodes")
    return "isolated-boundary", Status.FAIL, (
        f"the path between topology groups {members[0]} and {members[1]} is at fault (a trunk or uplink between them): "
        "different pairs across them are slow while each group is good on its own")


def round_lines(facts: dict[str, Any] | None, limit: int = 8) -> list[str]:
    """One line per round: its groups, how each measured and its links (the first `limit` groups),
    then the pass's notes."""
    if not facts:
        return []
    result = facts.get("isolation") or {}
    lines = []
    for entry in result.get("rounds", []):
        groups = entry["groups"]
        shown = [f"{{{names_text(g['members'], limit=4)}}} {_state(g)}" for g in groups[:limit]]
        more = f"; and {len(groups) - limit} more groups" if len(groups) > limit else ""
        lines.append(f"isolation round {entry['round']}: " + "; ".join(shown) + more)
    return lines + list(result.get("notes", []))


def _state(group: dict[str, Any]) -> str:
    if group.get("ok") is None:
        return "not measured" + (f" ({group['note']})" if group.get("note") else "")
    text = "good" if group["ok"] else "bad"
    return text + (f" [{group['note']}]" if group.get("note") else "")
