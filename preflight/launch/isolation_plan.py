"""What adaptive fault isolation tests next: its data types and its searches. Pure.

preflight.launch.isolation runs rounds; this module decides, one search at a time, which groups of nodes
a round should measure and what their results mean. Each search is a generator: it yields the
probes (groups) it wants measured, receives their outcomes, and names what it has found through
the engine (`e.blame`, `e.note`) or starts narrower searches (`e.spawn`). The engine merges the
probes of every live search into one round of disjoint groups.

The searches, for a group `S` that measured bad:
- split: measure its `arity` parts at once (eight by default: one bad node among N takes about
  log8 N rounds); recurse into the bad parts;
- between: no part is bad, so the fault lies between two parts (a link): the first half of the parts
  and the second at once; a bad half as low as the whole holds it (`holds`), else it lies between them;
- rest: some parts are bad, and the good ones (four nodes or more) are measured together beside their
  search (twice when bad): a fault between two good parts is searched for at once, not after the
  clearance;
- cross: between two parts A and B that are each good, measure A1+B1 and A2+B2; recurse into a bad
  one; when neither holds the fault (a part just under the floor beside a whole far under it does
  not), search A1+B2 and A2+B1 at once too (one of them holds the link), down to a single pair;
- pair: a pair {a, b} that measured bad: each node with a known-good partner; a node bad with two
  different partners is at fault (a third decides when the two disagree); when neither node is, the
  pair is measured again and, when a and b sit in different topology groups, another pair across
  the same two groups beside it: both bad is the boundary between the groups (a trunk, a cable),
  only a-b bad is the link between those two nodes. A node read good once is cleared only when that
  reading stands well above the pair's figure (IsolationParams.clear_above), else when good twice: a
  slow node's lucky burst just over the floor does not make its pair a link;
- small: three nodes and no known-good node yet: the three pairs one after another.
And around them:
- screen: every node at once, or each topology group on its own;
- boundary: with topology groups, one known-good node of each group, all together; bad: the split
  search over those nodes, whose pairs then tell a boundary from a link;
- clearance: when every search has ended, what was bad is measured again without what was named
  in it; still bad (twice): the search starts again on it;
- straggler: a node whose time was far above its group's median once is measured again among
  known-good nodes (preflight.launch.isolation_straggler).
"""

from __future__ import annotations

import statistics
from typing import Any, Generator, Iterator

from preflight.launch.isolation_types import (  # noqa: F401 (the names the searches' callers import from here)
    Attribution, GroupResult, Outcome, Probe, Trail, attribution, holds, label, split, split_at_most, state, step,
)


# -- the searches ------------------------------------------------------------------------------


def screen_task(e: Any, given: GroupResult | None) -> Iterator[list[Probe]]:
    """Every node at once, or each topology group on its own; the bad ones are isolated."""
    everyone = list(e.nodes)
    if e.topology:
        groups = e.topology_groups()
        probes = [Probe(tuple(g), purpose=f"screen: topology group {e.topo(g[0])}") for g in groups if len(g) >= 2]
        alone = [g[0] for g in groups if len(g) == 1]
        if len(alone) >= 2:
            probes.append(Probe(tuple(alone), purpose="screen: the nodes alone in their topology groups"))
        elif alone:
            e.note(f"{alone[0]} is the only node of topology group {e.topo(alone[0])}: "
                   "it is measured only with nodes of other groups")
        outcomes = yield probes
    elif given is not None:
        outcomes = [Outcome(None, everyone, [], given, "")]
    else:
        outcomes = yield [Probe(tuple(everyone), purpose="screen: every node at once")]
    for outcome in outcomes:
        trail: Trail = [step([outcome], "screen")] if outcome.round is not None else \
            [(None, f"given: {label(outcome.group)} {state(outcome)}")]
        if outcome.bad:
            e.spawn(isolate_task(e, outcome.group, trail, outcome.figure), scope=outcome.group)
        elif outcome.result is not None and outcome.result.ok is None:
            e.note(f"{label(outcome.group)} could not be measured: {outcome.result.note or 'no reason given'}")
    # What was bad is measured again at the end without what was named in it; with topology groups
    # that is every node together, since the screen measured no path between two groups.
    if any(o.bad for o in outcomes) and not e.topology:
        e.add_dirty(everyone, 0)
    elif e.topology:
        e.add_dirty(everyone, 0, fresh=True)
    if e.topology and any(len(g) > 1 for g in e.topology_groups()):  # else the screen measured them together
        e.spawn(boundary_task(e), scope=[], priority=2)
    elif all(o.good for o in outcomes):
        e.note("every node together measured good: no fault reproduced")


