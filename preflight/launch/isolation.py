"""Adaptive fault isolation: which node, link or boundary makes a group of nodes bad, in few rounds. Pure.

Measuring every pair of N nodes takes N-1 rounds (round-robin); 1,023 rounds at 1,024 nodes. This
measures groups instead, as group testing does: screen every node at once (or each topology group:
a rack, a leaf switch), split what is bad into parts measured at once and recurse, confirm each
suspect against nodes already known good, and probe across topology groups with one known-good node
of each, so a fault between two groups (a trunk, a cable) is found and named as that boundary. One
bad node among N is named in about log8(N) + 6 rounds (9 at 1,024 nodes, each blame confirmed); a
bad link in about log2(N) + 7; the bound kept for one bad node is 2 * ceil(log2 N) + 4 (`round_bound`).

    isolate(nodes, measure, topology=None, screen=None, params=None) -> Isolation

`measure(groups)` runs disjoint groups of nodes at the same time, in ONE round (a burst of
all-reduces, one per group), and returns a GroupResult per group: ok (True/False; None: could not
be measured), its figure, and optionally per-node times. It may raise Stop to end the isolation
early (the time is up); what was not narrowed down by then is reported as such. The searches
assume that a group's burst exercises the paths between all of its members: a fault on a path the
burst never uses cannot be found, and shows up as "not reproduced" in the notes.

What comes back lists every round (the groups, why each was measured, what each showed) and the
attributions: node, link (a fault only between two particular nodes: both are named, neither is
blamed alone), boundary (between two topology groups), straggler (a node whose time is far above
its group's median: above median + k * MAD and above median * (1 + min_excess), both taken over the
fastest three quarters of the group so a few stragglers do not move them, in most of at least three
observations after the one that made it a suspect), and unexplained, flagged ambiguous, with its
candidates, where the evidence does not single out a component. The searches themselves are in
preflight.launch.isolation_plan.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from preflight.launch.isolation_plan import Attribution, GroupResult, Outcome, Probe, clearance_task, screen_task
from preflight.launch.isolation_straggler import straggler_task
from preflight.launch.isolation_types import IsolationParams
from preflight.launch.isolation_verify import conclude, to_verify, verify_task

__all__ = ["Attribution", "GroupResult", "Isolation", "IsolationParams", "Round", "Stop", "isolate", "round_bound"]

Measure = Callable[[list[list[str]]], list[GroupResult]]
UNASSIGNED = "(no group)"


class Stop(Exception):
    """Raised by a measure function: no more rounds (the time is up). Its text says why."""


def round_bound(nodes: int) -> int:
    """Most rounds one bad node among `nodes` may take: 2 * ceil(log2 N) + 4."""
    return 2 * math.ceil(math.log2(max(2, nodes))) + 4


@dataclass
class Round:
    index: int
    groups: list[list[str]]
    purposes: list[str]
    results: list[GroupResult]
    times: list[dict[str, Any]]  # per group: median, MAD and the nodes above the straggler limit

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.index, "groups": [
            {"members": g, "purpose": p, **r.to_dict(), **({"times": t} if t else {})}
            for g, p, r, t in zip(self.groups, self.purposes, self.results, self.times)]}


@dataclass
class Isolation:
    nodes: list[str]
    topology: dict[str, str]
    rounds: list[Round]
    attributions: list[Attribution]
    good: list[str]  # nodes measured good (in a group that was good)
    notes: list[str]
    stopped: str | None = None  # why it ended before every search did
    screen: GroupResult | None = None  # the result it was given for every node at once

    @property
    def round_count(self) -> int:
        return len(self.rounds)

    def named(self, kind: str | None = None) -> list[Attribution]:
        """Attributions that single out a component (not ambiguous), of `kind` when given."""
        return [a for a in self.attributions if not a.ambiguous and (kind is None or a.kind == kind)]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "topology": self.topology, "round_count": self.round_count,
                "rounds": [r.to_dict() for r in self.rounds],
                "attributions": [a.to_dict() for a in self.attributions], "good": self.good,
                "notes": self.notes, "stopped": self.stopped,
                "screen": self.screen.to_dict() if self.screen else None}


def isolate(nodes: list[str], measure: Measure, *, topology: dict[str, str] | None = None,
            screen: GroupResult | None = None, params: IsolationParams | None = None) -> Isolation:
    """Find what makes `nodes` bad, in rounds of `measure`. `topology`: node -> group (rack, leaf
    switch); `screen`: the result of every node at once, when already measured (it saves a round)."""
    if len(set(nodes)) != len(nodes):
        raise ValueError("isolate: a node is listed twice")
    engine = _Engine(list(nodes), measure, topology, params or IsolationParams())
    engine.spawn(screen_task(engine, screen if not engine.topology else None), scope=[])
    if screen is not None:
        if engine.topology:
            engine.note("the result given for every node at once is not used: each topology group is screened")
        else:
            engine.learn(0, [list(nodes)], [screen])
    engine.run()
    return engine.result(screen)


class _Task:
    __slots__ = ("gen", "priority", "seq", "scope", "request", "started", "done")

    def __init__(self, gen: Iterator[list[Probe]], priority: int, seq: int, scope: frozenset[str]) -> None:
        self.gen, self.priority, self.seq, self.scope = gen, priority, seq, scope
        self.request: list[Probe] | None = None
        self.started = self.done = False


class _Engine:
    """Runs the searches of preflight.launch.isolation_plan in rounds; what they call `e`."""

    def __init__(self, nodes: list[str], measure: Measure, topology: dict[str, str] | None,
                 params: IsolationParams) -> None:
        self.nodes, self.measure, self.params = nodes, measure, params
        self._pos = {n: i for i, n in enumerate(nodes)}
        self.topology = {n: str(topology.get(n, UNASSIGNED)) for n in nodes} if topology else {}
        self.good: set[str] = set()  # trusted: good in trust_after different groups
        self.seen_good: set[str] = set()  # good in one group at least
        self._good_in: dict[str, set[frozenset[str]]] = {}
        self._good_order: list[str] = []
        self._good_by_topo: dict[str | None, list[str]] = {}
        self._blamed: set[str] = set()
        self._held_out: set[str] = set()  # ends of named links, members of ambiguous sets
        self.attributions: list[Attribution] = []
        self.notes: list[str] = []
        self.rounds: list[Round] = []
        self._obs: dict[str, list[tuple[int, float, float, float, int, bool]]] = {}
        self._tasks: list[_Task] = []
        self._seq = 0
        self._dirty: list[tuple[list[str], int, bool]] = []
        self._ok_groups: list[frozenset[str]] = []
        self._straggling: set[str] = set()
        self._searched: set[str] = set()  # the nodes live searches hold, as a round is assembled
        self._verified = self._released = False
        self.stopped: str | None = None

    # -- what the searches ask -----------------------------------------------------------------

    def topo(self, node: str) -> str | None:
        return self.topology.get(node)

    def position(self, node: str) -> int:
        return self._pos[node]

    def ordered(self, nodes: list[str]) -> list[str]:
        return sorted(nodes, key=lambda n: (self.topology.get(n, ""), self._pos[n]))

    def topology_groups(self) -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for node in self.nodes:
            groups.setdefault(self.topology[node], []).append(node)
        return list(groups.values())

    def is_good(self, node: str) -> bool:
        return node in self.good

    def is_blamed(self, node: str) -> bool:
        return node in self._blamed

    def has_good(self, exclude: list[str]) -> bool:
        return bool(self.seen_good - set(exclude))

    @property
    def round_index(self) -> int:
        return len(self.rounds)

    def observations(self, node: str) -> list[dict[str, Any]]:
        return [{"round": r, "time_s": t, "median_s": m, "mad_s": d, "size": s, "slow": f}
                for r, t, m, d, s, f in self._obs.get(node, [])]

    def searching(self) -> bool:
        return any(t.priority == 0 and not t.done for t in self._tasks)

    def representatives(self) -> tuple[list[str], list[str]]:
        """One known-good node per topology group that no search holds; the groups without one."""
        searches = [t.scope for t in self._tasks if t.priority == 0 and not t.done]
        held = set().union(self._blamed, self._held_out, *searches)
        reps, missing = [], []
        for group in dict.fromkeys(self.topology[n] for n in self.nodes):
            pick = next((n for n in self._good_by_topo.get(group, []) if n in self.seen_good and n not in held), None)
            if pick is None:
                missing.append(group)
            else:
                reps.append(pick)
        return reps, missing

    def spawn(self, gen: Iterator[list[Probe]], scope: list[str], priority: int = 0) -> None:
        self._seq += 1
        self._tasks.append(_Task(gen, priority, self._seq, frozenset(scope)))

    def blame(self, found: Attribution) -> None:
        if found.kind == "node" and not found.ambiguous:  # a suspect is no partner, but stays in the clearance
            self._blamed.update(found.members if found.confidence == "confirmed" else ())
            self.good.difference_update(found.members)
            self.seen_good.difference_update(found.members)
        elif found.kind == "link" and not found.ambiguous:
            self._held_out.add(found.members[-1])  # the other end stays in, measured with the rest
        elif found.kind == "boundary":  # what is measured again together leaves out one side
            self._held_out.update(n for n in self.nodes if self.topology[n] == found.members[-1])
        else:
            self._held_out.update(n for n in found.members if n in self._pos)
        self.attributions.append(found)

    def release(self, found: Attribution) -> None:
        """A blame the readings at the end did not bear out: its node is measured with the others again,
        and, once a pass, every node together once the verification is over (a fault the blame hid from
        the clearance, a link of that node, is searched for; bad twice, it is searched once more)."""
        self._blamed.difference_update(found.members if found.kind == "node" else ())
        if not self._released:
            self._released, self._verified = True, False
            self.add_dirty(list(self.nodes), self.params.max_passes - 2)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def add_dirty(self, nodes: list[str], passes: int, fresh: bool = False) -> None:
        self._dirty.append((list(nodes), passes, fresh))

    # -- rounds --------------------------------------------------------------------------------

    def run(self) -> None:
        limit = self.params.max_rounds or 24 * math.ceil(math.log2(len(self.nodes) + 1)) + 64
        while True:
            planned = self._assemble()
            if not planned:
                break
            if len(self.rounds) >= limit:
                self.stopped = f"the limit of {limit} rounds"
                break
            groups = [item[1] for _, items in planned for item in items if item[0] == "run"]
            try:
                results = self.measure(groups)
            except Stop as exc:
                self.stopped = str(exc) or "stopped by the measurement"
                break
            if len(results) != len(groups):
                raise ValueError(f"measure returned {len(results)} results for {len(groups)} groups")
            index = len(self.rounds) + 1
            purposes = [item[3] for _, items in planned for item in items if item[0] == "run"]
            times = self.learn(index, groups, results)
            self.rounds.append(Round(index, groups, purposes, list(results), times))
            given = iter(results)
            ran = {task.seq for task, _ in planned}
            for task, items in planned:
                outcomes = [item[1] if item[0] == "now" else Outcome(index, item[1], item[2], next(given))
                            for item in items]
                self._advance(task, outcomes)
            for task in self._live():
                if task.request == [] and task.started and task.seq not in ran:
                    self._advance(task, [])
        self._finish()

    def _live(self) -> list[_Task]:
        self._tasks = [t for t in self._tasks if not t.done]
        return sorted(self._tasks, key=lambda t: (t.priority, t.seq))

    def _advance(self, task: _Task, value: list[Outcome] | None) -> None:
        try:
            task.request = task.gen.send(value) if task.started else next(task.gen)
            task.started = True
        except StopIteration:
            task.done, task.request = True, None

    def _assemble(self) -> list[tuple[_Task, list[tuple[Any, ...]]]]:
        """The probes of every live search that fit in one round of disjoint groups."""
        busy: set[str] = set()
        # Partners are drawn first from known-good nodes no search holds: one that a search holds
        # would keep that search waiting for a round.
        self._searched = set().union(*(t.scope for t in self._tasks if t.priority == 0 and not t.done))
        planned: list[tuple[_Task, list[tuple[Any, ...]]]] = []
        claimed: set[int] = set()
        nudged = 0
        while True:
            progress = False
            for task in self._live():
                if task.seq in claimed or task.done:
                    continue
                if not task.started:
                    self._advance(task, None)
                    progress = True
                    if task.done:
                        continue
                if not task.request:
                    continue
                resolved = self._resolve(task, busy)
                if resolved is None:
                    continue  # its nodes are busy this round
                if all(item[0] == "now" for item in resolved):
                    self._advance(task, [item[1] for item in resolved])
                    progress = True
                    continue
                for item in resolved:
                    if item[0] == "run":
                        busy.update(item[1])
                planned.append((task, resolved))
                claimed.add(task.seq)
            if self._clearance_due():
                dirty, self._dirty = self._dirty, []
                self.spawn(clearance_task(self, dirty), scope=[], priority=1)
                progress = True
            elif self._verify_due():
                self._verified = True
                for found in to_verify(self):
                    self.spawn(verify_task(self, found), scope=[], priority=1)
                progress = True
            if not progress and not planned and nudged < 2:
                waiting = [t for t in self._live() if t.started and t.request == []]
                for task in waiting:
                    self._advance(task, [])
                nudged += 1
                progress = bool(waiting)
            if not progress:
                return planned

    def _clearance_due(self) -> bool:
        """When every search has ended: the clearance needs all the nodes it measures free."""
        if not self.params.clearance or not self._dirty:
            return False
        return not any(not t.done and (t.priority <= 2 or not t.started) for t in self._tasks)

    def _verify_due(self) -> bool:
        """When every search and the clearance have ended: what was confirmed is measured once more."""
        if not self.params.verify or self._verified or self._dirty:
            return False
        return not any(not t.done and t.priority <= 2 for t in self._tasks)

    def _resolve(self, task: _Task, busy: set[str]) -> list[tuple[Any, ...]] | None:
        """Each probe as ("run", group, partners, purpose) or ("now", Outcome); None: wait a round."""
        taken = set(busy)
        out: list[tuple[Any, ...]] = []
        for probe in task.request or []:
            if probe.pool is not None:
                held = self._blamed | self._held_out
                group = sorted((n for n in probe.pool if n not in held), key=self._pos.__getitem__)
                if any(n in taken for n in group):
                    return None
                if len(group) < 2:
                    out.append(("now", Outcome(None, group, [], None, "fewer than two nodes left")))
                elif self._known_good(group):
                    out.append(("now", Outcome(None, group, [], GroupResult(True, note="measured good before"))))
                else:
                    taken.update(group)
                    out.append(("run", group, [], probe.purpose))
                continue
            if probe.unless_blamed and any(m in self._blamed for m in probe.members):
                out.append(("now", Outcome(None, list(probe.members), [], None, "confirmed at fault meanwhile")))
                continue
            in_use = any(m in taken for m in probe.members)
            if in_use and not probe.optional:
                return None
            partners = None if in_use else self._partners(probe, taken)
            if partners is None:
                if probe.optional or self._partners(probe, set()) is None:  # left out: not measured
                    why = "its nodes or partners not free" if probe.optional else "no known-good node to measure it against"
                    out.append(("now", Outcome(None, list(probe.members), [], None, why)))
                    continue
                return None
            group = list(probe.members) + partners
            taken.update(group)
            out.append(("run", group, partners, probe.purpose))
        return out

    def _partners(self, probe: Probe, taken: set[str]) -> list[str] | None:
        exclude = taken | set(probe.members) | probe.avoid | self._blamed
        chosen: list[str] = []
        for want in probe.partners:
            pick = self._pick(want, exclude, probe.strict)
            if pick is None:
                break
            chosen.append(pick)
            exclude.add(pick)
        need = len(probe.partners) if probe.at_least is None else probe.at_least
        return chosen if len(chosen) >= need else None

    def _pick(self, want: str | None, exclude: set[str], strict: bool) -> str | None:
        """A known-good node, of topology group `want` where there is one; one never slow before first."""
        places = []
        if want is not None and self.topology:
            places.append(self._good_by_topo.get(want, []))
        if not strict or not places:
            places.append(self._good_order)
        # Trusted nodes first; a node good once only when no trusted one is free.
        for known in (self.good, self.seen_good):
            for place in places:
                for avoid_slow, avoid_searched in ((True, True), (True, False), (False, False)):
                    for node in place:
                        if node in known and node not in exclude and not (avoid_slow and node in self._straggling) \
                                and not (avoid_searched and node in self._searched):
                            return node
        return None

    def _known_good(self, group: list[str]) -> bool:
        members = frozenset(group)
        return any(len(ok) >= len(members) and members <= ok for ok in self._ok_groups)

    def learn(self, index: int, groups: list[list[str]], results: list[GroupResult]) -> list[dict[str, Any]]:
        """Known-good nodes from the good groups; slow nodes from each group's times."""
        times = []
        for group, result in zip(groups, results):
            if result.ok is True:
                self._ok_groups.append(frozenset(group))
                for node in group:
                    if node not in self._blamed:
                        self._trust(node, frozenset(group))
            elif result.ok is False and len(group) <= 4 and all(n in self.good for n in group):
                for node in group:  # bad with trusted partners only: each has to earn its trust again
                    self.good.discard(node)
                    self._good_in[node] = set()
            times.append(self._judge_times(index, group, result))
        return times

    def _trust(self, node: str, group: frozenset[str]) -> None:
        if node not in self.seen_good:
            self.seen_good.add(node)
            self._good_order.append(node)
            self._good_by_topo.setdefault(self.topology.get(node), []).append(node)
        seen = self._good_in.setdefault(node, set())
        seen.add(group)
        if len(seen) >= self.params.trust_after:
            self.good.add(node)

    def _judge_times(self, index: int, group: list[str], result: GroupResult) -> dict[str, Any]:
        p = self.params
        if not result.times_s:
            return {}
        mine = [(n, result.times_s[n]) for n in group if n in result.times_s and n not in self._blamed]
        if len(mine) < p.straggler_min_group:
            return {}
        # The fastest three quarters give the baseline: a few stragglers in one group do not move it.
        values = sorted(t for _, t in mine)[:max(p.straggler_min_group - 1, math.ceil(0.75 * len(mine)))]
        median = statistics.median(values)
        mad = statistics.median([abs(t - median) for t in values])
        limit = max(median + p.straggler_k * max(mad, 0.01 * median), median * (1 + p.straggler_min_excess))
        slow = {}
        for node, t in mine:
            flagged = t > limit
            self._obs.setdefault(node, []).append((index, t, median, mad, len(mine), flagged))
            if flagged:
                slow[node] = t
                if node not in self._straggling:
                    self._straggling.add(node)
                    self.spawn(straggler_task(self, node), scope=[node], priority=3)
        return {"median_s": median, "mad_s": mad, "limit_s": limit, "slow": slow}

    # -- the end -------------------------------------------------------------------------------

    def _finish(self) -> None:
        for task in self._live():
            if task.priority == 0 and task.scope and self.stopped:
                members = self.ordered(list(task.scope))
                self.blame(Attribution("unexplained", members, [f"the isolation stopped ({self.stopped}) before it "
                                                                "could narrow this down"], [],
                                       confidence="unconfirmed", ambiguous=True))
            task.gen.close()
            task.done = True
        if self.stopped:
            self.note(f"stopped after {len(self.rounds)} rounds: {self.stopped}")
        if not self.seen_good and len(self.attributions) > 1 and all(a.kind == "unexplained" for a in self.attributions):
            members = self.ordered(sorted({n for a in self.attributions for n in a.members}))
            rounds = sorted({r for a in self.attributions for r in a.rounds})
            self.attributions = [Attribution(
                "unexplained", members, ["no group of nodes measured good: a cause common to every node (the fabric, "
                                         "a shared setting), or more faults than nodes to tell them apart"],
                rounds, confidence="unconfirmed", ambiguous=True)]
        conclude(self)

    def result(self, screen: GroupResult | None) -> Isolation:
        return Isolation(nodes=list(self.nodes), topology=dict(self.topology), rounds=self.rounds,
                         attributions=self.attributions, good=[n for n in self.nodes if n in self.seen_good],
                         notes=self.notes, stopped=self.stopped, screen=screen)
