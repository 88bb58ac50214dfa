"""net.bandwidth's flapping-link rule on simulated rings: what it costs healthy runs and what it catches.

    python bench/flapping_link.py [--sizes 8,64,256,1024] [--noise 0.02,0.05] [--above 1.02,1.05,1.5]
                                  [--runs 200] [--repeats 3] [--seed 1] [--out FILE.json]

Each run measures a ring of N nodes the way net.bandwidth does: every link `repeats` times per ring,
the ring's rounds of disjoint pairs one after another, by the readings protocol the check runs
(preflight.launch.recheck.take_readings): a second ring always, a third when the first had a link
below the floor (as after an isolation pass that pinned nothing), two watch rings at once after a
second that a first over the floor left to decide (counted only with a link under a quarter of the
floor), up to two more at once after a ring far below the floor (a link under half of it) that no
other ring below it backs, a ring just under the floor measured again at once. Every iperf3 sample is a
burst of preflight.launch.isolation_sim's FaultModel under the fabric's noise (Fabric: Student-t
noise with 3 degrees of freedom at the scale given, a factor per leaf switch of a quarter of the nodes,
2 to 32, as the fault corpus has them (sd 3%, AR(1) over rounds), a noisy neighbour slowing one switch
to 0.6-0.8 for 2 to 8 rounds), healthy links at
`above` times the floor. The facts go through the check's own evaluate (NetBandwidth.evaluate).

Two fleets per cell: healthy, and healthy but for one flapping ring link (13% of its figure in half its
bursts, the fault corpus's flapping-link). Columns: healthy runs with a flapping-link FAIL (a false
NO-GO the rule adds), healthy runs with a drop noted (one ring: not judged), and for the flapping
link the runs NO-GO with the rule and without it (the check's other findings alone), each with
Wilson's 95% interval. Not a test: the figures depend on the noise model; the rule's cost and gain
are measured side by side on the same runs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from error_rates import percent, wilson, with_interval  # noqa: E402
from preflight.core.check import Expect  # noqa: E402
from preflight.core.model import Status  # noqa: E402
from preflight.launch.fault_corpus import switch_size  # noqa: E402
from preflight.launch.isolation_sim import Fabric, Fault, FaultModel, node_names, racks  # noqa: E402
from preflight.launch.pairs import ring_rounds  # noqa: E402
from preflight_checks.net.bandwidth import NetBandwidth, Params  # noqa: E402
from preflight.launch.recheck import take_readings  # noqa: E402
from preflight_checks.net.bandwidth_judge import below_floor, deep_below, dropped_out, far_below, rings_of  # noqa: E402

NOMINAL_GBPS = 25.0  # a healthy link's figure; only ratios matter
check = NetBandwidth()


def ring(model: FaultModel, rounds: list[list[tuple[str, str]]], repeats: int) -> list[dict]:
    """One ring reading: every link `repeats` times, round after round, as the check's schedule runs."""
    links = {pair: {"src": pair[0], "dst": pair[1], "dst_address": pair[1], "local": False, "samples": []}
             for r in rounds for pair in r}
    for _ in range(repeats):
        for pairs in rounds:
            for pair, result in zip(pairs, model.measure([list(p) for p in pairs])):
                links[pair]["samples"].append({"gbps": round(result.figure * NOMINAL_GBPS, 3)})
    return list(links.values())


