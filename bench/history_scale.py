"""Fleet history at scale: ingest of a 1,000-node run, trend over 200 such runs, compare of two images.

    .venv/bin/python bench/history_scale.py [--nodes 1000] [--runs 200] [--pg-url postgresql+psycopg://...]

Each run is synthesised from tests/data/reports/cluster_run.json, whose results the real checks'
evaluate() produced: every node gets one of its three nodes' results (54 numeric figures of a
standard-level run on an 8 x H100 node) with each figure jittered by a seeded random factor, and a
ring of iperf3 links, one per node. The first half of the runs report image A, the second half
image B, whose all-reduce bus bandwidth is 4% lower. For SQLite (a temp file) and, with --pg-url,
PostgreSQL (an empty database: the tables are dropped first), it times:
- ingest of --ingest-runs runs into a new store, one by one (median wall and CPU time);
- then, to reach --runs runs within minutes, copies the ingested runs inside the database
  (INSERT ... SELECT, every figure jittered by up to 1%), and times the ingest of one more run;
- trend of one figure over all runs (the median per run), and per node for one node;
- compare of the two images over every figure; lemons; context_for_report for a new run;
and prints the store's size. CPU time is shown beside wall time because a shared machine's wall
time says more about its neighbours than about the code. Targets: ingest under 2 s per 1,000-node
run, trend and compare under 1 s at 200 runs. Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATE = ROOT / "tests" / "data" / "reports" / "cluster_run.json"
START = datetime(2026, 6, 1, tzinfo=timezone.utc)
IMAGE_B = {"driver": "550.90.07", "nccl": "2.21.5"}


def templates() -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, Any]]:
    report = json.loads(TEMPLATE.read_text())
    by_node: dict[str, list[dict[str, Any]]] = {}
    link = None
    for result in report["results"]:
        if result["node"] == "cluster":
            link = result
        else:
            by_node.setdefault(result["node"], []).append(result)
    return report, by_node, link


def with_image(results: list[dict[str, Any]], image: dict[str, str]) -> list[dict[str, Any]]:
    """The node's results with another driver and NCCL in their facts (versions.pinned, gpu.visibility)."""
    out = []
    for result in results:
        if result["check_id"] in ("versions.pinned", "gpu.visibility"):
            result = {**result, "facts": copy.deepcopy(result["facts"])}
            if result["check_id"] == "versions.pinned":
                result["facts"]["stack"].update(image)
            else:
                result["facts"]["nvml"]["driver_version"] = image["driver"]
                result["facts"]["torch"]["nccl"] = image["nccl"]
        out.append(result)
    return out


def jittered(m: dict[str, Any], factor: float) -> dict[str, Any]:
    value = m.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return m
    return {**m, "value": round(value * factor, 4), "samples": [round(s * factor, 4) for s in m.get("samples") or []]}


def synth_run(base: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], link: dict[str, Any], nodes: int,
              when: datetime, rng: random.Random, *, busbw_factor: float = 1.0) -> dict[str, Any]:
    shapes = list(by_node.values())
    names = [f"node{i:05d}" for i in range(nodes)]
    results = []
    for i, name in enumerate(names):
        factor = 1 + rng.gauss(0, 0.01)
        for template in shapes[i % len(shapes)]:
            extra = busbw_factor if template["check_id"] == "collectives.local" else 1.0
            results.append({**template, "node": name,
                            "measurements": [jittered(m, factor * extra) for m in template["measurements"]]})
    sample = next(m for m in link["measurements"] if m.get("figure") == "link")
    measurements = []
    for i, name in enumerate(names):
        pair = f"{name} -> {names[(i + 1) % len(names)]}"
        measurements.append({**jittered(sample, 1 + rng.gauss(0, 0.01)), "name": pair, "at": pair, "node": pair})
    results.append({**link, "measurements": measurements, "findings": []})
    return {**base, "started_at": when.isoformat(), "finished_at": (when + timedelta(minutes=14)).isoformat(),
            "nodes": [{"name": n, "address": "", "slots": 8, "reachable": True, "error": ""} for n in names],
            "results": results, "verdict": {"verdict": "GO", "exit_code": 0, "reason": "", "blocking": []}}


