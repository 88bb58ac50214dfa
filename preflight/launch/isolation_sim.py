"""A simulated cluster with known faults, measured through the interface preflight.launch.isolation uses. Pure.

`FaultModel(nodes, faults, ...).measure(groups)` is a measure function: one call is one round, each
group one burst. A group's figure is 1.0 (healthy), times the worst fault it contains, times
measurement noise (Gaussian, `noise` its standard deviation as a fraction of the figure); the group
is bad when its figure is below `threshold`. Per-node times are a base time with the same noise,
a straggler's multiplied by its ratio. Faults:

- slow-node: the node's NIC runs at `factor` of the healthy figure, in every group it is in;
- bad-link: only groups holding both nodes are slowed (a route, a cable between the two);
- dead-rank: a group holding the node never completes (timed out, no figure, no times);
- straggler: the node's own time is `factor` times the others'; the group's figure is not affected;
- boundary: groups holding nodes of both topology groups are slowed (a trunk between two racks);
- flapping: the node's NIC runs at `factor` in half the bursts it is in (each burst drawn anew);
- flapping-link: the path between two nodes at `factor` in half the bursts holding both.

With a `Fabric` (the realistic noise, which needs the switch topology), the noise is no longer one
independent Gaussian draw per burst: it is Student-t (3 degrees of freedom, heavy tails) scaled by
`noise`; every switch has a factor shared by every burst through it in a round, correlated from round
to round (AR(1), rho 0.8); and a noisy neighbour slows one switch to 0.6-0.8 of its figure for 2 to 8
consecutive rounds, starting in one of the first rounds. A burst through several switches runs at the
pace of the slowest.

Everything random comes from one `random.Random(seed)`: the same seed gives the same rounds.
"""

from __future__ import annotations

import random
import math
from dataclasses import dataclass
from typing import Any

from preflight.launch.isolation import GroupResult, Isolation

SINGLE = ("slow-node", "bad-link", "dead-rank", "straggler")
FAULT_MODELS = ("slow-node", "bad-link", "dead-rank", "straggler", "two-faults", "three-faults", "boundary")
ATTRIBUTED_AS = {"slow-node": "node", "dead-rank": "node", "bad-link": "link", "straggler": "straggler",
                 "boundary": "boundary", "flapping": "node", "flapping-link": "link"}


@dataclass(frozen=True)
class Fabric:
    """The realistic noise of a shared fabric (see the module's text); `switch_sd` is the spread of a
    switch's factor as a fraction of the figure, `neighbour` the odds that a run has a noisy neighbour."""

    dof: int = 3
    switch_sd: float = 0.03
    rho: float = 0.8
    neighbour: float = 1.0
    neighbour_factor: tuple[float, float] = (0.6, 0.8)
    neighbour_rounds: tuple[int, int] = (2, 8)
    neighbour_starts: int = 6  # it starts in one of the first this many rounds


class _FabricState:
    """A run's switch factors, round by round, and its noisy neighbour."""

    def __init__(self, fabric: Fabric, switches: list[str], rng: random.Random) -> None:
        self.fabric, self.rng = fabric, rng
        self.level = {s: rng.gauss(0.0, fabric.switch_sd) for s in switches}
        self.factor = dict.fromkeys(switches, 1.0)
        self.neighbour: tuple[str, float, int, int] | None = None
        if switches and rng.random() < fabric.neighbour:
            start = rng.randint(1, fabric.neighbour_starts)
            self.neighbour = (rng.choice(switches), rng.uniform(*fabric.neighbour_factor), start,
                              start + rng.randint(*fabric.neighbour_rounds))

    def next_round(self, index: int) -> None:
        f, gauss = self.fabric, self.rng.gauss
        keep = math.sqrt(1.0 - f.rho * f.rho)
        for switch, level in self.level.items():
            self.level[switch] = f.rho * level + keep * gauss(0.0, f.switch_sd)
            self.factor[switch] = max(0.05, 1.0 + self.level[switch])
        if self.neighbour is not None:
            switch, slow, start, end = self.neighbour
            if start <= index < end:
                self.factor[switch] *= slow

    def noise(self, scale: float) -> float:
        """One heavy-tailed draw: Student-t with `dof` degrees of freedom, times `scale`."""
        gauss = self.rng.gauss
        chi = sum(gauss(0.0, 1.0) ** 2 for _ in range(self.fabric.dof))
        return scale * gauss(0.0, 1.0) / math.sqrt(chi / self.fabric.dof)


