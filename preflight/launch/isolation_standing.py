"""How a confirmed node or link stands out from its peers, by the figures of the pass: what the end
of an isolation pass (preflight.launch.isolation_verify) judges each blame by. Pure.

- against the pass: a confirmed node or link is blamed only when its bad readings stand out from its
  peers: the median of its confirming readings, and that of its readings later in the pass, are each
  more than STAND_OUT deviations under the typical figure of the pass's other groups (the median of
  those without it that met the floor; faults and other jobs' traffic only pull figures down, and a pass
  measures many groups that hold a fault; on a log scale, so that the deviation is a factor: figures
  spread in proportion). The deviation is 1.4826 times the median distance of the figures above the
  typical one; with fewer than FEW_ABOVE of them (a pass of a few nodes), where it strays, the geometric
  mean of that and the 75th to the 90th percentile of all of them in normal deviations. Below an
  absolute floor alone is not enough: a fleet that reads near its floor has every group below it now and
  then. With fewer than MIN_PEERS figures of other groups, or a reading without a figure (a refused
  link), the floor decides.
- beside its switch: a node that does not read well under the median of its siblings read at the same
  time, in every round at the end (beside several, by the pairs' spread within a round, without the
  confirmed components' pairs where enough are left: round_noise), or whose confirming readings were no
  worse than those of siblings confirmed in the same rounds, by the median of the differences
  (beside_sibling), cannot be told from its switch.
"""

from __future__ import annotations

import math
import statistics
from statistics import NormalDist
from typing import Any

from preflight.launch.isolation_types import LATER, Attribution, label

Figures = dict[tuple[int, frozenset[str]], tuple[float | None, bool]]  # (round, group) -> its figure, met its floor

STAND_OUT = 3.0  # robust deviations under its peers' median a blamed component's bad readings must be
BESIDE_STAND_OUT = 2.5  # deviations (times sqrt(2/n) for n pairs) a node must read under its sibling in each pair
MIN_PEERS = 6  # figures of other groups the comparison needs
CLEAN_ROUND = 5  # pairs a round needs for the spread within it without every confirmed node (round_noise)
CLEAN_PAIRS = 40  # ... and such pairs in all (fewer: a median distance of a dozen strays by half)
FEW_ABOVE = 12  # figures above the typical one under which the deviation pools both estimates


def standing(found: Attribution, figures: Figures,
             named: frozenset[str] = frozenset()) -> tuple[str, bool]:
    """Why a confirmed node or link does not stand out ("" when it does, or when there is too little to compare
    it with), and whether it is its switch it does not stand out from: its confirming readings (where it has
    them: a node blamed on its pairs of three, with no known-good node to read it with, has none, and is
    judged on the rest), and its readings later in the pass, each against the groups without it that met the
    floor; then a node against its siblings under the same switch, read at the same time: at the end, and
    when it was confirmed, beside those confirmed with it that the end cleared. `named`: the nodes of every
    confirmed component, whose pairs are left out of the spread within a round (round_noise)."""
    members = set(found.members)
    readings = found.confirmation.get("measurements", []), found.confirmation.get("later", [])
    mine = [[figures.get((m.get("round"), frozenset(m.get("group") or ())), (None, False))[0] for m in part if m.get("bad")]
            for part in readings]
    if not any(mine) or any(None in part for part in mine):
        return "", False
    # The groups without it, on a log scale: a link's figures spread in proportion to its speed (unshaped
    # links of one fabric read 2 and 6 Gbit/s in one pass), so a fixed number of deviations must mean a
    # factor, never a difference that can reach below zero. Its peers are those that met the floor
    # (faults and other jobs' traffic only pull figures down, and a pass measures many groups that hold a fault).
    others = [(math.log(f), ok) for (_, group), (f, ok) in figures.items()
              if f is not None and f > 0 and not members <= group]
    logs = [f for f, ok in others if ok]
    if len(logs) < MIN_PEERS:
        why = beside_sibling(found, figures, None)
        return why, bool(why)
    typical = statistics.median(logs)
    # The deviation from above (those that met the floor are cut off below it): 1.4826 times the median
    # distance of the figures above the typical one. With few of them (a pass of a few nodes) that strays,
    # and so does the other estimate, from the upper quantiles of every figure (reading_noise): their
    # geometric mean, whose errors partly cancel. With enough, the first alone: every figure's quantiles
    # also hold the groups a fault pulled down, a quarter of them and more in a pass that searched much.
    above = [f - typical for f in logs if f >= typical]
    spread = 1.4826 * statistics.median(above)
    noise = reading_noise([f for f, _ in others])
    deviation = math.sqrt(spread * noise) if noise > 0 and len(above) < FEW_ABOVE else spread
    bar = math.exp(typical - STAND_OUT * deviation)
    for part, what in zip(mine, ("bad readings", "readings later in the pass")):
        bad = statistics.median(part) if part else None
        if bad is not None and bad >= bar:
            return (f"its {what} (median {bad:.3g}) do not stand out from the pass's other groups that met the "
                    f"floor (median {math.exp(typical):.3g}; standing out takes under {bar:.3g})"), False
    beside = (figures, max(deviation, noise), math.exp(typical), round_noise(figures, members, named))
    why = beside_sibling(found, *beside) or beside_sibling(found, *beside, first=True)
    return why, bool(why)


