"""preflight's own error rates on a labelled fault corpus, simulated: false NO-GO, missed faults,
attribution precision and recall, rounds.

    python bench/error_rates.py [--json] [--sizes 8,64,1024] [--noise 0.02,0.05,0.10] [--faults ...]
                                [--trials-8 200] [--trials-64 60] [--trials-1024 12] [--seed 1]

Each row runs one fault type of preflight.launch.fault_corpus (16 types: a healthy fleet, network
faults, stragglers, a GPU 5% slow, the node faults the checks judge) `runs` times on N simulated nodes,
through the code the checks run: the all-node reading against its floor, the adaptive isolation pass
with its confirmation rule, the all-node reading taken again when the pass blamed nothing
(preflight.launch.recheck: NO-GO only when below the floor in every reading), the fail-slow test, and
the blame rule the actions read.

Columns: false_nogo_runs (healthy runs called NO-GO), false_nogo_node_runs (healthy nodes acted on:
drained, cordoned, failed by the hook, over every healthy node-run of the row), missed (fault runs
that were not NO-GO and where no finding named the fault), precision and recall of the confirmed
attributions (a node, a link, a boundary, a straggler, a GPU; a suspect is not an attribution),
suspects per run, rechecks_per_run (all-node readings taken again), gpu_false_alarms (healthy GPUs
named fail-slow, over all GPUs), rounds (mean, and the most; the pass's rounds and the rechecks), wall_s (this machine's time for the row). A round of real bursts is ~60 s.

The noise levels: the standard deviation of a group's all-reduce figure as a fraction of it, and of one
GPU's GEMM rate. Published run-to-run spreads put the first between a few percent and about +-20%
(two standard deviations of 0.10): Chunduri et al., "Run-to-run variability on Xeon Phi based Cray
XC systems" (SC'17) and Bhatele et al., "The case of performance variability on dragonfly-based
systems" (IPDPS'20) measure MPI collectives and communication-heavy jobs varying by that much from
run to run on shared networks; GEMM on identical GPUs varies far less within one run (Sinha et al.,
"Not all GPUs are created equal: characterizing variability in large-scale, accelerator-rich
systems", SC'22, found a few percent between GPUs of one model, most of it steady per GPU). The
levels: low (0.02, GPU 0.005), typical (0.05, GPU 0.01), high (0.10, GPU 0.02). Not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.launch.fault_corpus import FAULT_TYPES, row  # noqa: E402

GPU_NOISE = {0.02: 0.005, 0.05: 0.01, 0.10: 0.02}


def percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def pooled(rows: list[dict], nodes: int, noise: float) -> dict:
    """One size and noise level, over every fault type: the goals' figures."""
    mine = [r for r in rows if r["nodes"] == nodes and r["noise"] == noise and r["floor"] == 0.8]
    faulty = [r for r in mine if r["missed"] is not None]
    healthy_runs = sum(r["false_nogo_node_runs"] is not None for r in mine)
    slow_gpu = [r for r in mine if r["fault"] == "gpu-5pct-slow"]
    isolating = [r for r in mine if r["rounds"] and r["fault"] not in ("healthy",)]
    return {
        "node_runs_acted": max((r["false_nogo_node_runs"] or 0) for r in mine) if healthy_runs else None,
        "healthy_nogo": next((r["false_nogo_runs"] for r in mine if r["fault"] == "healthy"), None),
        "missed": sum(r["missed"] * r["runs"] for r in faulty) / max(1, sum(r["runs"] for r in faulty)),
        "precision": sum(r["true_blames"] for r in mine) / max(1, sum(r["blames"] for r in mine)),
        "recall": sum(r["true_blames"] for r in mine) / max(1, sum(r["faults"] for r in mine)),
        "rounds": max((r["rounds"] for r in isolating), default=0.0),
        "rounds_of": max(isolating, key=lambda r: r["rounds"])["fault"] if isolating else "",
        "gpu_recall": slow_gpu[0]["recall"] if slow_gpu else None,
        "gpu_false_alarms": max(r["gpu_false_alarms"] for r in mine) if mine else None,
    }


