"""Adaptive fault isolation beside round-robin pairs, simulated: rounds, wall time, attribution.

    python bench/isolation_sim.py [--sizes 8,64,256,1024,4096] [--faults slow-node,...] [--trials 1000]
                                  [--noise 0.05] [--burst-s 60] [--seed 1] [--pair-budget 200000] [--json]

Both methods measure the same simulated cluster (preflight.launch.isolation_sim: one fault model per trial,
Gaussian measurement noise of `--noise`, a group bad below 0.8 of the healthy figure):

- adaptive: preflight.launch.isolation.isolate, the code the checks run, screen round included;
- pairs: today's pairwise pass: every pair once in round-robin rounds (preflight.launch.pairs.round_robin,
  N-1 rounds), judged as collectives.cluster judges it (preflight.launch.pairs.attribute: a node whose
  every pair is bad; the bad pairs left over). It has no per-node times, so it never names a
  straggler, and no topology.

Simulated wall time is rounds x `--burst-s` (one burst of all-reduces per round). Accuracy: the
share of trials whose attributions are exactly the injected faults, nothing ambiguous;
false_blame: the share in which something healthy was named (a node, link or boundary).

Trials: `--trials` at up to 64 nodes; above that the adaptive method runs trials x 64 / N (at least
10) and the pairs method as many as `--pair-budget` pair runs allow (fewer than 3: its accuracy is
not simulated, shown as "-"; its rounds are exact). The rows say how many trials they ran. The
default run takes a minute or two on two cores. Not a test: nothing here gates anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.launch.isolation import isolate, round_bound  # noqa: E402
from preflight.launch.isolation_sim import FAULT_MODELS, scenario, score, score_isolation  # noqa: E402
from preflight.launch.pairs import attribute, round_robin  # noqa: E402


SIZES = (8, 64, 256, 1024, 4096)


def adaptive_trial(fault: str, nodes: int, seed: int, noise: float) -> tuple[int, dict]:
    names, topology, model = scenario(fault, nodes, seed, noise=noise)
    result = isolate(names, model.measure, topology=topology)
    return result.round_count, score_isolation(result, model)


def pairs_trial(fault: str, nodes: int, seed: int, noise: float) -> tuple[int, dict]:
    names, _, model = scenario(fault, nodes, seed, noise=noise, times=False)
    rounds = round_robin(names)
    measured = []
    for pairs in rounds:
        for (a, b), result in zip(pairs, model.measure([[a, b] for a, b in pairs])):
            state = "error" if result.ok is None else "good" if result.ok else "bad"
            measured.append({"nodes": [a, b], "state": state})
    found = attribute(measured)
    named = {("node", frozenset([n])) for n in found["nodes"]} | {("link", frozenset(p)) for p in found["pairs"]}
    return len(rounds), score(named, 1 if found["all_bad"] else 0, model.truth())


def row(nodes: int, fault: str, method: str, trials: int, seed: int, noise: float, burst_s: float) -> dict:
    trial = adaptive_trial if method == "adaptive" else pairs_trial
    rounds, right, blamed, ambiguous = [], 0, 0, 0
    for index in range(trials):
        count, scored = trial(fault, nodes, seed * 1_000_003 + index, noise)
        rounds.append(count)
        right += scored["right"]
        blamed += scored["false_blame"]
        ambiguous += scored["ambiguous"]
    if not trials:  # pairs too large to simulate: its rounds are exact all the same
        rounds = [len(round_robin([str(i) for i in range(nodes)]))]
    mean = statistics.fmean(rounds)
    return {"nodes": nodes, "fault": fault, "method": method, "trials": trials, "rounds": round(mean, 2),
            "rounds_max": max(rounds), "wall_s": round(round(mean, 2) * burst_s, 1),
            "accuracy": round(right / trials, 4) if trials else None,
            "false_blame": round(blamed / trials, 4) if trials else None,
            "ambiguous": round(ambiguous / trials, 4) if trials else None}


def trials_for(method: str, nodes: int, trials: int, pair_budget: int) -> int:
    if method == "adaptive":
        return trials if nodes <= 64 else max(10, trials * 64 // nodes)
    runs = nodes * (nodes - 1) // 2
    count = min(trials, pair_budget // max(1, runs))
    return count if count >= 3 else 0


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def print_row(r: dict) -> None:
    minutes = r["wall_s"] / 60
    print(f"{r['nodes']:>5} {r['fault']:<13} {r['method']:<8} {r['trials']:>6} {r['rounds']:>8.2f} {r['rounds_max']:>5} "
          f"{minutes:>9.2f} {percent(r['accuracy']):>8} {percent(r['false_blame']):>8} {percent(r['ambiguous']):>6}",
          flush=True)


def targets(rows: list[dict], burst_s: float) -> list[str]:
    out = []
    adaptive = [r for r in rows if r["method"] == "adaptive"]
    for r in adaptive:
        if r["fault"] in ("slow-node", "dead-rank"):
            bound = round_bound(r["nodes"])
            out.append(f"one bad node ({r['fault']}), N={r['nodes']}: at most {r['rounds_max']} rounds, bound "
                       f"2*ceil(log2 N)+4 = {bound}: {'met' if r['rounds_max'] <= bound else 'MISSED'}")
    for r in adaptive:
        if r["nodes"] == 1024:
            out.append(f"N=1024, {r['fault']}: {r['wall_s'] / 60:.1f} min on average, {r['rounds_max'] * burst_s / 60:.0f} "
                       f"at most, with {burst_s:g} s bursts (target under 15 on average)")
    for r in adaptive:
        if r["trials"] >= 1000:
            ok = r["accuracy"] >= 0.99 and r["false_blame"] < 0.005
            out.append(f"N={r['nodes']}, {r['fault']}, {r['trials']} trials: right {percent(r['accuracy'])}, healthy "
                       f"blamed {percent(r['false_blame'])}: {'met' if ok else 'MISSED'}")
    for r in adaptive:
        if r["fault"] == "boundary":
            out.append(f"boundary between two racks, N={r['nodes']}: found in {percent(r['accuracy'])} of {r['trials']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--faults", default=",".join(FAULT_MODELS))
    parser.add_argument("--methods", default="adaptive,pairs")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--burst-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pair-budget", type=int, default=200_000, help="pair runs per row for the pairs method")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    faults = args.faults.split(",")
    unknown = sorted(set(faults) - set(FAULT_MODELS))
    if unknown:
        raise SystemExit(f"unknown fault models {unknown}; known: {', '.join(FAULT_MODELS)}")
    methods = args.methods.split(",")
    started = time.monotonic()
    if not args.json:
        print(f"noise {args.noise:g} (standard deviation, fraction of the figure), bursts of {args.burst_s:g} s")
        print(f"{'nodes':>5} {'fault':<13} {'method':<8} {'trials':>6} {'rounds':>8} {'max':>5} {'wall min':>9} "
              f"{'right':>8} {'blamed':>8} {'ambig':>6}")
    rows = []
    for nodes in sizes:
        for fault in faults:
            for method in methods:
                r = row(nodes, fault, method, trials_for(method, nodes, args.trials, args.pair_budget),
                        args.seed, args.noise, args.burst_s)
                rows.append(r)
                if not args.json:
                    print_row(r)
    if args.json:
        print(json.dumps(rows, allow_nan=False, indent=1))
        return
    print()
    for line in targets(rows, args.burst_s):
        print(line)
    print(f"\n({time.monotonic() - started:.0f} s; rounds = mean over trials, max = the most any trial took)")


if __name__ == "__main__":
    main()
