"""The fleet site at scale: `preflight history site` over a store of 1,000 runs of 100 nodes.

    .venv/bin/python bench/site_scale.py [--nodes 100] [--runs 1000]

The store is filled as bench/history_scale.py fills it (runs synthesised from
tests/data/reports/cluster_run.json, whose results the real checks judged; a few ingested one by one,
the rest copied inside the database with every figure jittered by up to 1%); the first half of the
runs report image A, the second half image B, whose all-reduce bus bandwidth is 4% lower. It then
times, side by side in one process, the site (gathering and writing index.html and fleet.prom) and
the terminal commands that answer part of the same question (`history list` of every run, `history
compare` of the two images), and prints the page's size. Targets: the site under 10 s, the page under
5 MB. Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from history_scale import IMAGE_B, replicate, synth_run, templates, timed, with_image  # noqa: E402

START = datetime(2026, 6, 1, tzinfo=timezone.utc)


def fill(store, nodes: int, runs: int, seeds: int) -> None:
    base, by_node, link = templates()
    rng = random.Random(7)
    ids = []
    for i in range(seeds):
        image_b = i >= seeds // 2
        shaped = {n: with_image(rs, IMAGE_B) for n, rs in by_node.items()} if image_b else by_node
        report = synth_run(base, shaped, link, nodes, START + timedelta(hours=i), rng,
                           busbw_factor=0.96 if image_b else 1.0)
        ids.append(store.ingest(report).run_id)
    replicate(store, ids, runs - seeds, START + timedelta(days=1), rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed-runs", type=int, default=8, help="Runs ingested one by one; the rest are copies.")
    args = parser.parse_args()
    from preflight.history import compare, queries, site, site_page
    from preflight.history.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        db, out = Path(tmp) / "history.sqlite", Path(tmp) / "site"
        with Store(db, create=True) as store:
            fill(store, args.nodes, args.runs, args.seed_runs)
        with Store(db, create=False) as store:
            wall, cpu, gathered = timed(lambda: site.gather(store, site.Filters()))
            digests = [gathered.changes[0].before, gathered.changes[0].after]
            wall_w, cpu_w, written = timed(lambda: site_page.write(gathered, out, store.location))
            list_wall, list_cpu, listed = timed(lambda: queries.list_runs(store))
            cmp_wall, cmp_cpu, _ = timed(lambda: compare.compare(store, digests[0][:12], digests[-1][:12]))
        size = (out / "index.html").stat().st_size
        print(f"{len(listed)} runs of {args.nodes} nodes; {len(gathered.figures)} charts, "
              f"{len(gathered.changes)} image change(s), readiness {gathered.readiness.share:.0%}")
        print(f"{'':<34}{'wall s':>9}{'CPU s':>9}")
        print(f"{'site: gather':<34}{wall:>9.2f}{cpu:>9.2f}")
        print(f"{'site: write index.html, fleet.prom':<34}{wall_w:>9.2f}{cpu_w:>9.2f}")
        print(f"{'site: total':<34}{wall + wall_w:>9.2f}{cpu + cpu_w:>9.2f}")
        print(f"{'history list (every run)':<34}{list_wall:>9.2f}{list_cpu:>9.2f}")
        print(f"{'history compare (A vs B)':<34}{cmp_wall:>9.2f}{cmp_cpu:>9.2f}")
        print(f"site / (list + compare), wall: {(wall + wall_w) / (list_wall + cmp_wall):.1f}x")
        print(f"index.html: {size / 1e6:.2f} MB (target < 5 MB); site total target < 10 s")
        for change in gathered.changes:
            for row in change.rows:
                if row.verdict == "worse":
                    print(f"  {row.sentence}")


if __name__ == "__main__":
    main()
