"""preflight's own error rates on a labelled fault corpus, simulated: false NO-GO, missed faults,
attribution precision and recall, rounds.

    python bench/error_rates.py [--json] [--model gauss|fabric] [--sizes 8,64,1024] [--noise 0.02,0.05,0.10]
                                [--faults ...] [--trials-8 200] [--trials-64 60] [--trials-256 20]
                                [--trials-1024 12] [--healthy-runs 8:10000,64:4000,256:2000,1024:1000] [--seed 1]
                                [--fabric-set KEY=VALUE ...]

`--model fabric` measures under a real fabric's noise (preflight.launch.isolation_sim.Fabric): Student-t
noise (3 degrees of freedom), a per-switch factor shared by the bursts through that switch and AR(1)
over rounds (rho 0.8), a noisy neighbour slowing one switch to 0.6-0.8 for 2-8 rounds in every run,
the switch topology given to the pass, and half of each GPU's spread shared by its node's GPUs;
healthy fleets are also run at 1.02 and 1.05 times their floor. `--fabric-set KEY=VALUE` sets one
field of that model otherwise (dof=2: heavier tails; switch_sd=0.06; neighbour_rounds=2:20: a
neighbour that lasts longer; neighbour_starts=20: one that comes later), to measure the rules under
noise they were not tuned on. Every figure comes with its 95% interval: Wilson's for a rate, a
bootstrap over runs (2,000 resamples) for precision and recall.

The goals on healthy runs are rare events (NO-GO at most 0.5% of runs, acted on at most 0.1% of
node-runs): 200 runs cannot tell 0.5% from 2% (Wilson's upper end of 0 in 200 is 1.9%), so the
healthy fleet is also run `--healthy-runs` times at each size (a healthy run is cheap: no fault to
search for, 0.5 ms at 8 nodes and 85 ms at 1,024 on one core), in a row of its own (`rare`) that gives
those two goals; precision, recall and the other pooled figures keep the `--trials-N` runs of every
fault type, the healthy fleet's included, each type weighing the same.

Each row runs one fault type of preflight.launch.fault_corpus (16 types: a healthy fleet, network
faults, stragglers, a GPU 5% slow, the node faults the checks judge) `runs` times on N simulated nodes,
through the code the checks run: the all-node readings against their floor (preflight.launch.recheck:
a second always, a third after a first below it that the pass pinned on nothing, one just under it
measured again at once; NO-GO when most are below it, one is under a quarter of it, or one is under half
of it beside another below it), the adaptive isolation pass with its confirmation rule and its
test of standing out, the fail-slow test, and the blame rule the actions read.

Columns: false_nogo_runs (healthy runs called NO-GO), false_nogo_node_runs (healthy nodes acted on:
drained, cordoned, failed by the hook, over every healthy node-run of the row), missed (fault runs
that were not NO-GO and where no finding named the fault), precision and recall of the confirmed
attributions (a node, a link, a boundary, a straggler, a GPU; a suspect is not an attribution),
recall_named (faults blamed or named as a suspect: a WARN that names the component, acted on by nobody),
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
import dataclasses
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.launch.fault_corpus import FAULT_TYPES, row  # noqa: E402
from preflight.launch.isolation_sim import Fabric  # noqa: E402

GPU_NOISE = {0.02: 0.005, 0.05: 0.01, 0.10: 0.02}
FLAPPING = ("flapping-node", "flapping-link")  # bad in half their bursts: suspects, never confirmed (4 of 4)
NEAR_FLOOR = (1.02, 1.05)  # healthy fleets this far above their floor (--model fabric)
HEALTHY_RUNS = "8:10000,64:4000,256:2000,1024:1000"  # the healthy row's runs per size: its goals are rare events


def healthy_runs(text: str) -> dict[int, int]:
    """--healthy-runs: SIZE:RUNS,... -> {size: runs}."""
    try:
        pairs = [item.split(":") for item in text.split(",") if item.strip()]
        runs = {int(size): int(count) for size, count in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not SIZE:RUNS,... (such as {HEALTHY_RUNS})") from None
    if any(size < 2 or count < 0 for size, count in runs.items()):
        raise argparse.ArgumentTypeError(f"{text!r}: each size needs 2 nodes or more, and no count is negative")
    return runs


def fabric_setting(text: str) -> tuple[str, Any]:
    """--fabric-set KEY=VALUE: one field of the fabric's noise (preflight.launch.isolation_sim.Fabric),
    a range as LOW:HIGH, checked by Fabric's own field types."""
    key, _, value = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(Fabric)}
    if key not in fields or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE with KEY one of {', '.join(fields)}")
    default = getattr(Fabric(), key)
    try:
        if isinstance(default, tuple):
            low, high = value.split(":")
            parsed: Any = (type(default[0])(low), type(default[1])(high))
        else:
            parsed = type(default)(value)
    except ValueError:
        shape = "LOW:HIGH" if isinstance(default, tuple) else type(default).__name__
        raise argparse.ArgumentTypeError(f"{text!r}: {key} takes {shape} (default {default})") from None
    values = parsed if isinstance(parsed, tuple) else (parsed,)
    top = {"rho": 0.999, "neighbour": 1.0}.get(key, math.inf)  # a correlation under 1, odds at most 1
    if any(v < (1 if key == "dof" else 0) or v > top for v in values) or values != tuple(sorted(values)):
        raise argparse.ArgumentTypeError(f"{text!r}: {key} out of range (default {default}; a range is LOW:HIGH, "
                                         "LOW first)")
    return key, parsed


def percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson's 95% interval of a rate of `hits` in `n`."""
    if not n:
        return None
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(counted: list[list[int]], num: int, den: int, resamples: int = 2000,
              seed: int = 7) -> tuple[float, float] | None:
    """95% percentile interval of sum(run[num]) / sum(run[den]) over runs resampled with replacement
    (`counted`: a row's per_run, each distinct run with how many there were)."""
    per_run = [r[:-1] for r in counted for _ in range(r[-1])]
    if not sum(r[den] for r in per_run):
        return None
    rng = random.Random(seed)
    n = len(per_run)
    ratios = []
    for _ in range(resamples):
        picked = [per_run[rng.randrange(n)] for _ in range(n)]
        d = sum(r[den] for r in picked)
        if d:
            ratios.append(sum(r[num] for r in picked) / d)
    ratios.sort()
    return ratios[int(0.025 * len(ratios))], ratios[min(len(ratios) - 1, int(0.975 * len(ratios)))]


def with_interval(value: float | None, interval: tuple[float, float] | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if interval is None:
        return percent(value, digits)
    return f"{percent(value, digits)} [{percent(interval[0], digits)}, {percent(interval[1], digits)}]"


def rate(row: dict | None, hits: str, of: str) -> tuple[float | None, tuple[float, float] | None]:
    """A row's rate of counts `hits` in `of`, with Wilson's interval; (None, None) without the row."""
    if row is None or not row["counts"][of]:
        return None, None
    return row["counts"][hits] / row["counts"][of], wilson(row["counts"][hits], row["counts"][of])


def pooled(rows: list[dict], nodes: int, noise: float) -> dict:
    """One size and noise level, over every fault type: the goals' figures, each with its interval."""
    mine = [r for r in rows if r["nodes"] == nodes and r["noise"] == noise and r["floor"] == 0.8 and not r.get("rare")]
    rare = next((r for r in rows if r["nodes"] == nodes and r["noise"] == noise and r.get("rare")), None)
    faulty = [r for r in mine if r["missed"] is not None]
    slow_gpu = [r for r in mine if r["fault"] == "gpu-5pct-slow"]
    isolating = [r for r in mine if r["rounds"] and r["fault"] not in ("healthy",)]
    healthy = next((r for r in mine if r["fault"] == "healthy"), None)

    def count(key: str, rs: list[dict]) -> int:
        return sum(r["counts"][key] for r in rs)

    acted, node_runs = count("acted", mine), count("healthy_node_runs", mine)
    missed, faulty_runs = count("missed", faulty), count("faulty_runs", faulty)
    per_run = [p for r in mine for p in r["per_run"]]
    steady = [p for r in mine if r["fault"] not in FLAPPING for p in r["per_run"]]
    flapping = [r for r in faulty if r["fault"] in FLAPPING]
    flap_missed, flap_runs = count("missed", flapping), count("faulty_runs", flapping)
    gpu_runs = [p for r in slow_gpu for p in r["per_run"]]
    return {
        "node_runs_acted": (acted / node_runs, wilson(acted, node_runs)) if node_runs else (None, None),
        "healthy_nogo": rate(rare or healthy, "nogo", "healthy_runs"),
        "rare_acted": rate(rare, "acted", "healthy_node_runs"),
        "rare_runs": rare["runs"] if rare else None,
        "missed": (missed / max(1, faulty_runs), wilson(missed, faulty_runs)),
        "precision": (sum(p[0] * p[-1] for p in per_run) / max(1, sum(p[1] * p[-1] for p in per_run)),
                      bootstrap(per_run, 0, 1)),
        "recall": (sum(p[0] * p[-1] for p in per_run) / max(1, sum(p[2] * p[-1] for p in per_run)),
                   bootstrap(per_run, 0, 2)),
        "recall_steady": (sum(p[0] * p[-1] for p in steady) / max(1, sum(p[2] * p[-1] for p in steady)),
                          bootstrap(steady, 0, 2)),
        "flapping_missed": (flap_missed / flap_runs, wilson(flap_missed, flap_runs)) if flap_runs else (None, None),
        "recall_named": (sum(p[3] * p[-1] for p in per_run) / max(1, sum(p[2] * p[-1] for p in per_run)),
                         bootstrap(per_run, 3, 2)) if all(len(p) == 5 for p in per_run) else (None, None),
        "rounds": max((r["rounds"] for r in isolating), default=0.0),
        "rounds_of": max(isolating, key=lambda r: r["rounds"])["fault"] if isolating else "",
        "gpu_recall": (slow_gpu[0]["recall"], bootstrap(gpu_runs, 0, 2)) if slow_gpu else (None, None),
        "gpu_false_per_run": max((r.get("gpu_false_per_run", 0.0) for r in mine), default=None),
    }


def markdown(rows: list[dict]) -> str:
    """The README's table: each goal against what each size and noise level measured (95% intervals)."""
    sizes = sorted({r["nodes"] for r in rows})
    noises = sorted({r["noise"] for r in rows if r["floor"] == 0.8})
    cols = [(n, x) for n in sizes for x in noises]
    figures = {c: pooled(rows, *c) for c in cols}
    head = "| goal | " + " | ".join(f"{n:,} nodes, noise {x:.0%}" for n, x in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    rare = [("the same, in the healthy runs of the first row", lambda f: with_interval(*f["rare_acted"], 3))] \
        if any(f["rare_runs"] for f in figures.values()) else []
    goals = [("healthy runs NO-GO: <= 0.5%", lambda f: with_interval(*f["healthy_nogo"])
              + (f" ({f['rare_runs']:,} runs)" if f["rare_runs"] else "")),
             ("healthy node-runs acted on: <= 0.1%", lambda f: with_interval(*f["node_runs_acted"], 3)),
             *rare,
             ("missed faults: <= 5%", lambda f: with_interval(*f["missed"])),
             ("attribution precision: >= 95%", lambda f: with_interval(*f["precision"])),
             ("attribution recall: >= 95%", lambda f: with_interval(*f["recall"])),
             ("faults named (blamed, or a suspect named as a WARN)", lambda f: with_interval(*f["recall_named"])),
             ("recall, all but the flapping node and link (a suspect by design)",
              lambda f: with_interval(*f["recall_steady"])),
             ("flapping node or link missed (GO, and not named)", lambda f: with_interval(*f["flapping_missed"])),
             ("rounds, the slowest fault type's mean: <= 12", lambda f: f"{f['rounds']:.1f} ({f['rounds_of']})"),
             ("one GPU 5% slow found: >= 95%", lambda f: with_interval(*f["gpu_recall"])),
             ("healthy GPUs named fail-slow per run: <= 1", lambda f: f"{f['gpu_false_per_run']:.2f}")]
    for name, show in goals:
        lines.append(f"| {name} | " + " | ".join(show(figures[c]) for c in cols) + " |")
    near = [r for r in rows if r["fault"] == "healthy" and r["floor"] != 0.8]
    for r in near:
        c = r["counts"]
        lines.append(f"\nhealthy at {1 / r['floor']:.2f}x its floor, {r['nodes']:,} nodes, noise {r['noise']:.0%} "
                     f"({r['runs']} runs): NO-GO {with_interval(r['false_nogo_runs'], wilson(c['nogo'], c['healthy_runs']))}, "
                     f"node-runs acted on {with_interval(r['false_nogo_node_runs'], wilson(c['acted'], c['healthy_node_runs']), 3)}")
    return "\n".join(lines)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,1024")
    parser.add_argument("--noise", default="0.02,0.05,0.10")
    parser.add_argument("--faults", default=",".join(FAULT_TYPES))
    parser.add_argument("--trials-8", type=int, default=200)
    parser.add_argument("--trials-64", type=int, default=60)
    parser.add_argument("--trials-256", type=int, default=20)
    parser.add_argument("--trials-1024", type=int, default=12)
    parser.add_argument("--healthy-runs", type=healthy_runs, default=healthy_runs(HEALTHY_RUNS),
                        help="runs of the healthy fleet's rare-event row per size, SIZE:RUNS,... (a size not "
                             f"named, or SIZE:0: no such row); default {HEALTHY_RUNS}")
    parser.add_argument("--model", choices=("gauss", "fabric"), default="gauss",
                        help="the noise: independent Gaussian per burst, or a real fabric's (see above)")
    parser.add_argument("--fabric-set", type=fabric_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="with --model fabric, one field of the fabric's noise set otherwise, to measure the "
                             "rules under a model they were not tuned on (dof=2, switch_sd=0.06, "
                             "neighbour_rounds=2:20; repeatable)")
    parser.add_argument("--near-floor-trials", type=int, default=1000,
                        help="healthy runs just above the floor (0.95, noise 0.05) at 8 and 64 nodes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    parser.add_argument("--markdown", metavar="FILE", help="print the goals table of rows recorded with --json")
    return parser


def planned(args: argparse.Namespace) -> list[tuple[str, int, float, float, int, bool]]:
    """The rows to run: (fault type, nodes, noise, floor, runs, whether it is the healthy fleet's rare-event row)."""
    trials = {8: args.trials_8, 64: args.trials_64, 256: args.trials_256, 1024: args.trials_1024}
    sizes, noises = [int(n) for n in args.sizes.split(",")], [float(x) for x in args.noise.split(",")]
    plan = [(f, n, x, 0.8, trials.get(n, 10), False) for x in noises for n in sizes for f in args.faults.split(",")]
    if "healthy" in args.faults.split(","):  # the rare events' row (see the module's text)
        plan += [("healthy", n, x, 0.8, args.healthy_runs[n], True) for x in noises for n in sizes
                 if args.healthy_runs.get(n)]
    if args.model == "fabric":
        plan += [("healthy", n, x, round(1 / above, 4), trials.get(n, 10), False)
                 for above in NEAR_FLOOR for x in noises for n in sizes]
    elif args.near_floor_trials:
        plan += [("healthy", n, 0.05, 0.95, args.near_floor_trials, False) for n in (8, 64)]
    return plan


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    unknown = sorted(set(args.faults.split(",")) - set(FAULT_TYPES))
    if unknown:
        parser.error(f"--faults: unknown fault types {unknown}; known: {', '.join(FAULT_TYPES)}")
    if args.fabric_set and args.model != "fabric":
        parser.error("--fabric-set: only with --model fabric")
    fabric = Fabric(**dict(args.fabric_set)) if args.model == "fabric" else None
    started = time.monotonic()
    rows = []
    if not args.json:
        print(f"{'fault':<21} {'nodes':>5} {'noise':>5} {'runs':>5} {'falseNOGO':>9} {'node-runs':>9} {'missed':>7} "
              f"{'prec':>7} {'recall':>7} {'susp':>5} {'rounds':>6} {'max':>4} {'wall s':>7}")
    for fault, nodes, noise, floor, count, rare in planned(args):
        r = row(fault, nodes, noise, GPU_NOISE.get(noise, noise / 5), count, seed=args.seed, floor=floor,
                fabric=fabric)
        rows.append({**r, "rare": True} if rare else r)
        if not args.json:
            label = fault + (f" (floor {floor:g})" if floor != 0.8 else " (rare)" if rare else "")
            print(f"{label:<21} {nodes:>5} {noise:>5.2f} {count:>5} {percent(r['false_nogo_runs']):>9} "
                  f"{percent(r['false_nogo_node_runs'], 3):>9} {percent(r['missed']):>7} {percent(r['precision']):>7} "
                  f"{percent(r['recall']):>7} {r['suspects_per_run']:>5.2f} {r['rounds']:>6.2f} {r['rounds_max']:>4} "
                  f"{r['wall_s']:>7.2f}", flush=True)
    if args.json:
        print("[\n" + ",\n".join(json.dumps(r, allow_nan=False) for r in rows) + "\n]")
        return
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