def isolate_task(e: Any, nodes: list[str], trail: Trail, depth: float | None = None) -> Iterator[list[Probe]]:
    """`nodes` measured bad together (its figure `depth`): find the nodes or links inside that make it so."""
    nodes = e.ordered(nodes)
    if len(nodes) == 2:
        yield from pair_task(e, nodes[0], nodes[1], trail, depth)
        return
    if len(nodes) == 3 and not e.has_good(exclude=nodes):
        yield from small_task(e, nodes, trail)
        return
    parts = split(nodes, e.params.arity)
    probes = [Probe(tuple(p), partners=(e.topo(p[0]),) if len(p) == 1 else (), avoid=frozenset(nodes),
                    purpose=f"part {i + 1} of {len(parts)} of {label(nodes)}", search=True)
              for i, p in enumerate(parts)]
    outcomes = yield probes
    trail = trail + [step(outcomes, f"{label(nodes)} split")]
    bad = [(p, o) for p, o in zip(parts, outcomes) if o.bad]
    for part, outcome in bad:
        if len(part) == 1:  # measured with a known-good partner: it, or the link between them
            e.spawn(pair_task(e, part[0], outcome.partners[0], trail, outcome.figure), scope=outcome.group)
        else:
            e.spawn(isolate_task(e, part, trail, outcome.figure), scope=part)
    if bad:
        good = [p for p, o in zip(parts, outcomes) if o.good]
        if len(good) >= 2 and sum(map(len, good)) >= REST_AT_LEAST:
            e.spawn(rest_task(e, good, trail), scope=[])
        return
    e.spawn(between_task(e, parts, trail, depth), scope=nodes)


REST_AT_LEAST = 4  # nodes in a split's good parts for them to be measured together at once


def rest_task(e: Any, parts: list[list[str]], trail: Trail) -> Iterator[list[Probe]]:
    """Some parts of a split were bad, these were each good: all of them together, beside the search
    of the bad ones, so a fault between two of them (a link) is searched for now rather than after the
    clearance. Bad twice (once can be noise): the between search."""
    union = sum(parts, [])
    outcomes: list[Outcome] = []
    for purpose in (f"the {len(parts)} good parts of a split together", "the same, once more"):
        (outcome,) = yield [Probe(tuple(union), purpose=purpose, search=True)]
        outcomes.append(outcome)
        if not outcome.bad:
            if outcomes[0].bad:
                e.note(f"{label(union)}, each part good, was bad together once and then good: not reproduced")
            return
    e.spawn(between_task(e, parts, trail + [step(outcomes, "the good parts together")]), scope=union)


