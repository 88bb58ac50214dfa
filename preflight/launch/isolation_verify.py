"""The end of an adaptive isolation pass: every confirmed component measured once more, later, and
a shared cause named before individual blame. Pure.

- verify: when every search and the clearance have ended, each confirmed node, link and boundary is
  measured again, every round, at least LATER times and until `confirm_span` rounds have passed since
  its first bad reading; the last LATER readings decide: all bad, the blame stands; one good (or not
  measured), it becomes a suspect, never acted on (one reading alone is below the floor now and then
  on a healthy fabric). Readings taken in consecutive rounds share whatever lasted that long (a
  neighbour's traffic through one switch); one taken after the others have ended does not. A blame that
  falls is released (the engine's `release`): it had kept its node out of the clearance, so once a pass
  every node is measured together again, and what it hid (a link of that node) is searched for.
- a node beside its switch: with a topology, each reading at the end of a confirmed node is taken
  beside one of another node under the same switch (its sibling: a known-good one first), each with a
  known-good partner, in the same round, the node with another partner than before where one is free.
  A node that does not read well under its sibling at the same time, in every pair (below), cannot be
  told from its switch (a neighbour's traffic, its uplink, a fleet at its floor): the blame becomes a
  suspect, and the switch is named as one cause.
- standing out: a confirmed node or link is blamed only when its bad readings stand out from its
  peers: the median of its confirming readings, and that of its readings later in the pass, are each
  more than STAND_OUT deviations under the typical figure of the pass's other groups (the median of
  those without it that met the floor; faults and other jobs' traffic only pull figures down, and a
  pass measures many groups that hold a fault; on a log scale, so that the deviation, 1.4826 times the
  median distance of the figures above the typical one, is a factor: figures spread in proportion). Below an absolute floor alone is not enough: a fleet that reads near its
  floor has every group below it now and then. One that does not stand out is a suspect; when none
  does, the pass names the fleet (`kind` "group", `shared_by` "fleet", a WARN): the whole fleet reads
  near or below its floor and no component stands out; the all-node readings' median then says
  whether the fleet meets its floor (preflight.launch.recheck). With fewer than MIN_PEERS figures of
  other groups, or a reading without a figure (a refused link), the floor decides.
- shared causes: confirmed nodes under one topology group (at least `shared_at_least`, and
  `shared_share` of its nodes) name the group; confirmed links with a common end name that end. Such
  a cause is reported as one (`kind` "group", confirmed), never acted on node by node.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from statistics import NormalDist
from typing import Any, Iterator

from preflight.launch.isolation_types import Attribution, Outcome, Probe, label

LATER = 2  # readings at the end that must all be bad for a blame to stand
STAND_OUT = 3.0  # robust deviations under its peers' median a blamed component's bad readings must be
BESIDE_STAND_OUT = 2.5  # deviations (times sqrt(2/n) for n pairs) a node must read under its sibling in each pair
MIN_PEERS = 6  # figures of other groups the comparison needs
SIBLING_TRIES = 2  # readings at the end more than LATER, while the sibling was not free to be read beside


def conclude(e: Any) -> None:
    """The end of the pass, in order: unverified blames become suspects, so do those that do not stand
    out from their peers and links a blamed node explains, and what is left that shares a cause is
    named as one."""
    unverified(e)
    stand_out(e)
    explained(e)
    shared_causes(e)


def _first_round(found: Attribution) -> int:
    rounds = [m["round"] for m in found.confirmation.get("measurements", []) if m.get("bad") and m.get("round")]
    return min(rounds or found.rounds or [0])


def _probe(e: Any, found: Attribution) -> Probe:
    if found.kind == "node":
        used = frozenset(found.confirmation.get("partners") or [])
        return Probe((found.members[0],), partners=(None,), avoid=used if e.has_good(list(used)) else frozenset(),
                     purpose=f"{found.members[0]} once more, later, with a known-good node")
    if found.kind == "link":
        return Probe(tuple(found.members), purpose=f"{found.members[0]} with {found.members[1]} once more, later")
    return Probe((), partners=tuple(found.members), strict=True,
                 purpose=f"a pair across {found.members[0]} and {found.members[1]} once more, later")


def to_verify(e: Any) -> list[Attribution]:
    """The confirmed nodes, links and boundaries not measured again yet: each is, by a verify_task of its own."""
    return [a for a in e.attributions if a.confidence == "confirmed" and not a.ambiguous
            and a.kind in ("node", "link", "boundary") and "later" not in a.confirmation]


def sibling(e: Any, found: Attribution) -> str | None:
    """Another node under the switch of a confirmed node, what the node's readings at the end are taken
    beside: a known-good one first, then one no attribution names, then any (a suspect too: when every
    other node under the switch reads bad as well, the switch is the cause the evidence points to). None
    without a topology or without another node under the switch."""
    if found.kind != "node" or not e.topology:
        return None
    node = found.members[0]
    named = {n for a in e.attributions for n in a.members}
    under = [n for n in e.nodes if n != node and e.topo(n) == e.topo(node)]
    ranked = sorted(under, key=lambda n: (not e.is_good(n), n in named))
    return ranked[0] if ranked else None


def _sibling_probe(found: Attribution, node: str) -> Probe:
    return Probe((node,), partners=(None,), avoid=frozenset(found.members), optional=True,
                 purpose=f"{node}, under the same switch as {found.members[0]}, at the same time")


def _avoiding(e: Any, probe: Probe, wishes: list[frozenset[str]]) -> Probe:
    """`probe` with the first of `wishes` left out of its partners that leaves a known-good one."""
    blamed = {n for n in e.nodes if e.is_blamed(n)}
    for wish in wishes:
        wish = frozenset(n for n in wish if n)
        if e.has_good(list(probe.avoid | wish | set(probe.members) | blamed)):
            return dataclasses.replace(probe, avoid=probe.avoid | wish)
    return probe


def verify_task(e: Any, found: Attribution) -> Iterator[list[Probe]]:
    """`found` measured again every round until `confirm_span` rounds after its first bad reading; the
    last reading decides whether its blame stands, and for a node, what its sibling under the same
    switch read at the same time. One task per component, so that those whose partners are free this
    round go on while the others wait."""
    readings: list[Outcome] = []
    beside: list[Outcome | None] = []
    other = sibling(e, found)
    while True:
        probe = _probe(e, found)
        if found.kind == "node":
            # Not its sibling, and another partner than before each time (a partner under a switch slow
            # then reads as the node): what can be left out while a known-good partner remains.
            done = frozenset(p for o in readings for p in o.partners)
            probe = _avoiding(e, probe, [done | {other}, frozenset({other})] if other else [done])
        if other is None:
            (outcome,) = yield [probe]
            beside.append(None)
        else:
            outcome, next_to = yield [probe, _sibling_probe(found, other)]
            beside.append(next_to)
        readings.append(outcome)
        measured = _measured(outcome)
        spread = outcome.round is not None and outcome.round - _first_round(found) >= e.params.confirm_span
        # With a sibling: LATER readings beside it, when it is free often enough (a few readings more at most).
        paired = sum(map(_measured, beside))
        enough = other is None or paired >= LATER or len(readings) >= LATER + SIBLING_TRIES
        if not measured or outcome.good or (spread and len(readings) >= LATER and enough):
            _decide(found, readings, measured, beside)
            if found.confidence != "confirmed":
                e.release(found)
            return


def _measured(o: Outcome | None) -> bool:
    """Whether a probe was run and its group measured (a figure judged against the floor)."""
    return o is not None and o.result is not None and o.result.ok is not None


def _state(o: Outcome) -> str:
    return "bad" if o.bad else "good" if o.good else "not measured"


def _decide(found: Attribution, readings: list[Outcome], measured: bool,
            beside: list[Outcome | None] | None = None) -> None:
    last = readings[-1]  # a good one ends the readings: all the others were bad
    shown = "; ".join(f"round {o.round} {label(o.group)} {_state(o)}" for o in readings)
    found.confirmation["later"] = [{"round": o.round, "group": o.group, "bad": o.bad} for o in readings]
    found.rounds = sorted(set(found.rounds) | {o.round for o in readings if o.round is not None})
    if measured and last.bad:
        # Every reading at the end was bad (a good one ends them), each beside its sibling's when it was read.
        pairs = [(o, b) for o, b in zip(readings, beside or []) if _measured(b)]
        if pairs:
            found.confirmation["beside"] = [{"round": b.round, "group": b.group, "bad": b.bad} for _, b in pairs]
        compared = ("; beside it, another node under the same switch: "
                    + "; ".join(f"round {b.round} {label(b.group)} {_state(b)}" for _, b in pairs)) if pairs else ""
        found.evidence.append(f"measured again later, until {last.round}: {shown}: still bad{compared}")
        return
    why = "not measured" if not measured else "good"
    found.evidence.append(f"measured again later: {shown}: {why} at the end, so not blamed")
    found.confidence = "unconfirmed"


def unverified(e: Any) -> None:
    """A confirmed component the pass ended (stopped, out of rounds) before measuring again is a
    suspect: nothing is acted on without the readings at the end."""
    if not e.params.verify:
        return
    for found in to_verify(e):
        if "later" not in found.confirmation:
            found.confidence = "unconfirmed"
            found.confirmation["ended_before_later"] = True  # the suspect's finding says so, and how to give it time
            found.evidence.append("the pass ended before it was measured again later: not blamed")


def explained(e: Any) -> None:
    """A confirmed link with an end that is itself confirmed at fault is a suspect: every pair of a slow
    node reads bad, and the pair was taken for a link when the node read good once with a partner."""
    blamed = {a.members[0] for a in e.attributions if a.kind == "node" and a.confidence == "confirmed" and not a.ambiguous}
    for found in e.attributions:
        ends = sorted(blamed & set(found.members)) if found.kind == "link" and not found.ambiguous else []
        if ends and found.confidence == "confirmed":
            found.confidence = "unconfirmed"
            found.evidence.append(f"{ends[0]} is confirmed at fault itself, and every pair of a slow node reads bad: "
                                  "the node explains it; not blamed")


def _figures(e: Any) -> dict[tuple[int, frozenset[str]], tuple[float | None, bool]]:
    """(round, group) -> its figure (None: none) and whether it met its floor, for every group measured."""
    return {(r.index, frozenset(g)): (res.figure, bool(res.ok)) for r in e.rounds for g, res in zip(r.groups, r.results)
            if res.ok is not None}


def standing(found: Attribution, figures: dict[tuple[int, frozenset[str]], tuple[float | None, bool]]) -> tuple[str, bool]:
    """Why a confirmed node or link does not stand out ("" when it does, or when there is too little to
    compare it with), and whether it is its switch it does not stand out from: its confirming readings,
    and its readings later in the pass, each against the groups without it that met the floor; then a
    node against its sibling under the same switch, read at the same time."""
    members = set(found.members)
    readings = found.confirmation.get("measurements", []), found.confirmation.get("later", [])
    mine = [[figures.get((m.get("round"), frozenset(m.get("group") or ())), (None, False))[0] for m in part if m.get("bad")]
            for part in readings]
    if not mine[0] or any(None in part for part in mine):
        return "", False
    # The groups without it, on a log scale: a link's figures spread in proportion to its speed (unshaped
    # links of one fabric read 2 and 6 Gbit/s in one pass), so a fixed number of deviations must mean a
    # factor, never a difference that can reach below zero. Its peers are those that met the floor
    # (faults and other jobs' traffic only pull figures down, and a pass measures many groups that hold a fault).
    others = [(math.log(f), ok) for (_, group), (f, ok) in figures.items()
              if f is not None and f > 0 and not members <= group]
    logs = [f for f, ok in others if ok]
    if len(logs) < MIN_PEERS:
        why = _beside_sibling(found, figures, None)
        return why, bool(why)
    typical = statistics.median(logs)
    # The deviation from above (those that met the floor are cut off below it): 1.4826 times the median
    # distance of the figures above the typical one.
    spread = 1.4826 * statistics.median(f - typical for f in logs if f >= typical)
    bar = math.exp(typical - STAND_OUT * spread)
    for part, what in zip(mine, ("bad readings", "readings later in the pass")):
        bad = statistics.median(part) if part else None
        if bad is not None and bad >= bar:
            return (f"its {what} (median {bad:.3g}) do not stand out from the pass's other groups that met the "
                    f"floor (median {math.exp(typical):.3g}; standing out takes under {bar:.3g})"), False
    why = _beside_sibling(found, figures, max(spread, _reading_noise([f for f, _ in others])), math.exp(typical))
    return why, bool(why)


# The 75th to the 90th percentile of a normal distribution, in its deviations.
_UPPER_SPACING = NormalDist().inv_cdf(0.9) - NormalDist().inv_cdf(0.75)


def _reading_noise(logs: list[float]) -> float:
    """How much one reading deviates (log scale), from the upper quantiles of `logs`, every figure of the
    pass without the component (the 75th to the 90th percentile, in normal deviations): faults and other
    jobs' traffic only pull figures down, and above the middle nothing is cut off at the floor, where the
    groups that met it, in a fleet just above it, spread less than a reading does. 0.0: too few figures."""
    if len(logs) < MIN_PEERS:
        return 0.0
    twentieths = statistics.quantiles(logs, n=20, method="inclusive")
    return (twentieths[17] - twentieths[14]) / _UPPER_SPACING


def _beside_sibling(found: Attribution, figures: dict[tuple[int, frozenset[str]], tuple[float | None, bool]],
                    spread: float | None, typical: float | None = None) -> str:
    """Why a node does not stand out from its sibling under the same switch, read in the same rounds at the
    end ("" when it does, or when no pair of figures was taken): in every pair the difference (log scale)
    must exceed BESIDE_STAND_OUT deviations times sqrt(2/n) for n pairs (one difference of two readings
    deviates sqrt(2) times as much as one reading). Every pair, not their mean: heavy-tailed noise puts
    one reading far under now and then, a fault shows in each. A sibling's figure counts up to `typical`
    (the pass's typical figure): a sibling's lucky burst says nothing of the node. `spread` None: the pass
    has too few figures to know its noise; a sibling that read bad in every such round is enough."""
    later = {m.get("round"): m for m in found.confirmation.get("later", [])}
    pairs = []
    for b in found.confirmation.get("beside", []):
        m = later.get(b.get("round"))
        if m is None:
            continue
        mine = figures.get((m["round"], frozenset(m.get("group") or ())), (None, False))[0]
        theirs = figures.get((b["round"], frozenset(b.get("group") or ())), (None, False))[0]
        if mine is not None and theirs is not None and mine > 0 and theirs > 0:
            pairs.append((b, mine, theirs))
    if not pairs:
        return ""
    if spread is None:  # too few figures of the pass to know its noise: the floor decides
        if all(b["bad"] for b, _, _ in pairs):
            shown = "; ".join(f"round {b['round']} {label(b['group'])} bad" for b, _, _ in pairs)
            return f"another node under its switch read bad at the same time ({shown})"
        return ""
    cap = math.inf if typical is None else typical
    gap = min(math.log(min(theirs, cap)) - math.log(mine) for _, mine, theirs in pairs)
    margin = BESIDE_STAND_OUT * spread * math.sqrt(2 / len(pairs))
    if gap >= margin:
        return ""
    shown = "; ".join(f"round {b['round']} {mine:.3g} beside {theirs:.3g} ({label(b['group'])})" for b, mine, theirs in pairs)
    typical_part = f", counted up to the pass's typical {typical:.3g}" if typical is not None else ""
    return (f"at the end it read {shown} of another node under its switch{typical_part}: {math.exp(-gap):.3g} of it "
            f"in its closest pair (standing out takes under {math.exp(-margin):.3g} in every pair)")


def stand_out(e: Any) -> None:
    """Confirmed nodes and links that do not stand out from their peers become suspects; when one did
    and none is left confirmed, the fleet is named: it reads near its floor, no component stands out.
    Nodes that do not stand out from another node under their switch name that switch, as one cause."""
    figures = _figures(e)
    demoted: list[Attribution] = []
    by_switch: dict[str, list[Attribution]] = {}
    for found in e.attributions:
        if found.confidence != "confirmed" or found.ambiguous or found.kind not in ("node", "link"):
            continue
        why, switch = standing(found, figures)
        if why:
            found.confidence = "unconfirmed"
            found.evidence.append(f"{why}: not blamed")
            if switch:
                by_switch.setdefault(str(e.topo(found.members[0])), []).append(found)
            else:
                demoted.append(found)
    for group, found in by_switch.items():
        parts = [{"kind": a.kind, "members": a.members} for a in found]
        e.attributions.append(Attribution(
            "group", [group], [f"{', '.join(a.members[0] for a in found)} read bad to the end, but no worse than "
                               f"another node under topology group {group} read at the same time: the group is slow "
                               "then (a neighbour's traffic, its uplink), not one node; named as one cause, not acted "
                               "on node by node"],
            sorted({r for a in found for r in a.rounds}), confidence="unconfirmed",
            figures={"shared_by": "group", "components": parts}))
        e.note(f"shared cause: topology group {group}, its nodes no worse than one another")
    sure = [a for a in e.attributions if a.confidence == "confirmed" and not a.ambiguous and a.kind != "straggler"]
    if demoted and not sure and not by_switch:
        parts = [{"kind": a.kind, "members": a.members} for a in demoted]
        e.attributions.append(Attribution(
            "group", [], [f"{len(demoted)} components read bad as often as blaming asks, but none stands out from "
                          "the other groups: the whole fleet reads near or below its floor"],
            sorted({r for a in demoted for r in a.rounds}), confidence="unconfirmed",
            figures={"shared_by": "fleet", "components": parts}))
        e.note("the whole fleet reads near or below its floor: no component stands out")


def shared_causes(e: Any) -> None:
    """Confirmed nodes under one topology group, and confirmed links with a common end, named as one
    shared cause in place of each of them."""
    p = e.params
    sure = [a for a in e.attributions if a.confidence == "confirmed" and not a.ambiguous]
    merged: list[tuple[str, str, list[Attribution], list[str]]] = []
    if e.topology:
        by_group: dict[str, list[Attribution]] = {}
        for a in sure:
            if a.kind == "node":
                by_group.setdefault(e.topology[a.members[0]], []).append(a)
        size = {g: sum(1 for n in e.nodes if e.topology[n] == g) for g in by_group}
        for group, found in by_group.items():
            if len(found) >= p.shared_at_least and len(found) >= p.shared_share * size[group]:
                merged.append(("group", f"topology group {group}", found, [group]))
    ends: dict[str, list[Attribution]] = {}
    for a in sure:
        if a.kind == "link":
            for node in a.members:
                ends.setdefault(node, []).append(a)
    taken: set[int] = set()
    for node, found in ends.items():
        if len(found) >= 2 and not taken & {id(a) for a in found}:
            taken.update(id(a) for a in found)
            merged.append(("node", f"node {node}, the common end of {len(found)} links", found, [node]))
    for by, what, found, members in merged:
        rounds = sorted({r for a in found for r in a.rounds})
        parts = [f"{a.kind} {' - '.join(a.members)}" for a in found]
        e.attributions = [a for a in e.attributions if all(a is not f for f in found)]
        e.attributions.append(Attribution(
            "group", members, [f"{len(found)} components confirmed at once share one cause, {what}: "
                               + ", ".join(parts) + "; named as one cause, not acted on node by node"],
            rounds, figures={"shared_by": by,
                             "components": [{"kind": a.kind, "members": a.members} for a in found]}))
        e.note(f"shared cause: {what} ({len(found)} components confirmed)")