def markdown(rows: list[dict]) -> str:
    """The README's table: each goal against what each size and noise level measured."""
    sizes = sorted({r["nodes"] for r in rows})
    noises = sorted({r["noise"] for r in rows if r["floor"] == 0.8})
    cols = [(n, x) for n in sizes for x in noises]
    figures = {c: pooled(rows, *c) for c in cols}
    head = "| goal | " + " | ".join(f"{n:,} nodes, noise {x:.0%}" for n, x in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    goals = [("healthy node-runs acted on: <= 0.5%", lambda f: percent(f["node_runs_acted"], 3)),
             ("healthy runs NO-GO (below its floor in every all-node reading)", lambda f: percent(f["healthy_nogo"])),
             ("missed faults: <= 5%", lambda f: percent(f["missed"])),
             ("attribution precision: >= 95%", lambda f: percent(f["precision"])),
             ("attribution recall: >= 95%", lambda f: percent(f["recall"])),
             ("rounds, the slowest fault type's mean: <= 12", lambda f: f"{f['rounds']:.1f} ({f['rounds_of']})"),
             ("one GPU 5% slow found: >= 95%", lambda f: percent(f["gpu_recall"])),
             ("healthy GPUs named fail-slow: <= 1%", lambda f: percent(f["gpu_false_alarms"], 3))]
    for name, show in goals:
        lines.append(f"| {name} | " + " | ".join(show(figures[c]) for c in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,1024")
    parser.add_argument("--noise", default="0.02,0.05,0.10")
    parser.add_argument("--faults", default=",".join(FAULT_TYPES))
    parser.add_argument("--trials-8", type=int, default=200)
    parser.add_argument("--trials-64", type=int, default=60)
    parser.add_argument("--trials-1024", type=int, default=12)
    parser.add_argument("--near-floor-trials", type=int, default=1000,
                        help="healthy runs just above the floor (0.95, noise 0.05) at 8 and 64 nodes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    parser.add_argument("--markdown", metavar="FILE", help="print the goals table of rows recorded with --json")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    faults = args.faults.split(",")
    unknown = sorted(set(faults) - set(FAULT_TYPES))
    if unknown:
        raise SystemExit(f"unknown fault types {unknown}; known: {', '.join(FAULT_TYPES)}")
    trials = {8: args.trials_8, 64: args.trials_64, 1024: args.trials_1024}
    started = time.monotonic()
    rows = []
    if not args.json:
        print(f"{'fault':<21} {'nodes':>5} {'noise':>5} {'runs':>5} {'falseNOGO':>9} {'node-runs':>9} {'missed':>7} "
              f"{'prec':>7} {'recall':>7} {'susp':>5} {'rounds':>6} {'max':>4} {'wall s':>7}")
    plan = [(f, int(n), float(x), 0.8, trials.get(int(n), 10)) for x in args.noise.split(",")
            for n in args.sizes.split(",") for f in faults]
    plan += [("healthy", n, 0.05, 0.95, args.near_floor_trials) for n in (8, 64) if args.near_floor_trials]
    for fault, nodes, noise, floor, count in plan:
        r = row(fault, nodes, noise, GPU_NOISE.get(noise, noise / 5), count, seed=args.seed, floor=floor)
        rows.append(r)
        if not args.json:
            label = fault + (f" (floor {floor:g})" if floor != 0.8 else "")
            print(f"{label:<21} {nodes:>5} {noise:>5.2f} {count:>5} {percent(r['false_nogo_runs']):>9} "
                  f"{percent(r['false_nogo_node_runs'], 3):>9} {percent(r['missed']):>7} {percent(r['precision']):>7} "
                  f"{percent(r['recall']):>7} {r['suspects_per_run']:>5.2f} {r['rounds']:>6.2f} {r['rounds_max']:>4} "
                  f"{r['wall_s']:>7.2f}", flush=True)
    if args.json:
        print(json.dumps(rows, allow_nan=False, indent=1))
        return
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