def round_noise(figures: Figures, members: set[str],
                 named: frozenset[str] = frozenset()) -> float:
    """How much one pair's reading deviates from the other pairs read in the same round (log scale,
    1.4826 times the median distance from its round's median): what a node is compared with its
    siblings by, read in the same round. A switch's factor that drifts from round to round and a
    neighbour's traffic through it move the node and its siblings alike, and the pass's deviation holds
    them. The pairs without the component's `members`, and without the `named` nodes (every confirmed
    component's) where rounds of CLEAN_ROUND pairs or more hold CLEAN_PAIRS of those: in the rounds
    at the end most pairs hold a confirmed node or a sibling, and at 1,024 nodes with ten nodes 30% slow
    their pairs, a quarter of a round, made the spread half as large again as the fleet's; the few pairs
    left at 256 nodes, or when a neighbour had every node under one switch confirmed, are too few to
    tell a spread (a dozen read 0.023 where the fleet's is 0.057), and the pairs without the component
    alone are taken. 0.0: too few pairs (MIN_PEERS, in rounds of three or more)."""
    clean = _spread_in_rounds(figures, members | named, CLEAN_ROUND) if named - members else []
    away = clean if len(clean) >= CLEAN_PAIRS else _spread_in_rounds(figures, members, 3)
    return 1.4826 * statistics.median(away) if len(away) >= MIN_PEERS else 0.0


def _spread_in_rounds(figures: Figures, members: set[str],
                      least: int) -> list[float]:
    """Each pair's distance (log scale) from its round's median, pairs without `members`, in rounds of
    `least` such pairs or more."""
    by_round: dict[int, list[float]] = {}
    for (index, group), (figure, _) in figures.items():
        if len(group) == 2 and figure is not None and figure > 0 and not members & group:
            by_round.setdefault(index, []).append(math.log(figure))
    return [abs(f - statistics.median(logs)) for logs in by_round.values() if len(logs) >= least for f in logs]


# The 75th to the 90th percentile of a normal distribution, in its deviations.
_UPPER_SPACING = NormalDist().inv_cdf(0.9) - NormalDist().inv_cdf(0.75)


def reading_noise(logs: list[float]) -> float:
    """How much one reading deviates (log scale), from the upper quantiles of `logs`, every figure of the
    pass without the component (the 75th to the 90th percentile, in normal deviations): faults and other
    jobs' traffic only pull figures down, and above the middle nothing is cut off at the floor, where the
    groups that met it, in a fleet just above it, spread less than a reading does. 0.0: too few figures."""
    if len(logs) < MIN_PEERS:
        return 0.0
    twentieths = statistics.quantiles(logs, n=20, method="inclusive")
    return (twentieths[17] - twentieths[14]) / _UPPER_SPACING


