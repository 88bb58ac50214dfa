"""How the reports scale: render every format for a synthesised 1,000-node run and print time and size.

    .venv/bin/python bench/report_scale.py [--nodes 1000]

The run comes from tests/data/reports/build_cluster_run.py (build_large): every result is the real
evaluate() of its check on facts shaped as collect() records them (most nodes healthy, every 97th
with slow checkpoint writes and NCCL below its floor, one with a slow loader, one slow link in the
ring); nothing is measured. The figures to look at: the HTML report should render in under 5 s and
stay under 5 MB; identical per-node results fold into one row with their node set. Not a test:
nothing here is judged, and times depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "data" / "reports"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()

    import build_cluster_run

    from preflight.reporters import available, renderer
    from preflight.reporters import terminal
    from preflight.reporters.view import build_view

    start = time.perf_counter()
    report = build_cluster_run.build_large(args.nodes)
    print(f"synthesised {len(report.results)} results on {args.nodes} nodes in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    view = build_view(report)
    print(f"view: {time.perf_counter() - start:.2f} s; node x check rows {len(view.matrix_rows)} for "
          f"{len(view.nodes)} nodes; {len(view.blocking)} blocking and {len(view.warnings)} warning rows; "
          f"check sections hold {sum(len(s.groups) for s in view.sections)} result rows for "
          f"{sum(len(s.results) for s in view.sections)} results")
    formats = [("terminal", terminal.render)] + [(name, renderer(name)) for name in ("md", "html", "junit", "json")
                                                  if name in available()]
    for name, render in formats:
        start = time.perf_counter()
        text = render(report)
        seconds = time.perf_counter() - start
        print(f"{name:<9} {seconds:6.2f} s  {len(text.encode()) / 1e6:8.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
