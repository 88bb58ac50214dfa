"""How often the isolation pass's confirmation rule blames a healthy component, by rule, simulated.

A healthy fleet measuring just above its floor (the healthy figure 1.0 against a floor of 0.95, 5%
Gaussian noise: one reading in six is below the floor) through preflight.launch.isolation, as
tests/unit/launch/test_isolation_confirmation.py runs it, for the default rule (bad in 4 of 4
measurements) and two looser ones, at 8 and 64 nodes. Prints JSON: per nodes and rule, the runs
with a healthy component blamed, the runs where noise made a group bad, the runs, and the seconds.

    python bench/confirmation_rule.py [--trials 10000] [--out bench/results/confirmation_rule.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight.launch.fault_corpus import healthy_near_floor  # noqa: E402
from preflight.launch.isolation import IsolationParams  # noqa: E402

RULES = {"4 of 4": IsolationParams(), "3 of 4": IsolationParams(confirm_bad=3, confirm_of=4),
         "4 of 5": IsolationParams(confirm_bad=4, confirm_of=5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10000)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    rows = []
    for count in (8, 64):
        for rule, params in RULES.items():
            started = time.monotonic()
            blamed, flagged = healthy_near_floor(count, args.trials, params)
            rows.append({"nodes": count, "rule": rule, "runs": args.trials, "blamed_runs": blamed,
                         "blamed_rate": round(blamed / args.trials, 5), "runs_with_a_bad_group": flagged,
                         "wall_s": round(time.monotonic() - started, 1)})
    text = json.dumps(rows, indent=2, allow_nan=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
