"""The coordinator's own cost at 10 to 1,000+ nodes: a simulated allocation whose agents answer at once.

    python bench/slurm_simulated.py [--sizes 10,100,1000] [--fanout 64] [--compare REF] [--profile]

First runs the cheap node checks (node.environment, versions.pinned, gpu.visibility) once on this
machine for real and records the agent's stream. Then, for each size, a fresh process drives that
many simulated nodes through the real Runner: each node's "agent" is `cat` of the recorded stream
(a transport whose command answers at once), so what is measured is the coordinator itself:
starting one process per node, reading and parsing every result, appending results.jsonl, building
the report, and writing json, md, html and junit as `preflight run` writes them. Prints wall time,
the time of each report, peak resident memory of the coordinator (after the run, and with the
reports written) and memory per node.

--slurm drives the simulated nodes through the real SlurmTransport and SlurmStep with
bench/stand-in-srun as srun, and prints one job step per node ("per-node") beside one step across
them all ("single"). --compare REF runs the same sizes with the preflight of a git revision (REF: a commit, tag or
branch, extracted to a temporary directory) in the same run, alternating with this tree, and prints
both side by side. --profile writes a cProfile of the reports of the largest size (pstats files,
one per format) to the current directory. Needs no root and no Slurm. Not a test: nothing is judged.

The real per-node srun costs more memory than `cat` (bench/slurm_fanout.py samples it), and a real
run's waves last as long as the node checks: with --fanout F, N nodes take ceil(N/F) waves.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHECKS = ["node.environment", "versions.pinned", "gpu.visibility"]
FORMATS = ("json", "md", "html", "junit")


def record(stream: Path) -> int:
    """Run the checks here for real; write what an agent prints for them. Returns the result count."""
    import preflight
    from preflight.core.config import Config
    from preflight.core.registry import discover
    from preflight.engine.agent import DONE, HELLO, RESULT, START
    from preflight.engine.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport

    registry = discover()
    with tempfile.TemporaryDirectory() as tmp:
        plan = RunPlan(checks=registry.ordered(CHECKS), config=Config(), output_dir=Path(tmp),
                       nodes=[NodeTarget(LocalTransport(name="recorded"))])
        report = Runner(plan).run()
    lines = [HELLO + json.dumps({"version": preflight.__version__, "python": sys.executable, "hostname": "sim"})]
    for result in report.results:
        lines += [START + result.check_id, RESULT + result.to_json_line()]
    stream.write_text("\n".join(lines + [DONE]) + "\n")
    return len(report.results)


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def one(size: int, fanout: int, stream: Path, profile_dir: str | None, path: str = "cat") -> dict:
    """Drive `size` simulated nodes through the Runner in this process; write the reports as
    `preflight run` does (preflight.cli.options.finish); measure both."""
    from preflight import reporters
    from preflight.cli.options import finish
    from preflight.core.config import Config
    from preflight.core.registry import discover
    from preflight.core.verdict import decide
    from preflight.engine.runner import NodeTarget, RunPlan, Runner
    from preflight.transport.base import Transport

    class Recorded(Transport):
        kind = "recorded"

        def wrap(self, argv: list[str]) -> list[str]:
            return ["cat", str(stream)]

    render: dict[str, float] = {}

    def timed(fmt: str, work):  # type: ignore[no-untyped-def]
        def run(*args):  # type: ignore[no-untyped-def]
            profiler = None
            if profile_dir:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            start = time.perf_counter()
            try:
                return work(*args)
            finally:
                render[fmt] = render.get(fmt, 0.0) + time.perf_counter() - start
                if profiler:
                    profiler.disable()
                    profiler.dump_stats(os.path.join(profile_dir, f"render-{fmt}-{size}.pstats"))
        return run

    # finish() looks these up when called: each format's work is timed however the tree writes it.
    for name in ("renderer", "writer"):
        original = getattr(reporters, name, None)
        if original is not None:
            setattr(reporters, name, lambda fmt, original=original: timed(fmt, original(fmt)))
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    registry = discover()
    base_rss = peak_rss()
    with tempfile.TemporaryDirectory() as tmp:
        if path == "cat":
            nodes = [NodeTarget(Recorded(f"node{i:05d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"))
                     for i in range(size)]
        else:  # through SlurmTransport / SlurmStep, with bench/stand-in-srun as srun
            from preflight.transport.slurm import SlurmTransport

            os.environ["PREFLIGHT_BENCH_STREAM"] = str(stream)
            os.environ["PREFLIGHT_BENCH_PYTHON"] = sys.executable
            srun = str(HERE / "bench" / "stand-in-srun")
            nodes = [NodeTarget(SlurmTransport(f"node{i:05d}", python="python3", jobid="1", srun=srun))
                     for i in range(size)]
        extra = {} if path == "cat" else {"slurm_step": path}
        plan = RunPlan(checks=registry.ordered(CHECKS), config=Config(), output_dir=Path(tmp) / "run", nodes=nodes,
                       fanout=fanout, **extra)
        start = time.perf_counter()
        report = Runner(plan).run()
        run_s = time.perf_counter() - start
        run_rss = peak_rss()
        decide(report)
        start, cpu = time.perf_counter(), time.process_time()
        finish(report, Path(tmp) / "run", list(FORMATS), announce=False)
        reports_s, reports_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    peak = peak_rss()
    return {"nodes": size, "results": len(report.results), "run_s": run_s, "render_s": render,
            "reports_s": reports_s, "reports_cpu_s": reports_cpu_s, "run_rss": run_rss, "peak_rss": peak, "rss_growth": peak - base_rss}


def extract(ref: str, into: Path) -> Path:
    """The tree of git revision `ref` of this repository, extracted under `into`, importable as this one is."""
    proc = subprocess.run(["git", "-C", str(HERE), "archive", "--format=tar", ref], capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"--compare {ref}: git archive failed: {proc.stderr.decode(errors='replace').strip()}")
    root = into / "tree"
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(root, filter="data")
    for link, target in (("preflight_checks", "checks"), ("preflight_templates", "templates")):
        if (root / target).is_dir() and not (root / link).exists():
            (root / link).symlink_to(target)
    return root


def measure(tree: Path, size: int, fanout: int, stream: Path, profile_dir: str | None, path: str = "cat") -> dict:
    argv = [sys.executable, __file__, "--one", str(size), "--fanout", str(fanout), "--stream", str(stream),
            "--tree", str(tree), "--path", path] + (["--profile-dir", profile_dir] if profile_dir else [])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=env, cwd=str(tree))
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_row(label: str, row: dict, fanout: int) -> None:
    r, size = row["render_s"], row["nodes"]
    print(f"{label:>8} {size:>6} {fanout:>6} {row['run_s']:>7.2f} {1000 * row['run_s'] / size:>8.2f} "
          + " ".join(f"{r[fmt]:>6.2f}" for fmt in FORMATS)
          + f" {row['reports_s']:>7.2f} {row['reports_cpu_s']:>7.2f} {row['run_rss'] / 2**20:>8.0f} {row['peak_rss'] / 2**20:>9.0f} "
            f"{row['rss_growth'] / size / 1024:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--fanout", type=int, default=64)
    parser.add_argument("--compare", default=None, metavar="REF", help="also run the preflight of this git revision")
    parser.add_argument("--profile", action="store_true", help="cProfile the reports of the largest size")
    parser.add_argument("--slurm", action="store_true",
                        help="drive the nodes through SlurmTransport with a stand-in srun: one job step per node "
                             "beside one step across all of them (--slurm-step per-node / single)")
    parser.add_argument("--path", default="cat", help=argparse.SUPPRESS)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--stream", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        sys.path.insert(0, args.tree or str(HERE))
        print(json.dumps(one(args.one, args.fanout, Path(args.stream), args.profile_dir, args.path)))
        return
    sys.path.insert(0, str(HERE))
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "agent-stream.txt"
        count = record(stream)
        trees: dict[str, tuple[Path, str]] = {"this": (HERE, "cat")}
        if args.slurm:
            trees = {"per-node": (HERE, "per-node"), "single": (HERE, "single")}
        if args.compare:
            trees[args.compare[:8]] = (extract(args.compare, Path(tmp)), "cat")
        print(f"recorded {count} results ({stream.stat().st_size} bytes of agent output per node)")
        print(f"\n{'tree':>8} {'nodes':>6} {'fanout':>6} {'run s':>7} {'ms/node':>8} "
              + " ".join(f"{fmt + ' s':>6}" for fmt in FORMATS)
              + f" {'reports':>7} {'cpu s':>7} {'run MiB':>8} {'peak MiB':>9} {'KiB/node':>9}")
        rows: dict[str, list[dict]] = {label: [] for label in trees}
        for index, size in enumerate(sizes):
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for label in order:
                profile = os.getcwd() if args.profile and size == max(sizes) and label == "this" else None
                row = measure(trees[label][0], size, args.fanout, stream, profile, trees[label][1])
                rows[label].append(row)
                print_row(label, row, args.fanout)
        for label, measured in rows.items():
            if len(measured) >= 2:
                a, b = measured[0], measured[-1]
                per_node = (b["peak_rss"] - a["peak_rss"]) / (b["nodes"] - a["nodes"])
                print(f"\n{label}: marginal coordinator memory {per_node / 1024:.1f} KiB per node "
                      f"(peak RSS {a['nodes']} -> {b['nodes']} nodes)")
    if args.profile:
        print(f"\nprofiles: render-<format>-{max(sizes)}.pstats (python -m pstats FILE)")


if __name__ == "__main__":
    main()
