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
- a node beside its switch: with a topology, each reading at the end of a confirmed node is taken beside
  those of up to SIBLINGS other nodes under the same switch (its siblings: known-good ones first, none
  confirmed itself and still read at the end), each with a known-good partner, in the same round, the
  node with another partner than before where one is free; the readings at the end of the others under
  the switch confirmed too, taken in the same rounds, count as siblings' (`switch_readings`). A node
  that does not read well under the median of its siblings at the same time, in every round (below;
  beside several, by the pairs' spread within a round, without the confirmed components' pairs where
  enough are left, round_noise), cannot be told from its switch (a neighbour's traffic, its uplink, a
  fleet at its floor): the blame becomes a suspect, and the switch is named as one cause. So does one
  whose confirming readings were no worse, by their median, than those of the other nodes under its
  switch confirmed in the same rounds and cleared at the end (`first_switch_readings`): its switch
  confirmed it, and its blame would rest on the end alone; and one under a switch so named, than those
  of the nodes named with it (`switch_of_group`): a switch slow for minutes confirms every node under
  it, and one of a dozen read at the end beside the others stands out on two heavy-tailed bursts now and
  then. A sibling confirmed itself is read beside the node once its own readings at the end are over: a
  switch slow that long confirms its nodes in turn.
- standing out: a confirmed node or link is blamed only when its bad readings stand out from its
  peers' and, for a node, from its siblings' read at the same time (preflight.launch.isolation_standing);
  one that does not is a suspect; when none does, the pass names the fleet (`kind` "group",
  `shared_by` "fleet", a WARN): the whole fleet reads near or below its floor.
- shared causes: confirmed nodes under one topology group (at least `shared_at_least`, and
  `shared_share` of its nodes) name the group; confirmed links with a common end name that end. Such
  a cause is reported as one (`kind` "group", confirmed), never acted on node by node.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from preflight.launch.isolation_standing import Figures, standing
from preflight.launch.isolation_types import LATER, Attribution, Outcome, Probe, label

SIBLINGS = 3  # other nodes under its switch a node is read beside at the end, each round (their median counts)
SIBLING_TRIES = 2  # readings at the end more than LATER, while the sibling was not free to be read beside


def conclude(e: Any) -> None:
    """The end of the pass, in order: unverified blames become suspects, so do those that do not stand
    out from their peers and links a blamed node explains, what is left that shares a cause is named as
    one, and a node still at fault is not also a straggler: its own fault says more (one whose blame the
    end did not bear out stays a straggler)."""
    unverified(e)
    stand_out(e)
    explained(e)
    shared_causes(e)
    nodes = at_fault(e)
    e.attributions = [a for a in e.attributions if not (a.kind == "straggler" and a.members[0] in nodes)]


def at_fault(e: Any) -> set[str]:
    """The nodes confirmed at fault (a node attribution, confirmed and not ambiguous)."""
    return {a.members[0] for a in e.attributions if a.kind == "node" and a.sure}


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
    return [a for a in e.attributions if a.sure
            and a.kind in ("node", "link", "boundary") and "later" not in a.confirmation]


