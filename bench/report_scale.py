"""How the reports scale: every format rendered for a synthesised 1,000-node run, by the code of an
earlier commit and by this tree, side by side in one run.

    .venv/bin/python bench/report_scale.py [--nodes 1000[,100...]] [--against REF] [--repeat 3] [--clock cpu]

The run comes from tests/data/reports/build_cluster_run.py (build_large): every result is the real
evaluate() of its check on facts shaped as collect() records them (most nodes healthy, every 97th
with slow checkpoint writes and NCCL below its floor, one with a slow loader, one slow link in the
ring); nothing is measured. Each side runs in a fresh interpreter with its own tree first on the path
(REF is checked out with `git worktree add --detach` into a temporary directory, and removed after):

- fixed: importing the reporters and rendering a one-node run in every format (imports, templates,
  matplotlib's first figure), paid once per command;
- each format, then all of them together as a run writes them (preflight.run.finish: one shared
  view; preflight.run.rendering renders the HTML report in a forked child on a second core where
  the tree has it, and "one core" is the same without the child). The collector is frozen for
  both, as a run freezes it: else a full collection of the report's objects (a sixth of a second
  at 1,000 nodes) falls on whichever format crosses its threshold, and a format's figure moves by
  that much from run to run. With --clock cpu, "together" is the one-core figure: CPU seconds
  count this process only.

The two sides take turns, --repeat times each, and each figure is the best of its side's turns.
With several node counts (--nodes 100,1000) each count gets its table, and the last line says how
much all formats together grow from the first count to the last, on each side.

Not a test: nothing here is judged, and times depend on the machine; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "18c5973"  # the tree before the run layer and the report-cost work
FORMATS = ("terminal", "md", "html", "junit", "json", "prometheus")

# Run in the measured tree's own interpreter, with that tree's packages first on sys.path.
MEASURE = r'''
import gc, json, sys, time
tree, nodes, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
clock = time.process_time if sys.argv[5] == "cpu" else time.perf_counter
start = clock()
sys.path[:0] = [sys.argv[4], tree, tree + "/tests/data/reports"]
import preflight
from preflight.reporters import renderer, view
from preflight.reporters import terminal
import build_cluster_run
assert preflight.__file__.startswith(tree), preflight.__file__
formats = {"terminal": terminal.render, **{f: renderer(f) for f in ("md", "html", "junit", "json", "prometheus")}}
small = build_cluster_run.build_large(2)
for render in formats.values():
    render(small)
fixed = clock() - start
report = build_cluster_run.build_large(nodes)
times = {}
for name, render in formats.items():
    best = None
    for _ in range(repeat):
        gc.freeze()
        t = clock(); render(report); took = clock() - t
        gc.unfreeze()
        best = took if best is None else min(best, took)
    times[name] = best
try:
    from preflight.run.rendering import rendered  # the files as a run writes them, the HTML on a second core
except ImportError:
    rendered = None
files = [f for f in formats if f != "terminal"]
def together(aside):
    best = None
    for _ in range(repeat):
        gc.freeze()
        t = clock()
        with view.shared():
            formats["terminal"](report)
            if rendered is None:
                for name in files:
                    formats[name](report)
            else:
                for _ in rendered(report, files, aside=aside):
                    pass
        took = clock() - t
        gc.unfreeze()
        best = took if best is None else min(best, took)
    return best
# CPU seconds count this process only: a child's share would go uncounted, so that clock sees one core.
one_core = together(False)
print(json.dumps({"fixed": fixed, "formats": times, "one_core": one_core,
                  "together": one_core if sys.argv[5] == "cpu" else together(None), "results": len(report.results)}))
'''


def measure(tree: Path, nodes: int, repeat: int, clock: str = "wall") -> dict:
    """One side, in a fresh interpreter: checks and templates of `tree` through links named as the
    installed packages are, so that neither side reads the other's."""
    with tempfile.TemporaryDirectory(prefix="preflight-bench-pkgs-") as links:
        (Path(links) / "preflight_checks").symlink_to(tree / "checks")
        (Path(links) / "preflight_templates").symlink_to(tree / "templates")
        done = subprocess.run([sys.executable, "-c", MEASURE, str(tree), str(nodes), str(repeat), links, clock],
                              cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    return {"fixed": min(r["fixed"] for r in runs), "together": min(r["together"] for r in runs),
            "one_core": min(r["one_core"] for r in runs),
            "results": runs[0]["results"], "formats": {f: min(r["formats"][f] for r in runs) for f in FORMATS}}


def compare(old_tree: Path, nodes: int, repeat: int, clock: str) -> tuple[dict, dict]:
    """(old, new) at `nodes`: old and new take turns, each in a fresh interpreter, so that a load on the
    machine that comes and goes weighs on both sides alike; each figure is the best of its side's turns."""
    turns: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(repeat):
        turns["old"].append(measure(old_tree, nodes, 1, clock))
        turns["new"].append(measure(ROOT, nodes, 1, clock))
    return best(turns["old"]), best(turns["new"])


def table(nodes: int, old: dict, new: dict, args: argparse.Namespace) -> None:
    kind = "CPU seconds" if args.clock == "cpu" else "seconds"
    print(f"{nodes} nodes, {new['results']} results; {kind}, best of {args.repeat}; old = {args.against}")
    print(f"{'':<28}{'old':>8}{'new':>8}{'new/old':>9}")
    rows = [(f, old["formats"][f], new["formats"][f]) for f in FORMATS]
    rows += [("all formats, one core", old["one_core"], new["one_core"]),
             ("all formats together", old["together"], new["together"]),
             ("fixed (imports, templates)", old["fixed"], new["fixed"])]
    for name, before, after in rows:
        print(f"{name:<28}{before:8.2f}{after:8.2f}{after / before:9.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000", help="node count, or counts separated by commas (100,1000)")
    parser.add_argument("--against", default=BEFORE, help=f"the commit to compare with (default {BEFORE})")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall-clock seconds (default), or the process's CPU seconds: steadier on a shared machine")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: {args.nodes!r} is not a node count or counts separated by commas")
    if any(n < 1 for n in counts):
        parser.error(f"--nodes: {args.nodes!r}: every count must be at least 1")

    old_tree = Path(tempfile.mkdtemp(prefix="preflight-bench-old-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(old_tree), args.against],
                   check=True)
    try:
        measured = {n: compare(old_tree, n, args.repeat, args.clock) for n in counts}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False)
        shutil.rmtree(old_tree.parent, ignore_errors=True)
    for n, (old, new) in measured.items():
        table(n, old, new, args)
    if len(counts) > 1:
        (old_first, new_first), (old_last, new_last) = measured[counts[0]], measured[counts[-1]]
        print(f"all formats together, {counts[-1]} over {counts[0]} nodes: old "
              f"{old_last['together'] / old_first['together']:.2f} times, new "
              f"{new_last['together'] / new_first['together']:.2f} times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
