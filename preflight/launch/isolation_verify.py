"""The end of an adaptive isolation pass: every confirmed component measured once more, later, and
a shared cause named before individual blame. Pure.

- verify: when every search and the clearance have ended, each confirmed node, link and boundary is
  measured again, every round, at least LATER times and until `confirm_span` rounds have passed since
  its first bad reading; the last LATER readings decide: all bad, the blame stands; one good (or not
  measured), it becomes a suspect, never acted on (one reading alone is below the floor now and then
  on a healthy fabric). Readings taken in consecutive rounds share whatever lasted that long (a
  neighbour's traffic through one switch); one taken after the others have ended does not.
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

import math
import statistics
from typing import Any, Iterator

from preflight.launch.isolation_types import Attribution, Outcome, Probe, label

LATER = 2  # readings at the end that must all be bad for a blame to stand
STAND_OUT = 3.0  # robust deviations under its peers' median a blamed component's bad readings must be
MIN_PEERS = 6  # figures of other groups the comparison needs


def conclude(e: Any) -> None:
    """The end of the pass, in order: unverified blames become suspects, so do those that do not stand
    out from their peers, and what is left that shares a cause is named as one."""
    unverified(e)
    stand_out(e)
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
    """The confirmed nodes, links and boundaries: each is measured again by a verify_task of its own."""
    return [a for a in e.attributions if a.confidence == "confirmed" and not a.ambiguous
            and a.kind in ("node", "link", "boundary")]


def verify_task(e: Any, found: Attribution) -> Iterator[list[Probe]]:
    """`found` measured again every round until `confirm_span` rounds after its first bad reading; the
    last reading decides whether its blame stands. One task per component, so that those whose
    partners are free this round go on while the others wait."""
    readings: list[Outcome] = []
    while True:
        (outcome,) = yield [_probe(e, found)]
        readings.append(outcome)
        measured = outcome.result is not None and outcome.result.ok is not None
        spread = outcome.round is not None and outcome.round - _first_round(found) >= e.params.confirm_span
        if not measured or outcome.good or (spread and len(readings) >= LATER):
            _decide(found, readings, measured)
            return


def _decide(found: Attribution, readings: list[Outcome], measured: bool) -> None:
    last = readings[-1]  # a good one ends the readings: all the others were bad
    shown = "; ".join(f"round {o.round} {label(o.group)} {'bad' if o.bad else 'good' if o.good else 'not measured'}"
                      for o in readings)
    found.confirmation["later"] = [{"round": o.round, "group": o.group, "bad": o.bad} for o in readings]
    found.rounds = sorted(set(found.rounds) | {o.round for o in readings if o.round is not None})
    if measured and last.bad:
        found.evidence.append(f"measured again later, until {last.round}: {shown}: still bad")
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
            found.evidence.append("the pass ended before it was measured again later: not blamed")


def _figures(e: Any) -> dict[tuple[int, frozenset[str]], tuple[float | None, bool]]:
    """(round, group) -> its figure (None: none) and whether it met its floor, for every group measured."""
    return {(r.index, frozenset(g)): (res.figure, bool(res.ok)) for r in e.rounds for g, res in zip(r.groups, r.results)
            if res.ok is not None}


def standing(found: Attribution, figures: dict[tuple[int, frozenset[str]], tuple[float | None, bool]]) -> str:
    """Why a confirmed node or link does not stand out from its peers ("" when it does, or when there
    is too little to compare it with): its confirming readings, and its readings later in the pass,
    each against the groups without it that met the floor."""
    members = set(found.members)
    readings = found.confirmation.get("measurements", []), found.confirmation.get("later", [])
    mine = [[figures.get((m.get("round"), frozenset(m.get("group") or ())), (None, False))[0] for m in part if m.get("bad")]
            for part in readings]
    # Its peers: the groups without it that met the floor (faults and other jobs' traffic only pull
    # figures down, and a pass measures many groups that hold a fault).
    peers = [f for (_, group), (f, ok) in figures.items() if ok and f is not None and not members <= group]
    if not mine[0] or any(None in part for part in mine) or len(peers) < MIN_PEERS:
        return ""
    # On a log scale: a link's figures spread in proportion to its speed (unshaped links of one fabric
    # read 2 and 6 Gbit/s in one pass), so a fixed number of deviations must mean a factor, never a
    # difference that can reach below zero.
    logs = [math.log(f) for f in peers if f > 0]
    if len(logs) < MIN_PEERS:
        return ""
    typical = statistics.median(logs)
    # The deviation from above (those that met the floor are cut off below it): 1.4826 times the median
    # distance of the figures above the typical one.
    spread = 1.4826 * statistics.median(f - typical for f in logs if f >= typical)
    bar = math.exp(typical - STAND_OUT * spread)
    for part, what in zip(mine, ("bad readings", "readings later in the pass")):
        bad = statistics.median(part) if part else None
        if bad is not None and bad >= bar:
            return (f"its {what} (median {bad:.3g}) do not stand out from the pass's other groups that met the "
                    f"floor (median {math.exp(typical):.3g}; standing out takes under {bar:.3g})")
    return ""


def stand_out(e: Any) -> None:
    """Confirmed nodes and links that do not stand out from their peers become suspects; when one did
    and none is left confirmed, the fleet is named: it reads near its floor, no component stands out."""
    figures = _figures(e)
    demoted = []
    for found in e.attributions:
        if found.confidence != "confirmed" or found.ambiguous or found.kind not in ("node", "link"):
            continue
        why = standing(found, figures)
        if why:
            found.confidence = "unconfirmed"
            found.evidence.append(f"{why}: not blamed")
            demoted.append(found)
    sure = [a for a in e.attributions if a.confidence == "confirmed" and not a.ambiguous and a.kind != "straggler"]
    if demoted and not sure:
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