def siblings(e: Any, found: Attribution) -> list[str]:
    """Other nodes under the switch of a confirmed node (SIBLINGS at most), what the node's readings at
    the end are taken beside: known-good ones first, then ones no attribution names, then any (a suspect
    too: when every other node under the switch reads bad as well, the switch is the cause the evidence
    points to). Not a node confirmed itself while its own readings at the end go on: it is read by a task
    of its own, in the same rounds, and that reading counts as a sibling's (switch_readings); read beside
    this one too, it would wait for it. One whose readings at the end are over, still bad, is free again:
    a switch slow for minutes (another job's traffic) confirms its nodes in turn, a search after another,
    and the last one confirmed, read beside nobody, would be blamed alone for what its switch did. None
    without a topology or without another node under the switch."""
    if found.kind != "node" or not e.topology:
        return []
    node = found.members[0]
    named = {n for a in e.attributions for n in a.members}
    reading = {n for a in e.attributions if a.sure and "later" not in a.confirmation for n in a.members}
    under = [n for n in e.nodes if n != node and e.topo(n) == e.topo(node) and n not in reading]
    return sorted(under, key=lambda n: (not e.is_good(n), n in named))[:SIBLINGS]


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
    beside: list[list[Outcome]] = []
    node = found.members[0]
    switched = found.kind == "node" and any(n != node and e.topo(n) == e.topo(node) for n in e.nodes if e.topology)
    while True:
        others = siblings(e, found)  # each round: a sibling confirmed before may have been cleared since
        probe = _probe(e, found)
        if found.kind == "node":
            # Not its siblings, and another partner than before each time (a partner under a switch slow
            # then reads as the node): what can be left out while a known-good partner remains.
            done = frozenset(p for o in readings for p in o.partners)
            probe = _avoiding(e, probe, [done | set(others), frozenset(others)] if others else [done])
        outcome, *next_to = yield [probe, *(_sibling_probe(found, other) for other in others)]
        beside.append([b for b in next_to if _measured(b)])
        readings.append(outcome)
        measured = _measured(outcome)
        spread = outcome.round is not None and outcome.round - _first_round(found) >= e.params.confirm_span
        # With siblings: LATER readings beside theirs, when they are free often enough (a few readings more at most).
        paired = len({m["round"] for m in _switch_pairs(e, node, {o.round for o in readings})}) if switched else 0
        enough = not switched or paired >= LATER or len(readings) >= LATER + SIBLING_TRIES
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
            beside: list[list[Outcome]] | None = None) -> None:
    last = readings[-1]  # a good one ends the readings: all the others were bad
    shown = "; ".join(f"round {o.round} {label(o.group)} {_state(o)}" for o in readings)
    found.confirmation["later"] = [{"round": o.round, "group": o.group, "bad": o.bad} for o in readings]
    found.rounds = sorted(set(found.rounds) | {o.round for o in readings if o.round is not None})
    if measured and last.bad:
        # Every reading at the end was bad (a good one ends them), each beside its siblings' that were read
        # (what the blame is judged beside, switch_readings, is gathered from the rounds at the end).
        pairs = [b for o, next_to in zip(readings, beside or []) for b in next_to]
        who = "another node" if len({b.group[0] for b in pairs}) == 1 else "other nodes"
        compared = (f"; beside it, {who} under the same switch: "
                    + "; ".join(f"round {b.round} {label(b.group)} {_state(b)}" for b in pairs)) if pairs else ""
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
    blamed = at_fault(e)
    for found in e.attributions:
        ends = sorted(blamed & set(found.members)) if found.kind == "link" and not found.ambiguous else []
        if ends and found.confidence == "confirmed":
            found.confidence = "unconfirmed"
            found.evidence.append(f"{ends[0]} is confirmed at fault itself, and every pair of a slow node reads bad: "
                                  "the node explains it; not blamed")


def _figures(e: Any) -> Figures:
    """(round, group) -> its figure (None: none) and whether it met its floor, for every group measured."""
    return {(r.index, frozenset(g)): (res.figure, bool(res.ok)) for r in e.rounds for g, res in zip(r.groups, r.results)
            if res.ok is not None}


def switch_readings(e: Any, found: Attribution) -> list[dict[str, Any]]:
    """Every pair read in the rounds of a confirmed node's readings at the end that holds another node under
    its switch and not the node: its siblings read beside it, and the readings at the end of the others
    under the switch that were confirmed too (a neighbour's traffic confirms them all at once, and then no
    sibling is free to be read beside any of them). Not a pair whose node from elsewhere is confirmed
    itself: its reading is that node's."""
    if found.kind != "node" or not e.topology:
        return []
    return _switch_pairs(e, found.members[0], {m.get("round") for m in found.confirmation.get("later", [])})


def _switch_pairs(e: Any, node: str, rounds: set[Any]) -> list[dict[str, Any]]:
    switch = e.topo(node)
    confirmed = {a.members[0] for a in e.attributions if a.kind == "node" and a.confidence == "confirmed"}
    return [{"round": r.index, "group": list(g), "bad": res.ok is False} for r in e.rounds if r.index in rounds
            for g, res in zip(r.groups, r.results)
            if len(g) == 2 and node not in g and res.ok is not None and any(e.topo(n) == switch for n in g)
            and not any(e.topo(n) != switch and n in confirmed for n in g)]


def first_switch_readings(e: Any, found: Attribution) -> list[dict[str, Any]]:
    """The confirming readings of the other nodes under a confirmed node's switch that were confirmed in
    the same rounds and cleared at the end, in those rounds: a neighbour's traffic through the switch
    confirms every node under it at once, each with a known-good partner (the search splits a bad switch
    into pairs, and both of a pair read bad then), and the end clears them; one that reads bad at the end
    too by chance, no worse than they when confirmed, was confirmed by its switch, not by itself."""
    if found.kind != "node" or not e.topology:
        return []
    node = found.members[0]
    return _confirming_beside(found, [
        a for a in e.attributions if a.kind == "node" and a.members[0] != node and not a.ambiguous
        and e.topo(a.members[0]) == e.topo(node) and "later" in a.confirmation and a.confidence != "confirmed"])


