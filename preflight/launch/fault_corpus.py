"""A labelled fault corpus for the simulator, and how preflight does on it: what it blames, what it
misses, what it calls NO-GO. Pure (seeded).

Each fault type (FAULT_TYPES) injects its faults into a simulated run (preflight.launch.isolation_sim)
and says what the right answer is: the components to blame. One trial of a type is what a run does:
- the cross-node checks' all-node readings (collectives.cluster's all-reduce), with measurement
  noise, taken as the checks take them (preflight.launch.recheck.take_readings): the first; the
  adaptive isolation pass (preflight.launch.isolation, with its confirmation rule) from a reading
  below its floor, given the rounds the checks give it at that size (pass_rounds) unless told otherwise; a second reading always, a third after a first below it that the pass pinned on
  nothing, two watch readings after a second that a first over the floor left to decide (counted only
  when one drops out under a quarter of the floor), up to two more at once after one far below it
  (under half) that no other below it backs; NO-GO when most readings are below the floor, one
  dropped out, or one is far below it with another below it;
- the node checks' facts (a small /dev/shm, a read-only checkpoint directory, a second torch, no
  framework): a fact carries no measurement noise, so the check that reads it FAILs on that node
  every time; a dead node answers nothing: an ERROR, which is NO-GO and acts on nothing;
- each GPU's matrix-multiply rate (gpu.visibility), compared across the run's GPUs by the test of
  fleet.fail-slow (preflight.history.outliers.lagging).
What is blamed is then read as the actions read it: confirmed components only (preflight.core.blame's
rule: a node or GPU is acted on; a link or a boundary is named, never drained; a suspect is neither).

Noise (`noise`, the standard deviation of a group's figure as a fraction of it) is the run-to-run
spread of all-reduce bandwidth; `gpu_noise` that of one GPU's GEMM rate among identical GPUs. With a
`fabric` (preflight.launch.isolation_sim.Fabric) the noise is a real fabric's: heavy-tailed, shared by
the bursts through one switch and correlated over rounds, with a noisy neighbour on one switch for a
few rounds; the pass is given the switch topology, as a real run gives it; and half of each GPU's
spread is shared by the GPUs of its node (one node's cooling, clocks, power cap).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from preflight.core.blame import past_radius
from preflight.history.outliers import gpu_lagging
from preflight.launch.isolation import IsolationParams, isolate
from preflight.launch.isolation_types import pass_rounds
from preflight.launch.isolation_launch import slow_ranks_reason
from preflight.launch.isolation_sim import Fabric, Fault, FaultModel, node_names, racks
from preflight.launch.recheck import (
    CONFIRMED, DROP_OUT, FAR_BELOW, INTERMITTENT, MARGINAL, UNCONFIRMED, measurements, readings_of, recheck_wanted, take_readings,
)

GPUS_PER_NODE = 8
FLOOR = 0.8  # a group is bad below 0.8 of the healthy figure (isolation_sim's default threshold)

# type -> (what it is, the label of its ground truth)
FAULT_TYPES: dict[str, str] = {
    "healthy": "a healthy fleet, measurement noise only: nothing to blame",
    "slow-node": "one node's NIC at 30-60% of its peers'",
    "refused-link": "no traffic between two nodes (a firewall rule, a dead route)",
    "slow-link": "the path between two nodes at 10-60%",
    "boundary": "the trunk between two racks at 20-60%",
    "straggler": "one node's ranks 1.5-3x slower than the others' (per-rank times)",
    "flapping-node": "one node's NIC at 30-60%, in half of the bursts it is in",
    "flapping-link": "the path between two nodes at 13% of its figure, in half of the bursts holding both",
    "slow-1pct": "1% of the nodes (at least one) each 30% slow",
    "two-bad-nodes": "two slow nodes",
    "node-and-link": "a slow node and a slow link elsewhere",
    "gpu-5pct-slow": "one GPU's GEMM rate 5% below its peers' (passes every floor)",
    "nic-rail-half": "one of a node's NIC rails at half speed: its collectives run at the slowest rail's pace",
    "small-shm": "a node's /dev/shm too small (node.environment)",
    "read-only-checkpoint": "a node's checkpoint directory mounted read-only (checkpoint.roundtrip)",
    "torch-drift": "one node with another torch than the rest (versions.consistency)",
    "no-framework": "one node without torch (node.environment, versions)",
    "dead-node": "one node does not answer (ERROR: NO-GO, and nothing is acted on for it)",
}
NODE_CHECK_FAULTS = ("small-shm", "read-only-checkpoint", "torch-drift", "no-framework")


@dataclass
class Trial:
    truth: set[tuple[str, frozenset[str]]]  # what should be blamed: (kind, members)
    fault_nodes: set[str]  # the nodes a fault is on (ends of a link and racks' nodes not included)
    blamed: set[tuple[str, frozenset[str]]] = field(default_factory=set)  # confirmed, as the actions read them
    suspects: int = 0
    suspected: set[tuple[str, frozenset[str]]] = field(default_factory=set)  # named, not confirmed (WARN)
    nogo: bool = False
    rounds: int = 0  # the isolation pass's rounds and the all-node rechecks
    rechecks: int = 0  # all-node readings taken again (each one round)
    gpus_flagged: int = 0  # GPUs named fail-slow that are healthy
    gpus: int = 0
    faulty: bool = True  # a fault was injected (the run should be NO-GO)
    topology: dict[str, str] | None = None  # node -> switch, when the run had one


def inject(kind: str, nodes: list[str], rng: random.Random) -> tuple[list[Fault], dict[str, Any]]:
    """The simulator's faults of one fault type, and what falls outside the network simulator."""
    pick = rng.sample(nodes, 4)
    extra: dict[str, Any] = {}
    faults: list[Fault] = []
    if kind in ("slow-node", "two-bad-nodes", "node-and-link"):
        faults.append(Fault("slow-node", (pick[0],), rng.uniform(0.3, 0.6)))
    if kind == "two-bad-nodes":
        faults.append(Fault("slow-node", (pick[1],), rng.uniform(0.3, 0.6)))
    if kind in ("slow-link", "node-and-link"):
        faults.append(Fault("bad-link", (pick[2], pick[3]), rng.uniform(0.1, 0.6)))
    if kind == "refused-link":
        faults.append(Fault("bad-link", (pick[2], pick[3]), 0.0))
    if kind == "straggler":
        faults.append(Fault("straggler", (pick[0],), rng.uniform(1.5, 3.0)))
    if kind == "flapping-node":
        faults.append(Fault("flapping", (pick[0],), rng.uniform(0.3, 0.6)))
    if kind == "flapping-link":
        faults.append(Fault("flapping-link", (pick[2], pick[3]), 0.13))
    if kind == "slow-1pct":
        faults += [Fault("slow-node", (n,), 0.7) for n in rng.sample(nodes, max(1, len(nodes) // 100))]
    if kind == "nic-rail-half":
        faults.append(Fault("slow-node", (pick[0],), 0.5))
    if kind == "gpu-5pct-slow":
        extra["slow_gpu"] = (pick[0], rng.randrange(GPUS_PER_NODE), 0.95)
    if kind in NODE_CHECK_FAULTS:
        extra["node_check"] = pick[0]
    if kind == "dead-node":
        extra["dead"] = pick[0]
    return faults, extra


def switch_size(count: int) -> int:
    """Nodes under one leaf switch in a simulated run of `count` nodes: a quarter of them, 2 to 32."""
    return max(2, min(32, count // 4))


def run_trial(kind: str, count: int, seed: int, *, noise: float, gpu_noise: float,
              params: IsolationParams | None = None, floor: float = FLOOR, fabric: Fabric | None = None,
              measure_again: bool = True, watch: bool = True) -> Trial:
    """One simulated run of fault type `kind` on `count` nodes (`measure_again`: a reading just under
    its floor is measured again at once, as the checks do; False: as they did before; `watch`: the watch
    readings, and the second look at a reading far below the floor alone, are taken, as the checks do;
    False: as they did before)."""
    if kind not in FAULT_TYPES:
        raise ValueError(f"unknown fault type {kind!r}; known: {', '.join(FAULT_TYPES)}")
    rng = random.Random(seed)
    nodes = node_names(count)
    topology = racks(nodes, switch_size(count)) if fabric or kind == "boundary" else None
    faults, extra = inject(kind, nodes, rng)
    if kind == "boundary":
        groups = sorted(set(topology.values()))
        faults = [Fault("boundary", tuple(sorted(rng.sample(groups, 2))), rng.uniform(0.2, 0.6))]
    model = FaultModel(nodes, faults, topology=topology, noise=noise, threshold=floor, seed=rng.randrange(1 << 30),
                       fabric=fabric)
    truth = set(model.truth())
    trial = Trial(truth, {n for f in faults if f.kind not in ("boundary", "bad-link", "flapping-link") for n in f.members},
                  faulty=kind != "healthy", topology=topology)
    dead = extra.get("dead")
    if dead is not None:  # unreachable: an ERROR, NO-GO; nothing measures it, nothing is acted on for it
        trial.nogo, trial.fault_nodes = True, {dead}
        nodes = [n for n in nodes if n != dead]
    if extra.get("node_check"):
        node = extra["node_check"]
        trial.truth.add(("node", frozenset([node])))
        trial.fault_nodes.add(node)
        trial.blamed.add(("node", frozenset([node])))  # the fact is read, not measured: its check FAILs on it
        trial.nogo = True
    _readings(trial, model, nodes, topology, params, measure_again, watch)
    _fail_slow(trial, nodes, extra.get("slow_gpu"), gpu_noise, rng, shared=fabric is not None)
    return trial


def _readings(trial: Trial, model: FaultModel, nodes: list[str], topology: dict[str, str] | None,
              params: IsolationParams | None, measure_again: bool = True, watch: bool = True) -> None:
    """The all-node readings as the cluster checks take them (preflight.launch.recheck.take_readings):
    the first; the pass from a reading below its floor (or with one node's ranks far slower than the
    others': collectives.cluster's pairwise_reason); a second reading always, a third after a first
    below it that the pass pinned on nothing; after a second that a first over the floor left to decide,
    two watch readings at once, counted only when one drops out (under DROP_OUT of the floor); up to two
    more at once after one reading far below the floor that no other below it backs; a reading just
    under the floor measured again at once; NO-GO unless most readings met the floor, none dropped
    out, and none was far below it beside another below it (intermittent is NO-GO too). Each later
    measurement is one round."""
    passes: list[Any] = []
    params = given_rounds(params, len(nodes))

    def reading() -> dict[str, Any]:
        result = model.measure([nodes])[0]
        return {"ok": result.ok, "figure": result.figure, "result": result}

    def isolate_from(read: dict[str, Any]) -> dict[str, Any] | None:
        screen = read["result"]
        if not (screen.ok is False or slow_ranks_reason(screen.times_s)):
            return None
        result = isolate(nodes, model.measure, topology=topology, screen=screen if topology is None else None,
                         params=params)
        passes.append(result)
        return {"isolation": result.to_dict(), "from_below": screen.ok is False}

    def under(share: float) -> Callable[[dict[str, Any]], bool]:
        """A measured reading under `share` of the floor."""
        return lambda read: read["figure"] is not None and read["figure"] < share * model.threshold

    far, out = under(FAR_BELOW), under(DROP_OUT)

    def deep(read: dict[str, Any]) -> bool:
        return read["figure"] is None or read["figure"] < MARGINAL * model.threshold

    first = reading()
    found, later = take_readings(first, isolate_from, reading, lambda r: r["ok"] is False,
                                 lambda: float("inf"), 0.0, deep_below=deep if measure_again else None,
                                 dropped_out=out if watch else None, far_below=far if watch else None)
    trial.rechecks = measurements(later)
    trial.rounds = trial.rechecks + sum(r.round_count for r in passes)  # the first reading is not counted
    if found is not None and found["from_below"] and not recheck_wanted(found["isolation"]):
        trial.nogo = True  # the pass pinned the shortfall (or was ambiguous): its findings stand
    else:
        judged = readings_of(later, lambda r: r["ok"], far=far, first=first, first_below=first["ok"] is False,
                             out=out)
        trial.nogo = trial.nogo or judged.outcome in (CONFIRMED, INTERMITTENT, UNCONFIRMED) and judged.below > 0
    for result in passes:
        for found_one in result.attributions:
            if found_one.ambiguous:
                continue
            if found_one.confidence == "confirmed":
                trial.blamed.add((found_one.kind, frozenset(found_one.members)))
                trial.nogo = trial.nogo or found_one.kind != "straggler"  # a straggler alone: slow, passing (WARN)
            else:
                trial.suspects += 1
                trial.suspected.add((found_one.kind, frozenset(found_one.members)))


def given_rounds(params: IsolationParams | None, count: int) -> IsolationParams:
    """`params` with the most rounds a check gives a pass over `count` nodes where they name none
    (pass_rounds): the corpus measures the pass the checks run, cut short where theirs would be."""
    params = params or IsolationParams()
    return params if params.max_rounds is not None else dataclasses.replace(params, max_rounds=pass_rounds(count))


def _fail_slow(trial: Trial, nodes: list[str], slow: tuple[str, int, float] | None, gpu_noise: float,
               rng: random.Random, shared: bool = False) -> None:
    """The fail-slow test on every GPU's rate. `shared`: half of the spread's variance is the node's,
    shared by its GPUs."""
    gauss = rng.gauss
    gpus = [(n, i) for n in nodes for i in range(GPUS_PER_NODE)]
    own = gpu_noise / math.sqrt(2) if shared else gpu_noise
    node_part = {n: gauss(0.0, own) if shared else 0.0 for n in nodes}
    # gpu.visibility's rate is the median of three timed products (preflight.workers.gpu_probe)
    rates = [(1.0 + node_part[n]) * sorted(1.0 + gauss(0.0, own) for _ in range(3))[1] for n, _ in gpus]
    if slow is not None:
        trial.truth.add(("gpu", frozenset([f"{slow[0]}:{slow[1]}"])))
        trial.fault_nodes.add(slow[0])
        rates[gpus.index((slow[0], slow[1]))] *= slow[2]
    # fleet.fail-slow's test: each GPU against the other GPUs of its node (a node's own shortfall is a
    # fleet.outlier of the node, a WARN on no GPU, and is not counted here)
    gpu_hits, _ = gpu_lagging(rates, [n for n, _ in gpus], "higher")
    for index, _, _ in gpu_hits:
        node, gpu = gpus[index]
        trial.blamed.add(("gpu", frozenset([f"{node}:{gpu}"])))
        if slow is None or (node, gpu) != slow[:2]:
            trial.gpus_flagged += 1
    trial.gpus = len(gpus)


def _acted(trial: Trial, count: int) -> set[str]:
    """The nodes the actions take capacity away from in a trial: every blamed node (preflight.core.blame),
    none when they are past the blast radius (2% of the run's nodes, at least one; half a switch)."""
    acted = set().union(*[_nodes_of(c) for c in trial.blamed])
    return set() if past_radius(sorted(acted), node_names(count), groups=trial.topology) else acted


def _nodes_of(component: tuple[str, frozenset[str]]) -> set[str]:
    """The nodes an action would act on for a blamed component: a node's; none for a link, a boundary or
    a fail-slow GPU (a WARN: named, acted on only with fail_on = "warn")."""
    kind, members = component
    return set(members) if kind in ("node", "straggler") else set()


def row(kind: str, count: int, noise: float, gpu_noise: float, trials: int, seed: int = 1,
        params: IsolationParams | None = None, floor: float = FLOOR, fabric: Fabric | None = None,
        measure_again: bool = True, watch: bool = True) -> dict[str, Any]:
    """One row of the error-rate table: `trials` runs of fault type `kind`. Each rate comes with its
    counts (for intervals and pooling), and `per_run` each run's (true blames, blames, faults, faults named
    as blamed or suspect), counted."""
    started = time.monotonic()
    runs = [run_trial(kind, count, seed * 1_000_003 + i, noise=noise, gpu_noise=gpu_noise, params=params, floor=floor,
                      fabric=fabric, measure_again=measure_again, watch=watch) for i in range(trials)]
    # each run: (true blames, blames, faults, faults named: blamed, or a suspect named as a WARN)
    per_run = [(len(t.blamed & t.truth), len(t.blamed), len(t.truth), len((t.blamed | t.suspected) & t.truth))
               for t in runs]
    true_blames, blames, truths, named = (sum(r[i] for r in per_run) for i in range(4))
    healthy_node_runs = sum(count - len(t.fault_nodes) for t in runs)
    wrongly_acted = sum(len(_acted(t, count) - t.fault_nodes) for t in runs if t.blamed - t.truth)
    faulty = [t for t in runs if t.faulty]
    healthy = [t for t in runs if not t.faulty]
    # fault runs that went through unnoticed: not NO-GO, and no finding named a faulty component
    missed = sum(not t.nogo and not ((t.blamed | t.suspected) & t.truth) for t in faulty)
    nogo = sum(t.nogo for t in healthy)
    gpus_flagged, gpus = sum(t.gpus_flagged for t in runs), max(1, sum(t.gpus for t in runs))
    return {
        "fault": kind, "nodes": count, "noise": noise, "gpu_noise": gpu_noise, "floor": floor, "runs": trials,
        "model": "fabric" if fabric else "gauss",
        # healthy runs called NO-GO (the all-node reading below its floor, or a confirmed blame)
        "false_nogo_runs": round(nogo / len(healthy), 4) if healthy else None,
        # healthy node-runs acted on (drained, cordoned, the hook's exit code) for a blame not theirs
        "false_nogo_node_runs": round(wrongly_acted / healthy_node_runs, 6) if healthy_node_runs else None,
        "missed": round(missed / len(faulty), 4) if faulty else None,
        "precision": round(true_blames / blames, 4) if blames else None,
        "recall": round(true_blames / truths, 4) if truths else None,
        # faults named at all: confirmed, or a suspect (a WARN that names it, acted on by nobody)
        "recall_named": round(named / truths, 4) if truths else None,
        "counts": {"nogo": nogo, "healthy_runs": len(healthy), "acted": wrongly_acted,
                   "healthy_node_runs": healthy_node_runs, "missed": missed, "faulty_runs": len(faulty),
                   "gpus_flagged": gpus_flagged, "gpus": gpus},
        "blames": blames, "true_blames": true_blames, "faults": truths,  # for pooling rows
        # each distinct (true blames, blames, faults) of a run, with how many runs had it
        "per_run": [[*k, n] for k, n in sorted(Counter(per_run).items())],
        "suspects_per_run": round(sum(t.suspects for t in runs) / trials, 3),
        "gpu_false_alarms": round(gpus_flagged / gpus, 6),
        "gpu_false_per_run": round(gpus_flagged / trials, 3),
        "rechecks_per_run": round(sum(t.rechecks for t in runs) / trials, 3),
        "rounds": round(sum(t.rounds for t in runs) / trials, 2),
        "rounds_max": max(t.rounds for t in runs),
        "wall_s": round(time.monotonic() - started, 2),
    }


def healthy_near_floor(count: int, trials: int, params: IsolationParams | None = None, *, floor: float = 0.95,
                       noise: float = 0.05) -> tuple[int, int]:
    """Healthy fleets just above their floor through the pass: (runs with a component blamed, runs
    where the noise made a group bad or left a suspect)."""
    blamed = flagged = 0
    nodes = node_names(count)
    for seed in range(trials):
        model = FaultModel(nodes, [], noise=noise, threshold=floor, seed=seed, times=False)
        result = isolate(nodes, model.measure, params=given_rounds(params, count))
        blamed += any(a.sure for a in result.attributions)
        flagged += bool(result.attributions) or any(g.ok is False for r in result.rounds for g in r.results)
    return blamed, flagged

