"""A run's place in fleet history, as its report shows it: each headline figure among earlier runs of
the same node type only, too few runs said as such, and the image change of a node since its previous
run named. Real SQLite stores, seeded with report dicts through record_run."""

from __future__ import annotations

from datetime import timedelta

from preflight.history import record_run, report_context
from preflight.history.context import context_for_report
from preflight.history.store import Store
from tests.unit.history import fleet

NODES = fleet.node_names(4)
A100 = {**fleet.IMAGE_A, "gpu_model": "NVIDIA A100-SXM4-80GB"}
BUSBW = "nccl (8 GPUs): busbw at 1 GiB"
H100_KIND = "8 x NVIDIA H100 80GB HBM3"
A100_KIND = "8 x NVIDIA A100-SXM4-80GB"


def _seed(url, count, *, image=fleet.IMAGE_A, start=fleet.START, busbw=470.0, seed=0, nodes=NODES):
    for i in range(count):
        report = fleet.fleet_report(nodes, start + timedelta(hours=i), image=image, busbw=busbw, seed=seed + i)
        assert record_run(report, url) is None


def _entries(context, name=BUSBW):
    return {e["kind"]: e for e in context["figures"] if e["name"] == name}


def test_a_figure_is_placed_among_earlier_runs_of_its_own_node_type_only(tmp_path):
    url = tmp_path / "history.sqlite"
    _seed(url, 4, busbw=470.0)
    # Twice as many runs of another node type, far slower: they must not count for the H100 nodes.
    _seed(url, 8, image=A100, busbw=230.0, seed=50, start=fleet.START + timedelta(days=1),
          nodes=fleet.node_names(4, "a100-"))
    new = fleet.fleet_report(NODES, fleet.START + timedelta(days=3), busbw=470.0, seed=99)
    with Store(url) as store:
        context = context_for_report(store, new)
    entry = _entries(context)[H100_KIND]
    assert entry["runs"] == 4 and entry["same_image"] is True
    assert 350 < entry["history_p05"] <= entry["history_p95"] < 500  # no A100 run among them
    assert 0 < entry["percentile"] < 100 and len(entry["recent"]) == 4
    assert set(_entries(context)) == {H100_KIND}


def test_a_run_of_two_node_types_has_one_entry_per_figure_and_type(tmp_path):
    url = tmp_path / "history.sqlite"
    _seed(url, 3, busbw=470.0)
    _seed(url, 5, image=A100, busbw=230.0, seed=50, nodes=["gpu05", "gpu06"])
    mixed = fleet.fleet_report(NODES + ["gpu05", "gpu06"], fleet.START + timedelta(days=2), seed=7,
                               images={"gpu05": A100, "gpu06": A100})
    with Store(url) as store:
        context = context_for_report(store, mixed)
    entries = _entries(context)
    assert entries[H100_KIND]["runs"] == 3 and entries[H100_KIND]["nodes"] == 4
    assert entries[A100_KIND]["runs"] == 5 and entries[A100_KIND]["nodes"] == 2
    # gpu05 and gpu06 measured 470 GB/s where their type's earlier runs measured 230: at the top.
    assert entries[A100_KIND]["better_than"] == 100.0


def test_too_few_earlier_runs_place_nothing_and_say_how_many(tmp_path):
    url = tmp_path / "history.sqlite"
    _seed(url, 2)
    context, warning = report_context(fleet.fleet_report(NODES, fleet.START + timedelta(days=1), seed=9), url)
    assert warning is None
    entry = _entries(context)[H100_KIND]
    assert entry["percentile"] is None and entry["runs"] == 2 and entry["recent"] == []
    assert context["min_runs"] == 3 and context["history_runs"] == 0


def test_an_empty_store_gives_every_figure_unplaced_and_no_warning(tmp_path):
    context, warning = report_context(fleet.fleet_report(NODES, fleet.START, seed=1), tmp_path / "none.sqlite")
    assert warning is None and not (tmp_path / "none.sqlite").exists()  # reading creates nothing
    assert context["figures"] and all(e["percentile"] is None and e["runs"] == 0 for e in context["figures"])


def test_a_store_that_cannot_be_read_is_a_warning_naming_it(tmp_path):
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database at all" * 50)
    context, warning = report_context(fleet.fleet_report(NODES, fleet.START, seed=1), broken)
    assert context is None and "broken.sqlite" in warning


def test_the_driver_change_of_a_node_since_its_previous_run_is_named(tmp_path):
    url = tmp_path / "history.sqlite"
    _seed(url, 3)
    new = fleet.fleet_report(NODES, fleet.START + timedelta(days=1), seed=5, images={"gpu03": fleet.IMAGE_B})
    context, _ = report_context(new, url)
    assert [c["node"] for c in context["image_changes"]] == ["gpu03"]
    change = context["image_changes"][0]
    assert change["changed"]["driver"] == [fleet.IMAGE_A["driver"], fleet.IMAGE_B["driver"]]
    assert change["before_started"].startswith((fleet.START + timedelta(hours=2)).strftime("%Y-%m-%dT%H"))


def test_this_run_is_not_counted_among_its_earlier_runs(tmp_path):
    url = tmp_path / "history.sqlite"
    _seed(url, 3)
    new = fleet.fleet_report(NODES, fleet.START + timedelta(days=1), seed=5)
    before, _ = report_context(new, url)
    assert record_run(new, url) is None
    after, _ = report_context(new, url)
    assert _entries(before)[H100_KIND]["runs"] == _entries(after)[H100_KIND]["runs"] == 3