def between_task(e: Any, parts: list[list[str]], trail: Trail, depth: float | None = None) -> Iterator[list[Probe]]:
    """Each part is good and all of them together are bad (their figure `depth`): the fault lies between
    two parts. Two parts: the cross search. More: the first half of the parts and the second half, at
    once; a bad half that holds it (`holds`) is searched; none: it lies between the halves."""
    if len(parts) == 2:
        yield from cross_task(e, parts[0], parts[1], trail, depth=depth)
        return
    first, second = parts[:len(parts) // 2], parts[len(parts) // 2:]
    unions = [sum(first, []), sum(second, [])]
    outcomes = yield [Probe(tuple(u), purpose=f"{len(h)} parts together", search=True)
                      for u, h in zip(unions, (first, second)) if len(h) > 1]
    trail = trail + [step(outcomes, "parts, half of them at a time")]
    bad = [(h, o) for h, o in zip([h for h in (first, second) if len(h) > 1], outcomes) if o.bad]
    if not any(holds(o, depth) for _, o in bad):
        e.spawn(cross_task(e, unions[0], unions[1], trail, depth=depth), scope=unions[0] + unions[1])
    for halves_of, outcome in bad:
        e.spawn(between_task(e, halves_of, trail, outcome.figure), scope=sum(halves_of, []))


def cross_task(e: Any, a: list[str], b: list[str], trail: Trail, known_bad: bool = True,
               depth: float | None = None) -> Iterator[list[Probe]]:
    """A and B are each good; together they are bad (`known_bad`), or may be: find the link(s) between.

    A1+B1 and A2+B2 are measured at once. A bad one is searched further. When neither is, the link
    is in A1+B2 or A2+B1: both are searched at once, each without a round of its own to say which
    (the one without it ends at its next round, finding nothing), so each halving costs one round.
    """
    if len(a) == 1 and len(b) == 1:
        if not known_bad:
            (outcome,) = yield [Probe((a[0], b[0]), purpose=f"{a[0]} with {b[0]}", search=True, unless_blamed=True)]
            if not outcome.bad:
                return
            trail, depth = trail + [step([outcome], "between single nodes")], outcome.figure
        yield from pair_task(e, a[0], b[0], trail, depth)
        return
    a1, a2 = halves(a)
    b1, b2 = halves(b)
    combos = [(x, y) for x, y in ((a1, b1), (a2, b2)) if x and y]
    outcomes = yield [Probe(tuple(x + y), purpose=f"{label(x)} with {label(y)}", search=True) for x, y in combos]
    here = trail + [step(outcomes, f"between {label(a)} and {label(b)}")]
    found = [(x, y, o) for (x, y), o in zip(combos, outcomes) if o.bad]
    held = any(holds(o, depth) for _, _, o in found)
    rest = [(x, y) for x, y in ((a1, b2), (a2, b1)) if x and y] if not held else []
    if len(rest) == 1 and known_bad and not found:  # the only place left: known to hold it
        e.spawn(cross_task(e, rest[0][0], rest[0][1], here, depth=depth), scope=rest[0][0] + rest[0][1])
    else:
        for x, y in rest:
            e.spawn(cross_task(e, x, y, here, known_bad=False, depth=depth), scope=x + y)
    for x, y, o in found:
        e.spawn(cross_task(e, x, y, here, depth=o.figure), scope=x + y)
    if known_bad and not rest and not found:
        e.note(f"{label(a)} and {label(b)} were bad together once, but no part of one with a part of the other: "
               "not reproduced")


def halves(nodes: list[str]) -> tuple[list[str], list[str]]:
    middle = (len(nodes) + 1) // 2
    return nodes[:middle], nodes[middle:]


def pair_task(e: Any, a: str, b: str, trail: Trail, depth: float | None = None) -> Iterator[list[Probe]]:
    """{a, b} measured bad: node a, node b, the link between them, or the boundary of their groups.

    Each node not known good is measured with known-good partners, a different one each time, until
    `confirm` decides: a node bad in at least `confirm_bad` of at most `confirm_of` measurements, with
    at least `confirm_partners` different partners, is at fault; one bad at least twice but less than
    that is a suspect (never blamed); good at its first measurement, or too often to be confirmed, it
    is not at fault (good once is enough only well above the pair's figure `depth`: see `confirm`)."""
    trail = list(trail)
    votes, verdict, unknown = yield from ends_task(e, a, b, trail, depth)
    named = [x for x, v in verdict.items() if v in ("node", "suspect")]
    elsewhere = [x for x, v in verdict.items() if v == "elsewhere"]
    for x in named:
        partners = [p for v in votes[x] if v.bad for p in v.partners]
        e.blame(attribution("node", [x], trail, confidence="confirmed" if verdict[x] == "node" else "unconfirmed",
                            figures={"bad_with": sorted(set(partners) | ({a, b} - {x}))},
                            confirmation=confirmation(votes[x])))
    if unknown:
        others = [x for x in (a, b) if x not in unknown and x not in named]
        candidates = [{"kind": "node", "members": [x]} for x in unknown]
        if others or len(unknown) == 2:
            candidates.append({"kind": "link", "members": [a, b]})
        e.blame(attribution("unexplained", [a, b], trail + [(None, "no known-good node was free to measure "
                                                                  f"{' and '.join(unknown)} against")],
                            ambiguous=True, confidence="unconfirmed", candidates=candidates))
        return
    if named:
        return
    if elsewhere:
        e.note(f"{a} with {b} was bad: {' and '.join(elsewhere)} confirmed at fault by another search")
        return
    yield from link_task(e, a, b, trail)


Votes = dict[str, list[Outcome]]


def ends_task(e: Any, a: str, b: str, trail: Trail,
              depth: float | None = None) -> Generator[list[Probe], list[Outcome], tuple[Votes, dict[str, str], list[str]]]:
    """The measurements of pair_task: each end of {a, b} not known good with known-good partners, a
    different one each time while there is one, until `confirm` decides. Returns each end's
    measurements, its verdict ("node", "suspect", "not", or "elsewhere": confirmed by another search
    while this one waited for it) and the ends no partner was free for; adds
    each round to `trail`."""
    need = [x for x in (a, b) if not e.is_good(x)]
    votes: Votes = {x: [] for x in need}
    used = {x: {a, b} for x in need}
    # An end another search confirmed (before this one started, or while it waited for the node: its
    # probe is then not measured, `unless_blamed`) is not measured again: that blame explains the pair.
    verdict: dict[str, str] = {x: "elsewhere" for x in need if e.is_blamed(x)}
    pending = [x for x in need if x not in verdict]
    unknown: list[str] = []
    while pending:
        first = all(not votes[x] for x in pending)
        # A different partner each time while there is one; then the known-good ones again.
        outcomes = yield [Probe((x,), partners=(e.topo(x),), avoid=frozenset(used[x] if e.has_good(list(used[x]))
                                                                              else {a, b}),
                                purpose=f"{x} with {'a' if first else 'another'} known-good node", unless_blamed=True)
                              for x in pending]
        trail.append(step(outcomes, "each with a known-good node" if first else "again, with other known-good nodes"))
        following = []
        for x, outcome in zip(pending, outcomes):
            if e.is_blamed(x):
                verdict[x] = "elsewhere"
                continue
            if outcome.result is None or outcome.result.ok is None:
                if votes[x]:
                    verdict[x] = confirm(e.params, votes[x], final=True, depth=depth)
                else:
                    unknown.append(x)
                continue
            used[x] |= set(outcome.partners)
            votes[x].append(outcome)
            decided = confirm(e.params, votes[x], depth=depth)
            if decided:
                verdict[x] = decided
            else:
                following.append(x)
        pending = following
    return votes, verdict, unknown


def confirm(params: Any, votes: list[Outcome], final: bool = False, depth: float | None = None) -> str:
    """"node" (confirmed), "suspect", "not", or "" (measure again) from a node's measurements with
    known-good partners, each with a different partner (the rule of `pair_task`). Good once clears a
    node only when that reading is `clear_above` times the figure `depth` of the pair it was bad in or
    more; else good twice does. Pure."""
    bad = [v for v in votes if v.bad]
    good = len(votes) - len(bad)
    partners = {p for v in bad for p in v.partners}
    if len(bad) >= params.confirm_bad and len(partners) >= params.confirm_partners:
        return "node"
    clearly = [v for v in votes if v.good and (depth is None or depth <= 0 or params.clear_above is None
                                               or v.figure is None or v.figure >= depth * params.clear_above)]
    if not (clearly or good >= 2 or len(bad) >= 2 or final or len(votes) >= params.confirm_of):
        return ""  # good once, about as slow as the pair was: that settles nothing yet
    if (good and not bad) or good > params.confirm_of - params.confirm_bad or len(votes) >= params.confirm_of \
            or final:
        return "suspect" if len(bad) >= 2 else "not"
    return ""


def confirmation(readings: list[Outcome]) -> dict[str, Any]:
    """How a blame was confirmed: which measurements (round, group, good or bad), with which partners."""
    return {"bad_in": sum(o.bad for o in readings), "of": len(readings),
            "partners": sorted({p for o in readings for p in o.partners}),
            "measurements": [{"round": o.round, "group": o.group, "bad": o.bad} for o in readings]}


DROPPED = 0.7  # a pair that read under this share of its good readings' median in a bad one dropped


def dropped(readings: list[Outcome]) -> bool:
    """Whether a pair's readings, bad in some and good in others, dropped far: a bad one without a
    figure, or under DROPPED of the median of the good ones (a flapping part; noise near the floor
    reads just under it). Pure."""
    good = [o.figure for o in readings if o.good and o.figure is not None]
    return bool(good) and any(o.bad and (o.figure is None or o.figure < DROPPED * statistics.median(good))
                              for o in readings)


def ends_once_more(e: Any, members: list[str], pair: list[Outcome], trail: Trail) -> Generator[list[Probe], Any, Trail]:
    """Each end of a pair that dropped far, once more with another known-good partner; an end that reads
    bad there is named a suspect too (a WARN, acted on by nobody): a flapping end, not the link."""
    outcomes = yield [Probe((x,), partners=(None,), avoid=frozenset(members), purpose=f"{x} with another known-good node")
                      for x in members]
    trail = trail + [step(outcomes, "each end with another known-good node")]
    for x, outcome in zip(members, outcomes):
        if outcome.bad:
            e.blame(attribution("node", [x], trail, confidence="unconfirmed",
                                confirmation=confirmation([o for o in pair if o.bad] + [outcome])))
    return trail


def link_task(e: Any, a: str, b: str, trail: Trail) -> Iterator[list[Probe]]:
    """Neither node is at fault alone: the pair again, and beside it another pair across the same
    two topology groups when a and b are in different ones, up to `confirm_of` times, until the
    pair is bad `confirm_bad` times (a link; a boundary when the other pairs were bad as often) or
    can no longer be. Bad again in some of them (with the reading that made it bad, 2 of 3 or more): a
    suspect link, a WARN (a flapping link, or a flapping end: where a bad reading dropped far, each end
    is read once more with another partner, and one that reads bad is named a suspect too); good in
    the first two: not reproduced."""
    p = e.params
    ga, gb = e.topo(a), e.topo(b)
    across = ga is not None and gb is not None and ga != gb
    pair: list[Outcome] = []
    others: list[Outcome] = []
    unmeasured = False
    while len(pair) < p.confirm_of:
        probes = [Probe((a, b), purpose=f"{a} with {b} again")]
        if across:
            probes.append(Probe((), partners=(ga, gb), strict=True, avoid=frozenset({a, b}),
                                purpose=f"two other nodes, of {ga} and of {gb}"))
        outcomes = yield probes
        trail = trail + [step(outcomes, "the pair again" + (", and another across the same groups" if across else ""))]
        if outcomes[0].result is None or outcomes[0].result.ok is None:
            unmeasured = True
            break
        pair.append(outcomes[0])
        if across and (outcomes[1].bad or outcomes[1].good):
            others.append(outcomes[1])
        bad = sum(o.bad for o in pair)
        # Cleared only by two good readings in a row: one good burst is what a flapping link gives half the time.
        if bad >= p.confirm_bad or (bad and len(pair) - bad > p.confirm_of - p.confirm_bad) or (len(pair) >= 2 and not bad):
            break
    bad = sum(o.bad for o in pair)
    members = sorted([a, b], key=e.position)
    if unmeasured and not bad:
        e.blame(attribution("unexplained", [a, b], trail, ambiguous=True, confidence="unconfirmed",
                            candidates=[{"kind": "link", "members": [a, b]}]))
    elif not bad:
        e.note(f"{a} with {b} was bad, and then good in {len(pair)} measurements again: not reproduced")
    elif bad < p.confirm_bad:
        if dropped(pair):  # the link flaps, or one of its ends does
            trail = yield from ends_once_more(e, members, pair, trail)
        e.blame(attribution("link", members, trail, confidence="unconfirmed", confirmation=confirmation(pair)))
    elif not across:
        e.blame(attribution("link", members, trail, confirmation=confirmation(pair)))
    elif not others:
        e.blame(attribution("unexplained", members,
                            trail + [(None, f"no other pair across {ga} and {gb} could be measured")],
                            ambiguous=True, confidence="unconfirmed",
                            candidates=[{"kind": "link", "members": [a, b]},
                                        {"kind": "boundary", "members": sorted([ga, gb])}]))
    elif sum(o.bad for o in others) * 2 > len(others):
        pairs = [[a, b]] + [list(g) for g in dict.fromkeys(tuple(o.group) for o in others if o.bad)]
        e.blame(attribution("boundary", sorted([ga, gb]), trail, figures={"pairs": pairs},
                            confirmation=confirmation(pair + others)))
    else:
        e.blame(attribution("link", members, trail, confirmation=confirmation(pair)))


def small_task(e: Any, nodes: list[str], trail: Trail) -> Iterator[list[Probe]]:
    """Three nodes, bad together, and no known-good node to measure them against: all three pairs."""
    a, b, c = nodes
    outcome_of: dict[tuple[str, str], Outcome] = {}
    trail = list(trail)
    for pair in ((a, b), (a, c), (b, c)):
        (outcome,) = yield [Probe(pair, purpose=f"{pair[0]} with {pair[1]}", search=True)]
        outcome_of[pair] = outcome
        trail.append(step([outcome], "pairs of three"))
    bad = [p for p, o in outcome_of.items() if o.bad]
    good = [p for p, o in outcome_of.items() if o.good]
    for x in nodes:
        mine = [p for p in outcome_of if x in p]
        if all(p in bad for p in mine) and any(x not in p for p in good):
            e.blame(attribution("node", [x], trail, figures={"bad_with": [y for p in mine for y in p if y != x]}))
            return
    if len(bad) == 1 and len(good) == 2:
        yield from link_task(e, bad[0][0], bad[0][1], trail)
    elif len(bad) == 3:
        e.blame(attribution("unexplained", nodes, trail, ambiguous=True, confidence="unconfirmed",
                            candidates=[{"kind": "node", "members": [x]} for x in nodes]))
    elif not bad:
        e.note(f"{label(nodes)} was bad, but none of its pairs: not reproduced")
    else:
        e.blame(attribution("unexplained", nodes, trail, ambiguous=True, confidence="unconfirmed"))


def boundary_task(e: Any) -> Iterator[list[Probe]]:
    """One known-good node of each topology group, all together: the paths between the groups."""
    while True:
        reps, missing = e.representatives()
        if not missing or not e.searching():
            break
        yield []  # a group's search still holds all its nodes: wait a round
    if missing:
        e.note("not measured across groups (no known-good node): " + ", ".join(missing))
    if len(reps) < 2:
        return
    (outcome,) = yield [Probe(tuple(reps), purpose="one known-good node of each topology group")]
    trail: Trail = [step([outcome], "across topology groups")]
    if outcome.bad:
        e.spawn(isolate_task(e, reps, trail), scope=reps)
    elif outcome.good:
        e.note(f"one known-good node of each of {len(reps)} topology groups, together: good")


def clearance_task(e: Any, dirty: list[tuple[list[str], int, bool]]) -> Iterator[list[Probe]]:
    """Each set that was bad, without the components named in it, measured again; a set still bad
    is measured once more (one bad figure can be noise), and searched again when it is bad twice.
    A `fresh` set (every node, after a screen by topology group) was never measured as a whole:
    a bad result is news, not a contradiction, and is searched at once."""
    outcomes = yield [Probe(pool=frozenset(nodes), purpose="every node together, without the components named"
                            if fresh else "what was bad, without the components named") for nodes, _, fresh in dirty]
    bad = [(passes, o) for (_, passes, fresh), o in zip(dirty, outcomes) if o.bad and not fresh]
    for (_, passes, fresh), outcome in zip(dirty, outcomes):
        if outcome.bad and fresh:
            e.add_dirty(outcome.group, passes + 1)
            e.spawn(isolate_task(e, outcome.group, [step([outcome], "every node together")], outcome.figure),
                    scope=outcome.group)
    if not bad:
        return
    again = yield [Probe(tuple(o.group), purpose="the same, once more") for _, o in bad]
    for (passes, first), second in zip(bad, again):
        trail: Trail = [step([first], "again without the components named"), step([second], "once more")]
        if not second.bad:
            e.note(f"{label(first.group)}, without the components named, was bad once and then good: not reproduced")
        elif passes + 1 >= e.params.max_passes:
            e.blame(attribution("unexplained", second.group, trail, ambiguous=True, confidence="unconfirmed"))
        else:
            e.add_dirty(second.group, passes + 1)
            e.spawn(isolate_task(e, second.group, trail, second.figure), scope=second.group)
