"""Wall time of `preflight run --level quick` beside `--level standard` on this machine, in one run.

    python bench/levels_walltime.py [--repeats 1] [--skip example.crash,example.echo,example.sleep]

Runs both levels on this machine (local node, every built-in check), alternating, and prints each
level's median wall time, the sum of the recorded check durations on the node, and the ratio
quick/standard. quick is designed to fit 30 s of check time per node; the figure here is what this
machine gives, not a threshold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(level: str, skip: str, out: Path) -> tuple[float, float, str]:
    argv = [sys.executable, "-m", "preflight", "run", "--level", level, "--format", "json", "--out", str(out)]
    if skip:
        argv += ["--skip", skip]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env={"CI": "1", **_env()})
    wall = time.perf_counter() - start
    results = next(out.rglob("results.json"), None)
    if results is None:
        raise SystemExit(f"--level {level} wrote no results.json (exit {proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(results.read_text())
    node_time = sum(r["duration_s"] for r in report["results"] if r["scope"] == "node")
    return wall, node_time, report["verdict"]["verdict"]


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip", default="", help="check ids to leave out at both levels (e.g. test plugins)")
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float, str]]] = {"quick": [], "standard": []}
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as tmp:
        for i in range(args.repeats):
            for level in ("quick", "standard"):
                figures[level].append(one_run(level, args.skip, Path(tmp) / f"{level}-{i}"))
    print(f"{'level':<10} {'wall s (median)':>16} {'node check s':>13}  verdict")
    medians = {}
    for level, runs in figures.items():
        medians[level] = statistics.median(r[0] for r in runs)
        node = statistics.median(r[1] for r in runs)
        print(f"{level:<10} {medians[level]:>16.1f} {node:>13.1f}  {', '.join(r[2] for r in runs)}")
    print(f"ratio quick/standard wall time: {medians['quick'] / medians['standard']:.3f}")


if __name__ == "__main__":
    main()
