"""Fan-out: wall time of one node-scope check over 1, 4 and 8 nodes, as ratios to 1 node (needs root).

    sudo .venv/bin/python bench/fanout_walltime.py [--repeats 3] [--sizes 1,4,8]

Builds the namespace test bed from tests/cluster/testbed.py with the largest size, then times the
real `preflight run --nodes hosts.txt --checks CHECK` over the first 1, 4 and 8 nodes, in
alternating order, and prints the median per size and its ratio to one node (aim: under 1.5 at 8).

Two checks are timed. `node.environment` is the real, CPU-light node check: its time is mostly
Python start-up (agent and worker) on each node, and on this machine all "nodes" share two cores,
so N nodes cost N times the CPU of one and the ratio measures the cores as much as the fan-out.
`example.sleep` (2 s, from the example plugin) uses no CPU while it waits: its ratio shows how well
the runner overlaps nodes, which is what fan-out is for. Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.testbed import TestBed, unavailable_reason  # noqa: E402

CHECKS = [("node.environment", []), ("example.sleep", ["--set", "example.sleep.seconds=2",
                                                        "--set", "example.sleep.with_child=false"])]


def time_run(bed: TestBed, count: int, check: str, extra: list[str], workdir: Path) -> float:
    hosts = workdir / f"hosts-{count}.txt"
    hosts.write_text("".join(f"{node.address}\n" for node in bed.nodes[:count]))
    options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
    argv = [sys.executable, "-m", "preflight", "run", "--nodes", str(hosts), "--remote-python", bed.python,
            *options, "--checks", check, *extra, "--format", "json", "--out", str(workdir / "out")]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "CI": "1"}, timeout=600)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"preflight run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="1,4,8")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"test bed unavailable: {reason}")
    sizes = [int(s) for s in args.sizes.split(",")]
    with TestBed(max(sizes)) as bed, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for check, extra in CHECKS:
            times: dict[int, list[float]] = {n: [] for n in sizes}
            time_run(bed, 1, check, extra, workdir)  # warm caches once for every size alike
            for repeat in range(args.repeats):
                order = sizes if repeat % 2 == 0 else list(reversed(sizes))
                for n in order:
                    times[n].append(time_run(bed, n, check, extra, workdir))
            base = statistics.median(times[sizes[0]])
            print(f"\n{check}: wall time of `preflight run --nodes` (median of {args.repeats})")
            print(f"{'nodes':>5} {'seconds':>8} {'ratio to ' + str(sizes[0]):>11}")
            for n in sizes:
                median = statistics.median(times[n])
                print(f"{n:>5} {median:>8.2f} {median / base:>11.2f}")
    print(f"\naim: under 1.5 at {max(sizes)} nodes; this machine has {os.cpu_count()} cores shared by every node")


if __name__ == "__main__":
    main()