def one_run(nodes: list[str], faults: list[Fault], noise: float, above: float, repeats: int,
            seed: int) -> tuple[Any, list[list[dict]], float]:
    """The check's outcome, the rings it read and their floor, for one simulated run."""
    model = FaultModel(nodes, faults, topology=racks(nodes, switch_size(len(nodes))), noise=noise,
                       threshold=1.0 / above, seed=seed, times=False, fabric=Fabric())
    min_gbps = NOMINAL_GBPS / above
    rounds = ring_rounds(nodes)
    first = ring(model, rounds, repeats)

    def isolate(reading: dict) -> dict | None:  # the pass is not simulated here: it pins nothing
        return {"isolation": {"attributions": []}} if below_floor(reading["links"], min_gbps) else None

    # the readings protocol the check runs (preflight.launch.recheck.take_readings)
    _, rechecks = take_readings({"links": first}, isolate, lambda: {"links": ring(model, rounds, repeats)},
                                lambda r: below_floor(r["links"], min_gbps), lambda: float("inf"), 0.0,
                                deep_below=lambda r: deep_below(r, min_gbps),
                                dropped_out=lambda r: dropped_out(r, min_gbps),
                                far_below=lambda r: far_below(r, min_gbps))
    facts = {"pattern": "ring", "nodes": nodes, "unreachable": [], "addresses": {n: n for n in nodes},
             "streams": 1, "duration_s": 5, "repeats": repeats, "probe": {n: {"iperf3": True} for n in nodes},
             "links": first, "rounds": [[list(p) for p in r] for r in rounds], "rechecks": rechecks}
    outcome = check.evaluate(facts, Params(min_gbps=min_gbps, repeats=repeats), Expect())
    return outcome, rings_of(facts, min_gbps), min_gbps


def flapping(outcome: Any, link: tuple[str, str] | None = None) -> bool:
    return any(f.id.endswith(".flapping-link") and (link is None or f.component.nodes == list(link))
               for f in outcome.findings)


def cell(count: int, noise: float, above: float, runs: int, repeats: int, seed: int) -> dict:
    """`runs` healthy runs and `runs` with one ring link flapping, on `count` nodes."""
    nodes = node_names(count)
    rng = random.Random(seed)
    counts = dict.fromkeys(("healthy_fail", "healthy_noted", "flap_nogo", "flap_median", "flap_rule", "flap_either"), 0)
    for _ in range(runs):
        outcome, _, _ = one_run(nodes, [], noise, above, repeats, rng.randrange(1 << 30))
        counts["healthy_fail"] += flapping(outcome)
        counts["healthy_noted"] += any("dropped under" in d for d in outcome.details)
        i = rng.randrange(count)
        link = (nodes[i], nodes[(i + 1) % count])  # a link the ring measures: a node to its successor
        outcome, rings, floor = one_run(nodes, [Fault("flapping-link", link, 0.13)], noise, above, repeats,
                                        rng.randrange(1 << 30))
        median = below_floor([entry for links in rings for entry in links if (entry["src"], entry["dst"]) == link],
                             floor)
        rule = flapping(outcome, link)
        counts["flap_nogo"] += outcome.status is Status.FAIL
        counts["flap_median"] += median
        counts["flap_rule"] += rule
        counts["flap_either"] += median or rule
    return {"nodes": count, "noise": noise, "above": above, "runs": runs, **counts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,256,1024")
    parser.add_argument("--noise", default="0.02,0.05")
    parser.add_argument("--above", default="1.02,1.05,1.5")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="also write the rows, with the counts behind each rate, to this JSON file")
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.sizes.split(",")]
        noises = [float(x) for x in args.noise.split(",")]
        aboves = [float(x) for x in args.above.split(",")]
    except ValueError as exc:
        parser.error(f"--sizes, --noise, --above: comma-separated numbers ({exc})")
    if min(sizes) < 3 or args.runs < 1 or args.repeats < 1:
        parser.error("--sizes: 3 nodes at least; --runs and --repeats: 1 at least")
    print("| nodes | noise | healthy at | healthy runs: flapping-link FAIL | healthy runs: one drop noted | flapping "
          "link: below the floor by its median in a ring | named by flapping-link | either | NO-GO |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for count in sizes:
        for noise in noises:
            for above in aboves:
                row = cell(count, noise, above, args.runs, args.repeats, args.seed)
                rows.append(row)

                def rate(key: str, row: dict = row) -> str:
                    return with_interval(row[key] / row["runs"], wilson(row[key], row["runs"]))

                print(f"| {count} | {percent(noise, 0)} | {above:g}x | "
                      + " | ".join(rate(k) for k in ("healthy_fail", "healthy_noted", "flap_median", "flap_rule",
                                                     "flap_either", "flap_nogo")) + " |", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "repeats": args.repeats, "rows": rows},
                                             indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