def _confirming_beside(found: Attribution, others: list[Attribution]) -> list[dict[str, Any]]:
    """The confirming readings of `others` taken in the rounds of `found`'s bad confirming readings."""
    rounds = {m.get("round") for m in found.confirmation.get("measurements", []) if m.get("bad")}
    return [{"round": m.get("round"), "group": list(m.get("group") or ()), "bad": bool(m.get("bad"))}
            for a in others for m in a.confirmation.get("measurements", []) if m.get("round") in rounds]


def _not_blamed(found: Attribution, why: str) -> None:
    """A confirmed blame that does not stand out becomes a suspect, saying why."""
    found.confidence = "unconfirmed"
    found.evidence.append(f"{why}: not blamed")


def stand_out(e: Any) -> None:
    """Confirmed nodes and links that do not stand out from their peers become suspects; when one did
    and none is left confirmed, the fleet is named: it reads near its floor, no component stands out.
    Nodes that do not stand out from another node under their switch name that switch, as one cause."""
    figures = _figures(e)
    demoted: list[Attribution] = []
    by_switch: dict[str, list[Attribution]] = {}
    sure = [a for a in e.attributions if a.sure and a.kind in ("node", "link")]
    for found in sure:  # before any is demoted: a sibling that stays confirmed to the end never counts
        for key, pairs in (("beside", switch_readings(e, found)), ("beside_first", first_switch_readings(e, found))):
            if pairs:
                found.confirmation[key] = pairs
    named = frozenset(n for a in sure for n in a.members)
    for found in sure:
        why, switch = standing(found, figures, named)
        if why:
            _not_blamed(found, why)
            if switch:
                by_switch.setdefault(str(e.topo(found.members[0])), []).append(found)
            else:
                demoted.append(found)
    switch_of_group(e, figures, named, by_switch)
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
    sure = [a for a in e.attributions if a.sure and a.kind != "straggler"]
    if demoted and not sure and not by_switch:
        parts = [{"kind": a.kind, "members": a.members} for a in demoted]
        e.attributions.append(Attribution(
            "group", [], [f"{len(demoted)} components read bad as often as blaming asks, but none stands out from "
                          "the other groups: the whole fleet reads near or below its floor"],
            sorted({r for a in demoted for r in a.rounds}), confidence="unconfirmed",
            figures={"shared_by": "fleet", "components": parts}))
        e.note("the whole fleet reads near or below its floor: no component stands out")


def switch_of_group(e: Any, figures: Figures,
                    named: frozenset[str], by_switch: dict[str, list[Attribution]]) -> None:
    """A node still confirmed under a switch that is named as one cause (`by_switch`: its nodes read no
    worse than one another) joins that cause unless it also stands out in its confirming readings beside
    theirs, taken in the same rounds: a neighbour's traffic through a switch for minutes confirms every
    node under it, and one of a dozen, read beside them at the end, reads a heavy-tailed burst under
    them twice now and then; a node slow itself reads under them when confirmed as well. Not where the
    switch was well at the end (most of the siblings read beside the node then read good): the node
    stood out from a switch that is well, and those named with the switch were slow themselves (two slow
    nodes under one switch, each read beside the other). A node read beside none at the end (its
    siblings were confirmed and still being read) is judged by its confirming readings alone."""
    for found in [a for a in e.attributions if a.sure and a.kind == "node"]:
        grouped = by_switch.get(str(e.topo(found.members[0])))
        beside = found.confirmation.get("beside", [])
        if not grouped or beside and 2 * sum(bool(b.get("bad")) for b in beside) <= len(beside):
            continue
        pairs = _confirming_beside(found, grouped)
        if not pairs:
            continue
        found.confirmation["beside_first"] = found.confirmation.get("beside_first", []) + pairs
        why, _ = standing(found, figures, named)
        if why:
            _not_blamed(found, why)
            grouped.append(found)


def shared_causes(e: Any) -> None:
    """Confirmed nodes under one topology group, and confirmed links with a common end, named as one
    shared cause in place of each of them."""
    p = e.params
    sure = [a for a in e.attributions if a.sure]
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
