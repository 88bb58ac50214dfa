"""One fleet's history, used end to end on SQLite (tests/unit/history) and PostgreSQL
(tests/integration/test_history_postgres.py): the same runs, the same questions, the same answers.

16 nodes, 14 runs:
- image A (driver 550.54.15, NCCL 2.20.5): 7 daily runs; gpu12 lags its peers in two of them, and
  in one gpu03's all-reduce falls below its floor (a FAIL, so that run is NO-GO);
- image B (driver 550.90.07, NCCL 2.21.5): 7 daily runs ten days later, where the new image costs
  5% of all-reduce bus bandwidth on every node, and gpu07 lags its peers in 4 of the last 5 runs
  while still passing its floor.
"""

from __future__ import annotations

import math
from datetime import timedelta
from functools import lru_cache
from typing import Any

from tests.unit.history import fleet

NODES = fleet.node_names(16)
SLOW = 0.9  # a lagging node's figures: 10% below its peers, still above the floor
BUSBW_FIGURE = "nccl (8 GPUs): busbw at 1 GiB"
A_RUNS, B_RUNS = 7, 7
B_START = fleet.START + timedelta(days=10)
IMAGE_B_COST = 0.95


def _a_slow(i: int) -> dict[str, float]:
    slow = {"gpu12": SLOW} if i in (1, 4) else {}
    if i == 2:
        slow["gpu03"] = 0.8  # below collectives.local's floor: FAIL
    return slow


def _b_slow(i: int) -> dict[str, float]:
    return {"gpu07": SLOW} if i in (2, 3, 5, 6) else {}  # 4 of the last 5 runs


@lru_cache(maxsize=1)
def runs() -> tuple[dict[str, Any], ...]:
    a = [fleet.fleet_report(NODES, fleet.START + timedelta(days=i), seed=i, image=fleet.IMAGE_A, slow=_a_slow(i))
         for i in range(A_RUNS)]
    b = [fleet.fleet_report(NODES, B_START + timedelta(days=i), seed=100 + i, image=fleet.IMAGE_B,
                            busbw_factor=IMAGE_B_COST, slow=_b_slow(i)) for i in range(B_RUNS)]
    return tuple(a + b)


def image_a_runs() -> list[dict[str, Any]]:
    return list(runs()[:A_RUNS])


def image_b_runs() -> list[dict[str, Any]]:
    return list(runs()[A_RUNS:])


def ingest_all(store: Any) -> list[Any]:
    return [store.ingest(r) for r in runs()]


def busbw_values(reports: list[dict[str, Any]], *, skip: set[tuple[int, str]] = frozenset()) -> list[float]:
    """Every node's busbw at 1 GiB in these reports, leaving out (report index, node) pairs."""
    out = []
    for i, report in enumerate(reports):
        for result in report["results"]:
            if result["check_id"] != "collectives.local" or (i, result["node"]) in skip:
                continue
            out += [m["value"] for m in result["measurements"] if m["name"] == BUSBW_FIGURE]
    return out


def exercise(store: Any) -> None:
    """The whole tour of one store, asserting as it goes: ingest, list, show, trend, compare, lemons,
    learn, the report context. Runs the same on either engine."""
    from preflight.history import queries
    from preflight.history.compare import compare
    from preflight.history.context import context_for_report
    from preflight.history.learn import LearnError, learn_baseline
    from preflight.history.stats import median, percentile

    recorded = ingest_all(store)
    assert all(r.new for r in recorded)
    assert not store.ingest(runs()[0]).new  # a run recorded twice is kept once

    listed = queries.list_runs(store)
    assert len(listed) == A_RUNS + B_RUNS
    assert listed[0].started > listed[-1].started
    verdicts = {r.verdict for r in listed}
    assert verdicts == {"GO", "NO-GO"}
    assert len(queries.list_runs(store, verdict="NO-GO")) == 1
    assert len(queries.list_runs(store, image="driver=550.90.07")) == B_RUNS
    assert len(queries.list_runs(store, since=B_START.replace(tzinfo=None))) == B_RUNS
    assert len(queries.list_runs(store, nodes_in=["gpu07"])) == A_RUNS + B_RUNS

    detail = queries.show_run(store, "latest")
    assert detail.nodes == "gpu[01-16]" and len(detail.images) == 1
    assert any(f["id"] == "fleet.outlier" and f["node"] == "gpu07" for f in detail.findings)

    keys, rows = queries.trend(store, figure=BUSBW_FIGURE)
    assert len(keys) == 1 and len(rows) == A_RUNS + B_RUNS
    assert [r.started for r in rows] == sorted(r.started for r in rows)
    expected_first = median(busbw_values([runs()[0]]))
    assert math.isclose(rows[0].median, expected_first, rel_tol=1e-9)
    _, per_node = queries.trend(store, figure="busbw at 1 GiB", nodes_in=["gpu07"])
    assert {r.node for r in per_node} == {"gpu07"} and len(per_node) == A_RUNS + B_RUNS

    side_a, side_b, compared = compare(store, "driver=550.54.15", "driver=550.90.07")
    busbw = next(c for c in compared if c.key.name == BUSBW_FIGURE)
    assert busbw.beyond_noise and busbw.verdict == "worse"
    assert busbw.test.startswith("Mann-Whitney U") and busbw.p_value < 0.01
    assert busbw.change < 0
    assert math.isclose(busbw.change, IMAGE_B_COST - 1, abs_tol=0.01)
    shm = next(c for c in compared if c.key.name == "/dev/shm size")
    assert not shm.beyond_noise  # what the image did not touch stays within noise

    lemons = queries.lemons(store, k=3, n=5)
    assert [row.name for row in lemons] == ["gpu07"]
    assert lemons[0].outlier_runs == 4
    assert "gpu12" not in {row.name for row in queries.lemons(store, k=2, n=5)}

    text, provenance = learn_baseline(store, image="driver=550.54.15")
    healthy_a = busbw_values(image_a_runs(), skip={(1, "gpu12"), (4, "gpu12")} | {(2, n) for n in NODES})
    assert provenance["runs"] == A_RUNS - 1  # the NO-GO run is not healthy
    floor = provenance["floors"]["collectives.local.min_busbw_gbps"]["value"]
    p5 = percentile(healthy_a, 5)
    assert p5 * 0.97 <= floor <= p5  # the 5th percentile, less the samples' noise (about 1% here)
    assert floor > SLOW * median(healthy_a)  # ... and above what a lagging node measures
    assert "min_busbw_gbps" in text and "_source" in text
    try:
        learn_baseline(store, image="driver=550.54.15", since=B_START.replace(tzinfo=None))
    except LearnError as exc:
        assert "--min-runs" in str(exc)
    else:
        raise AssertionError("learning from no run did not refuse")

    context = context_for_report(store, runs()[-1])
    entry = next(f for f in context["figures"] if f["name"] == BUSBW_FIGURE)
    assert entry["same_image"] and entry["runs"] == B_RUNS - 1
    assert 0 <= entry["percentile"] <= 100
    first_b = context_for_report(store, image_b_runs()[0])
    assert {c["node"] for c in first_b["image_changes"]} == set(NODES)
    assert set(first_b["image_changes"][0]["changed"]) >= {"driver", "nccl"}
    assert context["image_changes"] == []
