"""One job step across the allocation beside one step per node, on a real Slurm cluster (needs root).

    sudo .venv/bin/python bench/slurm_step.py [--sizes 1,2,3] [--repeats 3] [--checks node.environment]

Builds the Slurm test bed (tests/slurm/slurmbed.py: slurmctld, one slurmd per network namespace),
then, inside an allocation of N nodes, times the real `preflight run --slurm --slurm-step single`
and `--slurm-step per-node`, alternating, and samples while each runs: the resident memory of the
preflight process, and how many srun processes it holds with their resident memory together (what
grows with the allocation on the coordinator). Prints the medians side by side with the ratio
single / per-node. All "nodes" share this machine's cores: a wall time is the coordinator's and
Slurm's overhead plus the checks, not a cluster's. Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.slurm.slurmbed import SlurmBed, slurm_unavailable_reason  # noqa: E402

MODES = ("single", "per-node")


def sample(pid: int) -> tuple[int, int, int]:
    """(preflight's RSS, srun processes under it, their RSS together), in bytes."""
    try:
        root = psutil.Process(pid)
        own = root.memory_info().rss
        children = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0, 0
    count = rss = 0
    for child in children:
        try:
            if child.name() == "srun":
                count += 1
                rss += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return own, count, rss


def timed_run(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "CI": "1"})
    samples: list[tuple[int, int, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            samples.append(sample(proc.pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate(timeout=600)
    elapsed = time.perf_counter() - start
    done.set()
    watcher.join(timeout=5)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"preflight run failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return {"wall_s": elapsed, "rss": max((s[0] for s in samples), default=0),
            "sruns": max((s[1] for s in samples), default=0), "srun_rss": max((s[2] for s in samples), default=0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checks", default="node.environment")
    args = parser.parse_args()
    reason = slurm_unavailable_reason()
    if reason:
        raise SystemExit(f"Slurm test bed unavailable: {reason}")
    sizes = [int(s) for s in args.sizes.split(",")]
    with SlurmBed(max(sizes)) as bed, tempfile.TemporaryDirectory() as tmp:
        runs: dict[tuple[str, int], list[dict[str, float]]] = {(m, n): [] for m in MODES for n in sizes}
        for n in sizes:
            inside = bed.allocate(n)
            try:
                def run(mode: str) -> dict[str, float]:
                    return timed_run([sys.executable, "-m", "preflight", "run", "--slurm", "--slurm-step", mode,
                                      "--checks", args.checks, "--format", "json", "--out", str(Path(tmp) / "out")],
                                     inside)

                run("single")  # warm caches for both alike
                for repeat in range(args.repeats):
                    for mode in MODES if repeat % 2 == 0 else tuple(reversed(MODES)):
                        runs[(mode, n)].append(run(mode))
            finally:
                bed.release(inside["SLURM_JOB_ID"])
    print(f"`preflight run --slurm --checks {args.checks}`: median of {args.repeats}, alternating; "
          f"memory is the most seen at once")
    print(f"{'nodes':>5} {'mode':>9} {'wall s':>7} {'preflight MiB':>14} {'sruns':>6} {'srun MiB':>9} "
          f"{'single/per-node wall':>21}")
    for n in sizes:
        walls = {m: statistics.median(r["wall_s"] for r in runs[(m, n)]) for m in MODES}
        for mode in MODES:
            rows = runs[(mode, n)]
            ratio = f"{walls['single'] / walls['per-node']:>21.2f}" if mode == "single" else ""
            print(f"{n:>5} {mode:>9} {walls[mode]:>7.2f} {max(r['rss'] for r in rows) / 2**20:>14.0f} "
                  f"{max(r['sruns'] for r in rows):>6.0f} {max(r['srun_rss'] for r in rows) / 2**20:>9.1f} {ratio}")
    print(f"\nthis machine has {os.cpu_count()} cores shared by every node")


if __name__ == "__main__":
    main()
