"""Slurm beside SSH: wall time of `preflight run` over 1, 4 and 8 nodes of the same namespaces (needs root).

    sudo .venv/bin/python bench/slurm_fanout.py [--repeats 2] [--sizes 1,4,8]

Builds the Slurm test bed (tests/slurm/slurmbed.py: slurmctld, one slurmd per namespace, and the
namespace test bed's sshd on each node), then times the real `preflight run --slurm` inside an
allocation of N nodes and the real `preflight run --nodes hosts.txt` over SSH to the same N nodes,
in alternating order, and prints the medians side by side with the ratio Slurm / SSH. It also
samples the resident memory of the srun processes preflight holds during the Slurm runs: one per
node at a time, which is what a 1,000-node run would hold on the coordinator.

`example.sleep` (2 s, no CPU) shows how well each path overlaps nodes; `node.environment` is the
real, CPU-light check, dominated by Python start-up on each node, and all "nodes" share this
machine's cores. Not a test: nothing here is judged.
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

CHECKS = [("example.sleep", ["--set", "example.sleep.seconds=2", "--set", "example.sleep.with_child=false"]),
          ("node.environment", [])]


def srun_rss(pid: int) -> tuple[int, int]:
    """(srun processes, their total RSS in bytes) among the descendants of pid."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    count, rss = 0, 0
    for child in children:
        try:
            if child.name() == "srun":
                count += 1
                rss += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return count, rss


def time_run(argv: list[str], env: dict[str, str], samples: list[tuple[int, int]] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "CI": "1"})
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            samples.append(srun_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True) if samples is not None else None
    if sampler:
        sampler.start()
    stdout, stderr = proc.communicate(timeout=600)
    elapsed = time.perf_counter() - start
    done.set()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"preflight run failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sizes", default="1,4,8")
    args = parser.parse_args()
    reason = slurm_unavailable_reason()
    if reason:
        raise SystemExit(f"Slurm test bed unavailable: {reason}")
    sizes = [int(s) for s in args.sizes.split(",")]
    base = [sys.executable, "-m", "preflight", "run", "--format", "json"]
    with SlurmBed(max(sizes)) as bed, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
        samples: list[tuple[int, int]] = []

        def run(kind: str, n: int, check: str, extra: list[str]) -> float:
            out = ["--checks", check, *extra, "--out", str(workdir / "out")]
            if kind == "ssh":
                hosts = workdir / f"hosts-{n}.txt"
                hosts.write_text("".join(f"{node.address}\n" for node in bed.nodes[:n]))
                return time_run([*base, "--nodes", str(hosts), "--remote-python", bed.python, *options, *out],
                                os.environ.copy())
            inside = bed.allocate(n)
            try:
                return time_run([*base, "--slurm", *out], inside, samples)
            finally:
                bed.release(inside["SLURM_JOB_ID"])

        for check, extra in CHECKS:
            times = {(kind, n): [] for kind in ("slurm", "ssh") for n in sizes}
            run("ssh", 1, check, extra)
            run("slurm", 1, check, extra)  # warm caches once for both alike
            for repeat in range(args.repeats):
                order = sizes if repeat % 2 == 0 else list(reversed(sizes))
                for n in order:
                    for kind in ("slurm", "ssh") if repeat % 2 == 0 else ("ssh", "slurm"):
                        times[(kind, n)].append(run(kind, n, check, extra))
            print(f"\n{check}: wall time of `preflight run` (median of {args.repeats}), Slurm steps beside SSH")
            print(f"{'nodes':>5} {'slurm s':>8} {'ssh s':>8} {'slurm/ssh':>10}")
            for n in sizes:
                slurm_s, ssh_s = statistics.median(times[("slurm", n)]), statistics.median(times[("ssh", n)])
                print(f"{n:>5} {slurm_s:>8.2f} {ssh_s:>8.2f} {slurm_s / ssh_s:>10.2f}")
        busiest = max(samples, default=(0, 0))
        if busiest[0]:
            print(f"\nsrun on the coordinator: at most {busiest[0]} at once, {busiest[1] / busiest[0] / 2**20:.1f} MiB "
                  f"resident each ({busiest[1] / 2**20:.0f} MiB together)")
    print(f"\nthis machine has {os.cpu_count()} cores shared by every node")


if __name__ == "__main__":
    main()