@dataclass(frozen=True)
class Fault:
    kind: str  # slow-node | bad-link | dead-rank | straggler | boundary | flapping
    members: tuple[str, ...]  # the node, the two nodes, or the two topology groups
    factor: float = 1.0  # the fraction of the healthy figure; for a straggler, its time ratio

    @property
    def expected(self) -> tuple[str, frozenset[str]]:
        """The attribution that names this fault: (kind, members)."""
        return ATTRIBUTED_AS[self.kind], frozenset(self.members)


class FaultModel:
    def __init__(self, nodes: list[str], faults: list[Fault], *, topology: dict[str, str] | None = None,
                 noise: float = 0.05, threshold: float = 0.8, base_time_s: float = 1.0, seed: int = 0,
                 times: bool = True, fabric: Fabric | None = None) -> None:
        self.nodes, self.faults, self.topology = list(nodes), list(faults), dict(topology or {})
        self.noise, self.threshold, self.base_time_s, self.times = noise, threshold, base_time_s, times
        self.rng = random.Random(seed)
        self.slow = {f.members[0]: f.factor for f in faults if f.kind == "slow-node"}
        self.dead = {f.members[0] for f in faults if f.kind == "dead-rank"}
        self.straggle = {f.members[0]: f.factor for f in faults if f.kind == "straggler"}
        self.links = [(f.members, f.factor) for f in faults if f.kind == "bad-link"]
        self.trunks = [(f.members, f.factor) for f in faults if f.kind == "boundary"]
        self.flapping = {f.members[0]: f.factor for f in faults if f.kind == "flapping"}
        self.flapping_links = [(f.members, f.factor) for f in faults if f.kind == "flapping-link"]
        if (self.trunks or fabric) and not self.topology:
            raise ValueError("a boundary fault and the fabric's noise need a topology")
        self.fabric = _FabricState(fabric, sorted(set(self.topology.values())), self.rng) if fabric else None
        self.rounds = 0
        self.groups_run = 0

    def truth(self) -> set[tuple[str, frozenset[str]]]:
        return {f.expected for f in self.faults}

    def measure(self, groups: list[list[str]]) -> list[GroupResult]:
        self.rounds += 1
        if self.fabric is not None:
            self.fabric.next_round(self.rounds)
        return [self._burst(g) for g in groups]

    def _draw(self) -> float:
        """One burst's noise, as a factor of its figure."""
        if self.fabric is not None:
            return 1.0 + self.fabric.noise(self.noise)
        return 1.0 + self.rng.gauss(0.0, self.noise)

    def _burst(self, group: list[str]) -> GroupResult:
        self.groups_run += 1
        if len(group) < 2:
            return GroupResult(None, note="one node: nothing between nodes to measure")
        members = group if len(group) <= 8 else set(group)
        if self.dead and any(n in members for n in self.dead):
            return GroupResult(False, note="timed out: a rank never reached the collective")
        figure = 1.0
        for node, factor in self.slow.items():
            if node in members:
                figure = min(figure, factor)
        for (a, b), factor in self.links:
            if a in members and b in members:
                figure = min(figure, factor)
        for node, factor in self.flapping.items():
            if node in members and self.rng.random() < 0.5:
                figure = min(figure, factor)
        for (a, b), factor in self.flapping_links:
            if a in members and b in members and self.rng.random() < 0.5:
                figure = min(figure, factor)
        spanned = {self.topology[n] for n in group} if self.topology else set()
        for (ga, gb), factor in self.trunks:
            if ga in spanned and gb in spanned:
                figure = min(figure, factor)
        if self.fabric is not None:
            figure *= min(self.fabric.factor[s] for s in spanned)
        figure *= max(0.0, self._draw())
        times = None
        if self.times:
            base, straggle = self.base_time_s, self.straggle
            times = {n: base * max(0.05, self._draw()) * straggle.get(n, 1.0) for n in group}
        return GroupResult(figure >= self.threshold, figure=figure, times_s=times)


