"""The whole tour of fleet history on an SQLite file: see scenario.py."""

from __future__ import annotations

from preflight.history.store import Store
from tests.unit.history import scenario


def test_history_end_to_end_on_sqlite(tmp_path):
    with Store(tmp_path / "history.sqlite") as store:
        scenario.exercise(store)
        assert store.size_bytes() > 0


def test_compare_with_few_runs_weighs_node_results(tmp_path):
    """Three runs on each image are too few to compare run medians: the node results are the evidence."""
    from preflight.history.compare import compare

    with Store(tmp_path / "history.sqlite") as store:
        for report in scenario.image_a_runs()[3:6] + scenario.image_b_runs()[:3]:
            store.ingest(report)
        _, _, compared = compare(store, "nccl=2.20.5", "nccl=2.21.5", figure=scenario.BUSBW_FIGURE)
    assert len(compared) == 1
    busbw = compared[0]
    assert busbw.unit_of_observation == "node results" and busbw.n_a >= 3 * 15 and busbw.n_b >= 3 * 15
    assert busbw.verdict == "worse" and busbw.p_value < 0.01
