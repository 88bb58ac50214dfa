"""The coordinator's own cost at 10 to 1,000+ nodes: a simulated allocation whose agents answer at once.

    .venv/bin/python bench/slurm_simulated.py [--sizes 10,100,1000] [--fanout 64]

First runs the cheap node checks (node.environment, versions.pinned, gpu.visibility) once on this
machine for real and records the agent's stream. Then, for each size, a fresh process drives that
many simulated nodes through the real Runner: each node's "agent" is `cat` of the recorded stream
(a transport whose command answers at once), so what is measured is the coordinator itself:
starting one process per node, reading and parsing every result, appending results.jsonl, building
the report, and rendering json, md, html and junit. Prints wall time, peak resident memory of the
coordinator and memory per node. Needs no root and no Slurm. Not a test: nothing here is judged.

The real per-node srun costs more memory than `cat` (bench/slurm_fanout.py samples it), and a real
run's waves last as long as the node checks: with --fanout F, N nodes take ceil(N/F) waves.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHECKS = ["node.environment", "versions.pinned", "gpu.visibility"]


def record(stream: Path) -> int:
    """Run the checks here for real; write what an agent prints for them. Returns the result count."""
    import preflight
    from preflight.run.agent import DONE, HELLO, RESULT, START
    from preflight.core.config import Config
    from preflight.core.registry import discover
    from preflight.run.runner import NodeTarget, RunPlan, Runner
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


def one(size: int, fanout: int, stream: Path) -> dict:
    """Drive `size` simulated nodes through the Runner in this process; measure it."""
    from preflight.core.config import Config
    from preflight.core.registry import discover
    from preflight.reporters import filename, renderer
    from preflight.run.runner import NodeTarget, RunPlan, Runner
    from preflight.transport.base import Transport
    from preflight.core.verdict import decide

    class Recorded(Transport):
        kind = "recorded"

        def wrap(self, argv: list[str]) -> list[str]:
            return ["cat", str(stream)]

    registry = discover()
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tempfile.TemporaryDirectory() as tmp:
        nodes = [NodeTarget(Recorded(f"node{i:05d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")) for i in range(size)]
        plan = RunPlan(checks=registry.ordered(CHECKS), config=Config(), output_dir=Path(tmp), nodes=nodes, fanout=fanout)
        start = time.perf_counter()
        report = Runner(plan).run()
        run_s = time.perf_counter() - start
        decide(report)
        render = {}
        for fmt in ("json", "md", "html", "junit"):
            start = time.perf_counter()
            (Path(tmp) / filename(fmt)).write_text(renderer(fmt)(report), encoding="utf-8")
            render[fmt] = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"nodes": size, "results": len(report.results), "run_s": run_s, "render_s": render,
            "peak_rss": peak, "rss_growth": peak - base_rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--fanout", type=int, default=64)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--stream", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.fanout, Path(args.stream))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "agent-stream.txt"
        count = record(stream)
        print(f"recorded {count} results ({stream.stat().st_size} bytes of agent output per node)")
        print(f"\n{'nodes':>6} {'fanout':>6} {'run s':>7} {'ms/node':>8} {'json s':>7} {'md s':>6} {'html s':>7} "
              f"{'junit s':>7} {'peak MiB':>9} {'KiB/node':>9}")
        rows = []
        for size in [int(s) for s in args.sizes.split(",")]:
            proc = subprocess.run([sys.executable, __file__, "--one", str(size), "--fanout", str(args.fanout),
                                   "--stream", str(stream)], capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            r = row["render_s"]
            print(f"{size:>6} {args.fanout:>6} {row['run_s']:>7.2f} {1000 * row['run_s'] / size:>8.2f} {r['json']:>7.2f} "
                  f"{r['md']:>6.2f} {r['html']:>7.2f} {r['junit']:>7.2f} {row['peak_rss'] / 2**20:>9.0f} "
                  f"{row['rss_growth'] / size / 1024:>9.1f}")
        if len(rows) >= 2:
            a, b = rows[0], rows[-1]
            per_node = (b["peak_rss"] - a["peak_rss"]) / (b["nodes"] - a["nodes"])
            print(f"\nmarginal coordinator memory: {per_node / 1024:.1f} KiB per node "
                  f"(peak RSS {a['nodes']} -> {b['nodes']} nodes)")


if __name__ == "__main__":
    main()