def node_names(count: int) -> list[str]:
    width = max(2, len(str(count - 1)))
    return [f"n{i:0{width}d}" for i in range(count)]


def racks(nodes: list[str], size: int) -> dict[str, str]:
    """Consecutive nodes in racks of `size`: node -> rack name."""
    width = max(2, len(str((len(nodes) - 1) // size)))
    return {n: f"rack{i // size:0{width}d}" for i, n in enumerate(nodes)}


def random_faults(model: str, nodes: list[str], rng: random.Random,
                  topology: dict[str, str] | None = None) -> list[Fault]:
    """The faults of one trial of a fault model, on distinct nodes (two-faults, three-faults: that
    many faults of kinds drawn from slow-node, bad-link, dead-rank and straggler)."""
    if model == "boundary":
        if not topology:
            raise ValueError("the boundary fault model needs a topology")
        groups = sorted(set(topology.values()))
        return [Fault("boundary", tuple(sorted(rng.sample(groups, 2))), rng.uniform(0.2, 0.6))]
    kinds = {"two-faults": 2, "three-faults": 3}
    chosen = [rng.choice(SINGLE) for _ in range(kinds[model])] if model in kinds else [model]
    if model not in kinds and model not in SINGLE:
        raise ValueError(f"unknown fault model {model!r}; known: {', '.join(FAULT_MODELS)}")
    need = sum(2 if k == "bad-link" else 1 for k in chosen)
    picked = rng.sample(nodes, need)
    faults = []
    for kind in chosen:
        if kind == "bad-link":
            a, b = picked.pop(), picked.pop()
            faults.append(Fault(kind, (a, b), rng.uniform(0.1, 0.6)))
        elif kind == "straggler":
            faults.append(Fault(kind, (picked.pop(),), rng.uniform(1.5, 3.0)))
        elif kind == "slow-node":
            faults.append(Fault(kind, (picked.pop(),), rng.uniform(0.3, 0.6)))
        else:
            faults.append(Fault(kind, (picked.pop(),)))
    return faults


def scenario(model: str, count: int, seed: int, *, noise: float = 0.05, rack_size: int | None = None,
             times: bool = True) -> tuple[list[str], dict[str, str] | None, FaultModel]:
    """Nodes, topology (racks for the boundary model, or when `rack_size` is given) and a fault model."""
    rng = random.Random(seed)
    nodes = node_names(count)
    if rack_size is None and model == "boundary":
        rack_size = max(2, min(32, count // 4))
    topology = racks(nodes, rack_size) if rack_size else None
    faults = random_faults(model, nodes, rng, topology)
    fm = FaultModel(nodes, faults, topology=topology, noise=noise, seed=rng.randrange(1 << 30), times=times)
    return nodes, topology, fm


def score(named: set[tuple[str, frozenset[str]]], ambiguous: int,
          truth: set[tuple[str, frozenset[str]]]) -> dict[str, Any]:
    """right: exactly the faults, each named, nothing ambiguous; false_blame: something healthy named."""
    return {"right": named == truth and not ambiguous, "false_blame": bool(named - truth),
            "ambiguous": bool(ambiguous)}


def score_isolation(result: Isolation, model: FaultModel) -> dict[str, Any]:
    named = {(a.kind, frozenset(a.members)) for a in result.named()}
    ambiguous = sum(1 for a in result.attributions if a.ambiguous)
    return score(named, ambiguous, model.truth())
