"""What the isolation pass confirms with the rounds net.bandwidth gives it, side by side with the
budget it had before (120 s of 9 s rounds: 13 rounds), under a real fabric's noise.

    python bench/isolation_budget.py [--sizes 8,64] [--faults slow-link,boundary,slow-node] [--trials 100]
                                     [--noise 0.05] [--seed 1]

For each fault type and size: the recall of confirmed blames and the faults named (blamed or a
suspect), and the rounds the pass took (mean, most), with the pass cut at 13 rounds and at the
rounds the check now gives a pass over that many nodes (preflight.launch.isolation_types.pass_rounds,
within its time: preflight_checks.net.isolation.rounds_given). The same seeded runs each side.
Not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight_checks.net.bandwidth import NetBandwidth  # noqa: E402
from preflight_checks.net.isolation import rounds_given  # noqa: E402
from preflight.launch.fault_corpus import row  # noqa: E402
from preflight.launch.isolation_sim import Fabric  # noqa: E402
from preflight.launch.isolation_types import IsolationParams  # noqa: E402

BEFORE_S = 120.0  # the isolation_timeout_s default before it followed the cluster's size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64")
    parser.add_argument("--faults", default="slow-link,boundary,slow-node")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    before_params = NetBandwidth.Params(isolation_timeout_s=BEFORE_S)
    print(f"{'fault':<11} {'nodes':>5} {'rounds given':>13} {'recall':>15} {'named':>15} {'rounds (most)':>17}")
    for count in map(int, args.sizes.split(",")):
        before, now = rounds_given(before_params, count), rounds_given(NetBandwidth.Params(), count)
        for fault in args.faults.split(","):
            rows = [row(fault, count, args.noise, args.noise / 5, args.trials, seed=args.seed,
                        params=IsolationParams(max_rounds=limit), fabric=Fabric()) for limit in (before, now)]
            shown = [" -> ".join(f"{100 * r[key]:.0f}%" for r in rows) for key in ("recall", "recall_named")]
            taken = " -> ".join(f"{r['rounds']:.1f} ({r['rounds_max']})" for r in rows)
            print(f"{fault:<11} {count:>5} {before:>6} -> {now:<3} {shown[0]:>15} {shown[1]:>15} {taken:>17}", flush=True)


if __name__ == "__main__":
    main()
