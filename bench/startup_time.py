"""Start-up cost of the CLI beside the cost of importing torch, measured side by side in one run.

    python bench/startup_time.py [--repeats 7]

Prints the median wall time of `preflight --help` and of `python -c "import torch"` and their ratio
(aim: under 0.1). The CLI must not pay for the frameworks it tests.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def median_wall_time(argv: list[str], repeats: int) -> float:
    subprocess.run(argv, capture_output=True, check=True)  # warm the page cache for both sides alike
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    entry = shutil.which("preflight")
    cli = [entry, "--help"] if entry else [sys.executable, "-m", "preflight", "--help"]
    cli_s = median_wall_time(cli, args.repeats)
    torch_s = median_wall_time([sys.executable, "-c", "import torch"], args.repeats)
    print(f"{'command':<32} {'median s':>9}")
    print(f"{' '.join(cli[-2:]):<32} {cli_s:>9.3f}")
    torch_label = 'python -c "import torch"'
    print(f"{torch_label:<32} {torch_s:>9.3f}")
    ratio = cli_s / torch_s
    print(f"ratio preflight/torch: {ratio:.3f} ({'meets' if ratio < 0.1 else 'misses'} the aim of < 0.1)")


if __name__ == "__main__":
    main()