def beside_sibling(found: Attribution, figures: Figures,
                    spread: float | None, typical: float | None = None, within: float = 0.0,
                    first: bool = False) -> str:
    """Why a node does not stand out from its siblings under the same switch, read in the same rounds at
    the end ("" when it does, or when no pair of figures was taken). Each round pairs the node's figure with
    the median of its siblings' (each counted up to `typical`, the pass's typical figure: a sibling's lucky
    burst says nothing of the node; the median: one sibling's unlucky burst, or its partner under a slow
    switch, says nothing either): in every pair the difference (log scale) must exceed BESIDE_STAND_OUT
    deviations times sqrt(2/n) for n pairs (one difference of two readings deviates sqrt(2) times as much
    as one reading; the median of several siblings, less). Every pair, not their mean: heavy-tailed noise
    puts one reading far under now and then, a fault shows in each. `spread` None: the pass has too few
    figures to know its noise; siblings that mostly read bad in every such round are enough. With
    several siblings in each of LATER rounds or more, the deviation is `within` where that is less
    (round_noise, the pairs' spread within one round): a switch's drift and a neighbour's traffic move
    the node and its siblings alike, and their median votes one sibling's burst down. With one sibling,
    its one heavy-tailed burst is half of a comparison, and with fewer rounds (a reading at the end
    without a figure), one heavy-tailed reading would decide: the pass's deviation stays. `first`: its
    confirming readings instead, beside those of the siblings confirmed with it that the end cleared
    (first_switch_readings), by the median of the differences: these say whether it read as its switch
    did then, and one of four readings in a lucky burst says nothing of that."""
    by_round = _beside_by_round(found, figures, first)
    if not by_round:
        return ""
    one = all(len(sibs) == 1 for _, sibs in by_round.values())
    who = "another node" if one else "other nodes"
    if spread is None:  # too few figures of the pass to know its noise: the floor decides
        if all(2 * sum(b["bad"] for b, _ in sibs) >= len(sibs) for _, sibs in by_round.values()):
            shown = "; ".join(f"round {b['round']} {label(b['group'])} {'bad' if b['bad'] else 'good'}"
                              for _, sibs in by_round.values() for b, _ in sibs)
            return f"{who} under its switch read bad at the same time ({shown})"
        return ""
    if within and len(by_round) >= LATER and all(len(sibs) >= 2 for _, sibs in by_round.values()):
        spread = min(spread, within)
    cap = math.inf if typical is None else typical
    pairs = [(r, mine, statistics.median(min(f, cap) for _, f in sibs), sibs) for r, (mine, sibs) in by_round.items()]
    gaps = [math.log(theirs) - math.log(mine) for _, mine, theirs, _ in pairs]
    gap = statistics.median(gaps) if first else min(gaps)
    margin = BESIDE_STAND_OUT * spread * math.sqrt(2 / len(pairs))
    if gap >= margin:
        return ""
    shown = "; ".join(f"round {r} {mine:.3g} beside {theirs:.3g} ({', '.join(label(b['group']) for b, _ in sibs)})"
                      for r, mine, theirs, sibs in pairs)
    counted = f"counted up to the pass's typical {typical:.3g}" if typical is not None else ""
    how = (f", {counted}" if counted else "") if one else f" (their median{', each ' + counted if counted else ''})"
    return (f"{'confirmed' if first else 'at the end'}, it read {shown} of {who} under its switch{how}: "
            f"{math.exp(-gap):.3g} of it in {'the median of its pairs' if first else 'its closest pair'} (standing "
            f"out takes under {math.exp(-margin):.3g} {'there' if first else 'in every pair'})")


def _beside_by_round(found: Attribution, figures: Figures,
                     first: bool = False) -> dict[Any, tuple[float, list[tuple[dict[str, Any], float]]]]:
    """Round -> (the node's figure at the end, [(a sibling's reading, its figure)]), where both have a
    figure; `first`: its confirming readings instead, beside those of `beside_first` (first_switch_readings)."""
    part, key = ("measurements", "beside_first") if first else ("later", "beside")
    own = {m.get("round"): m for m in found.confirmation.get(part, []) if m.get("bad")}
    by_round: dict[Any, tuple[float, list[tuple[dict[str, Any], float]]]] = {}
    for b in found.confirmation.get(key, []):
        m = own.get(b.get("round"))
        mine = figures.get((m["round"], frozenset(m.get("group") or ())), (None, False))[0] if m else None
        theirs = figures.get((b["round"], frozenset(b.get("group") or ())), (None, False))[0]
        if mine is not None and theirs is not None and mine > 0 and theirs > 0:
            by_round.setdefault(b["round"], (mine, []))[1].append((b, theirs))
    return by_round
