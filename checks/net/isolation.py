"""The adaptive isolation pass of net.bandwidth: preflight.launch.isolation over rounds of iperf3 rings.

When the ring screen finds links below the floor (or failed), `adaptive_pass` gives
preflight.launch.isolation.isolate a measure() in which each group of a round measures its own ring:
its members in the order the check was given them, each sending to the next and the last to the
first (a group of two: each to the other). Every link of every group of a round runs at once; the
groups are disjoint, so each node runs one iperf3 server (for its predecessor) and one client (to
its successor) at a time. A group is bad when any of its links is below the floor or failed; its
figure is its slowest link, its note every link's figure.

What a group's ring exercises, and why the searches can rely on it: isolate assumes that a group
exercises the paths between its members, and that a fault seen in a group is seen again in every
smaller group that still holds the faulty component. A ring does not exercise every pair of its
members, but because each ring follows the check's node order:
- a link the ring screen measured (each node to the next, the last to the first) is measured, in
  the same direction, by every group that holds both its ends: no other member of the group lies
  between two neighbours in that order, and the closing link is the group's own closing link;
- more generally, two members adjacent in a group's ring are adjacent in every subset of the group
  that holds them both, so the split, between and cross searches, which only ever measure parts of
  a bad group, keep exercising the link that made it bad; a node and a known-good partner (a group
  of two) are measured both ways;
- a node whose NIC is slow slows every link it sends or receives on, so any group holding it is bad.
What cannot be found: a fault only on a pair the ring screen does not measure (two nodes that are not
neighbours in the node order) never makes the screen bad, so no pass starts for it; pattern "full"
measures every ordered pair. Between topology groups, a ring of one node per group crosses only the
boundaries of neighbouring groups in the node order (all of them with three groups or fewer).

Which groups are measured depends on how the earlier ones were judged, so the pass judges while it
collects, against the floor of the run (kept in the facts). One measurement per link per round:
isolate itself measures a suspect again before naming it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from preflight.launch.isolation import GroupResult, IsolationParams, Stop, isolate
from preflight.launch.isolation_types import pass_rounds

ISOLATION_METHODS = ("adaptive", "off")
# Links named in a group's note; a bigger group's note says how many more there are.
NOTE_LINKS = 8
KEPT = ("gbps", "error", "unmeasurable")  # of each sample, in the facts' record of the rounds

Pair = tuple[str, str]
# pairs -> per pair one sample: {"gbps": x} or {"error": why}, with "unmeasurable": True when the
# link cannot be measured at all (a route local to the sender, an address that does not resolve).
MeasureLinks = Callable[[list[Pair]], dict[Pair, dict[str, Any]]]


def group_links(group: list[str], order: dict[str, int]) -> list[Pair]:
    """The links a group's ring measures: members in the check's node order, each to the next and
    the last to the first; two members: each to the other."""
    members = sorted(group, key=order.__getitem__)
    if len(members) < 2:
        return []
    if len(members) == 2:
        return [(members[0], members[1]), (members[1], members[0])]
    return [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]


def screen_reason(links: list[dict[str, Any]], min_gbps: float) -> str | None:
    """Why the ring screen calls for isolation (links below the floor or failed), or None. Links with
    a route local to the sender or an address error are configuration, not faults to isolate."""
    slow, failed = [], []
    for link in links:
        if link.get("local") or link.get("error"):
            continue
        values = sorted(s["gbps"] for s in link.get("samples", []) if "gbps" in s)
        label = f"{link['src']} -> {link['dst']}"
        if not values:
            failed.append(label)
        elif values[len(values) // 2] < min_gbps:  # the median, the lower one of an even count
            slow.append(label)
    parts = []
    if slow:
        parts.append(f"{len(slow)} ring link{'' if len(slow) == 1 else 's'} below {min_gbps:g} Gbit/s")
    if failed:
        parts.append(f"{len(failed)} ring link{'' if len(failed) == 1 else 's'} failed")
    return " and ".join(parts) or None


def group_result(links: list[Pair], samples: dict[Pair, dict[str, Any]], min_gbps: float) -> GroupResult:
    """A group's ring judged: bad when a link is below `min_gbps` or failed; None when a link cannot
    be measured at all (nothing is known of the group then)."""
    if not links:
        return GroupResult(None, note="one node: no link to measure")
    texts, values, bad, unmeasurable = [], [], False, []
    for pair in links:
        sample = samples.get(pair) or {"error": "not measured"}
        label = f"{pair[0]} -> {pair[1]}"
        if sample.get("unmeasurable"):
            unmeasurable.append(f"{label}: {sample.get('error', 'cannot be measured')}")
        elif "gbps" in sample:
            values.append(sample["gbps"])
            low = sample["gbps"] < min_gbps
            bad = bad or low
            texts.append((not low, f"{label} {sample['gbps']:.3g}{' (below the floor)' if low else ''}"))
        else:
            bad = True
            texts.append((False, f"{label} failed: {sample.get('error', 'no result')}"))
    if unmeasurable:
        return GroupResult(None, note="; ".join(unmeasurable[:2]))
    # The bad links first, so a big group's note still names them.
    texts.sort(key=lambda item: item[0])
    shown = [text for _, text in texts[:NOTE_LINKS]]
    more = f"; and {len(texts) - NOTE_LINKS} more links" if len(texts) > NOTE_LINKS else ""
    return GroupResult(not bad, figure=round(min(values), 3) if values else None,
                       note="Gbit/s: " + "; ".join(shown) + more)


def adaptive_pass(nodes: list[str], measure_links: MeasureLinks, *, min_gbps: float, budget_s: float,
                  round_s: float, reason: str, max_rounds: int | None = None,
                  topology: dict[str, str] | None = None) -> dict[str, Any]:
    """Isolate what made the ring over `nodes` bad (`reason`: why; the ring screen is the first
    round's result). Each round measures every group's ring at once through `measure_links`; a round
    is expected to take `round_s`, and none starts with less than that left of `budget_s`."""
    order = {n: i for i, n in enumerate(nodes)}
    start = time.monotonic()
    deadline = start + budget_s
    measured: list[list[dict[str, Any]]] = []

    def measure(groups: list[list[str]]) -> list[GroupResult]:
        if deadline - time.monotonic() < round_s:
            raise Stop(f"the pass's time limit of {budget_s:.0f}s")
        per_group = [group_links(g, order) for g in groups]
        samples = measure_links([pair for links in per_group for pair in links])
        measured.append([{"src": s, "dst": d, **{k: v for k, v in samples.get((s, d), {}).items() if k in KEPT}}
                         for links in per_group for s, d in links])
        return [group_result(links, samples, min_gbps) for links in per_group]

    params = IsolationParams(max_rounds=max_rounds)
    result = isolate(list(nodes), measure, topology=topology, screen=GroupResult(False, note=reason), params=params)
    return {"method": "adaptive", "reason": reason, "budget_s": round(budget_s, 1),
            "thresholds": {"min_gbps": min_gbps}, "wall_s": round(time.monotonic() - start, 2),
            "isolation": result.to_dict(), "links": measured}


# -- the pass's rounds and time ----------------------------------------------------------------------

# The isolation pass's time that net.bandwidth's timeout_s holds already; a longer pass adds the rest
# (preflight.launch.isolation_launch.timeout_with_pass).
ISOLATION_IN_TIMEOUT_S = 120.0


def round_time(params: Any) -> float:
    """One round's time, as the schedule's estimate has it (seconds): traffic, plus starting and reporting."""
    return params.duration_s + params.omit_s + 3


def isolation_rounds(params: Any, count: int) -> int:
    """The most rounds of the pass over `count` nodes: `isolation_max_rounds`, else what a pass at that
    size needs (preflight.launch.isolation_types.pass_rounds)."""
    return params.isolation_max_rounds if params.isolation_max_rounds is not None else pass_rounds(count)


def isolation_budget(params: Any, count: int) -> float:
    """The pass's time over `count` nodes (seconds): `isolation_timeout_s`, else its rounds'."""
    if params.isolation_timeout_s is not None:
        return params.isolation_timeout_s
    return isolation_rounds(params, count) * round_time(params)


def rounds_given(params: Any, count: int) -> int:
    """The rounds `params` let a pass over `count` nodes run: its rounds, within its time."""
    return min(isolation_rounds(params, count), int(isolation_budget(params, count) // round_time(params)))