def timed(fn: Any) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, the result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def replicate(store: Any, source_ids: list[int], count: int, first: datetime, rng: random.Random) -> None:
    """`count` more runs copied inside the database from the ingested ones, each figure jittered by up
    to 1%, one per 6 hours from `first`: history of the size asked for without ingesting every run."""
    from sqlalchemy import func, literal, select

    from preflight.history.schema import figure_stats, figures, findings, node_images, runs

    if store.dialect == "postgresql":
        jitter = 1 + (func.random() * 2 - 1) / 100
    else:
        jitter = 1 + (func.abs(func.random()) % 2001 - 1000) / 100000.0
    for i in range(count):
        src = source_ids[i * len(source_ids) // count]
        with store.write() as conn:
            row = conn.execute(select(runs).where(runs.c.id == src)).one()._asdict()
            row.pop("id")
            row.update(run_key=f"{row['run_key'][:20]}-{i:06d}", started=first + timedelta(hours=6 * i))
            new = conn.execute(runs.insert().values(**row)).inserted_primary_key[0]
            for table, scaled in ((node_images, ()), (findings, ()), (figures, ("value",)),
                                  (figure_stats, ("median", "p05", "p25", "p75", "p95", "min", "max"))):
                cols = [c for c in table.c if c.name != "id"]
                picked = [literal(new) if c.name == "run_id" else (c * jitter if c.name in scaled else c)
                          for c in cols]
                conn.execute(table.insert().from_select([c.name for c in cols],
                                                        select(*picked).where(table.c.run_id == src)))
        if (i + 1) % 25 == 0:
            print(f"  {store.dialect}: {i + 1} of {count} runs copied", flush=True)


def bench(url: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    from preflight.history import queries
    from preflight.history.store import Store

    base, by_node, link = templates()
    shapes = {"A": by_node, "B": {n: with_image(rs, IMAGE_B) for n, rs in by_node.items()}}
    rng = random.Random(1)
    out: dict[str, Any] = {"engine": label}

    def make(image: str, when: datetime) -> dict[str, Any]:
        return synth_run(base, shapes[image], link, args.nodes, when, rng, busbw_factor=0.96 if image == "B" else 1.0)

    with Store(url) as store:
        held = len(queries.list_runs(store, limit=100000))
        if args.reuse and held >= args.runs:
            print(f"  {label}: reusing the {held} runs it holds", flush=True)
            return _queries(store, out, make)
        walls, cpus, ids = [], [], {"A": [], "B": []}
        for i in range(args.ingest_runs):
            image = "A" if i < args.ingest_runs / 2 else "B"
            report = make(image, START + timedelta(hours=6 * i))
            wall, cpu, done = timed(lambda: store.ingest(report))
            walls.append(wall)
            cpus.append(cpu)
            ids[image].append(done.run_id)
            out["figures_per_run"] = done.figures
        out["ingest_wall_s"] = sorted(walls)[len(walls) // 2]
        out["ingest_cpu_s"] = sorted(cpus)[len(cpus) // 2]
        more = max(0, args.runs - args.ingest_runs)
        first = START + timedelta(days=30)
        out["replicate_s"], _, _ = timed(lambda: (replicate(store, ids["A"], more // 2, first, rng),
                                                 replicate(store, ids["B"], more - more // 2,
                                                           first + timedelta(hours=6 * (more // 2)), rng)))
        return _queries(store, out, make)


def _queries(store: Any, out: dict[str, Any], make: Any) -> dict[str, Any]:
    from preflight.history import queries
    from preflight.history.compare import compare
    from preflight.history.context import context_for_report

    out["runs"] = len(queries.list_runs(store, limit=100000))
    report = make("B", START + timedelta(days=500 + out["runs"]))
    out["ingest_at_size_wall_s"], out["ingest_at_size_cpu_s"], _ = timed(lambda: store.ingest(report))
    figure = "nccl (8 GPUs): busbw at 1 GiB"

    def measure(name: str, fn: Any) -> Any:
        out[f"{name}_wall_s"], out[f"{name}_cpu_s"], value = timed(fn)
        return value

    _, rows = measure("trend", lambda: queries.trend(store, figure=figure))
    out["trend_rows"] = len(rows)
    _, node_rows = measure("trend_node", lambda: queries.trend(store, figure=figure, nodes_in=["node00007"]))
    out["trend_node_rows"] = len(node_rows)
    _, _, compared = measure("compare", lambda: compare(store, "driver=550.54.15", "driver=550.90.07"))
    out["compare_figures"] = len(compared)
    out["compare_worse"] = sorted({c.key.name for c in compared if c.verdict == "worse"})
    measure("list", lambda: queries.list_runs(store, limit=50))
    measure("lemons", lambda: queries.lemons(store, k=3, n=5))
    new = make("B", START + timedelta(days=5000))
    context = measure("context", lambda: context_for_report(store, new))
    out["context_figures"] = len(context["figures"])
    out["size_mb"] = (store.size_bytes() or 0) / 1e6
    return out


def reset_postgres(url: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        for table in ("figure_stats", "results", "findings", "figures", "figure_keys", "node_images", "nodes",
                      "runs", "schema_version"):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table} CASCADE")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=200, help="Runs in the history the queries are timed on.")
    parser.add_argument("--ingest-runs", type=int, default=6,
                        help="Runs ingested one by one (timed); the rest are copied inside the database.")
    parser.add_argument("--pg-url", default=None, help="A PostgreSQL database to bench as well (its tables are "
                                                       "dropped first unless --reuse).")
    parser.add_argument("--no-sqlite", action="store_true", help="Bench PostgreSQL only.")
    parser.add_argument("--sqlite", default=None, metavar="PATH", help="The SQLite file (default: a temporary one).")
    parser.add_argument("--reuse", action="store_true",
                        help="Time the queries on a store that already holds --runs runs, without filling it.")
    args = parser.parse_args()
    engines = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_sqlite:
            engines.append(bench(args.sqlite or str(Path(tmp) / "history.sqlite"), "sqlite", args))
        if args.pg_url:
            if not args.reuse:
                reset_postgres(args.pg_url)
            engines.append(bench(args.pg_url, "postgresql", args))
    print(f"{args.nodes} nodes per run; targets: ingest < 2 s per run, trend and compare < 1 s "
          "(CPU: this process only, not a PostgreSQL server's)")
    keys = ["figures_per_run", "ingest_wall_s", "ingest_cpu_s", "replicate_s", "runs", "ingest_at_size_wall_s",
            "ingest_at_size_cpu_s", "trend_wall_s", "trend_cpu_s", "trend_rows", "trend_node_wall_s",
            "trend_node_cpu_s", "trend_node_rows", "compare_wall_s", "compare_cpu_s", "compare_figures",
            "list_wall_s", "lemons_wall_s", "lemons_cpu_s", "context_wall_s", "context_cpu_s", "context_figures",
            "size_mb"]
    print(f"{'':<18}" + "".join(f"{e['engine']:>14}" for e in engines))
    for key in keys:
        cells = "".join(f"{e[key]:>14.3f}" if isinstance(e.get(key), float) else f"{e.get(key, '-'):>14}"
                        for e in engines)
        print(f"{key:<18}{cells}")
    for e in engines:
        print(f"{e['engine']}: worse beyond noise from A to B: {', '.join(e['compare_worse']) or 'nothing'}")


if __name__ == "__main__":
    main()
