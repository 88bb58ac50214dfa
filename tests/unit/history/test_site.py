"""`preflight history site`: the fleet's readiness page, from a real SQLite store filled with runs whose
results the real checks judged (tests/unit/history/fleet.py): readiness now and over time, the runs,
the key figures, and what an image change did, with its interval; every text from the store escaped,
nothing fetched from elsewhere; the same figures as Prometheus gauges."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from preflight.cli.main import cli
from preflight.history import site, site_page
from preflight.history.stats import bootstrap_change
from preflight.history.store import Store
from tests.unit.history import fleet

NODES = fleet.node_names(6)
HOSTILE = 'gpu<script>alert("x")</script>'


def _fill(db: Path, before: int, after: int, *, slow_last: bool = True) -> None:
    with Store(db, create=True) as store:
        for i in range(before + after):
            options = {"image": fleet.IMAGE_B, "busbw_factor": 0.93} if i >= before else {}
            if slow_last and i == before + after - 1:
                options["slow"] = {"gpu03": 0.5}  # below the busbw floor: its node is not ready
            store.ingest(fleet.fleet_report(NODES, fleet.START + timedelta(days=i), seed=i, **options))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("site") / "history.sqlite"
    _fill(db, 12, 12)
    return db


@pytest.fixture(scope="module")
def gathered(store_path) -> site.Site:
    with Store(store_path, create=False) as store:
        return site.gather(store, site.Filters())


def test_readiness_is_the_share_of_nodes_ready_in_their_latest_run(gathered):
    r = gathered.readiness
    assert (r.ready, r.total, r.not_ready) == (5, 6, "gpu03")
    assert [share for _, share in r.series][-2:] == [1.0, 5 / 6]
    assert len(r.series) == 24
    assert gathered.verdicts == {"GO": 23, "NO-GO": 1}


def test_runs_are_listed_newest_first_with_their_verdict_headline_and_nodes(gathered):
    first, last = gathered.runs[0], gathered.runs[-1]
    assert first.started > last.started
    assert (first.verdict, first.ready, first.node_count, first.nodes) == ("NO-GO", 5, 6, "gpu[01-06]")
    assert first.headline and last.headline  # judged from the results on import, as the reports say it
    assert first.report is None  # no report.html on disk beside a synthesised run


def test_an_image_change_is_reported_with_its_interval_and_runs(gathered):
    [change] = gathered.changes
    assert change.title == "driver 550.54.15 -> 550.90.07, NCCL 2.20.5 -> 2.21.5"
    assert (change.runs_before, change.runs_after, change.node_count, change.judged) == (12, 12, 6, True)
    busbw = next(r for r in change.rows if r.label.endswith("busbw at 1 GiB"))
    assert busbw.verdict == "worse"
    assert busbw.low < -0.06 and busbw.high < 0 and busbw.low <= busbw.change <= busbw.high
    assert re.search(r"busbw at 1 GiB 7% lower \[\d+(\.\d)?%, \d+(\.\d)?%\], 12 runs before and 12 after$",
                     busbw.sentence), busbw.sentence
    assert busbw.sentence.startswith("driver 550.54.15 -> 550.90.07")
    copies = next(r for r in change.rows if "host-to-device" in r.label)
    assert copies.verdict == "within noise" and copies.low <= 0 <= copies.high


def test_too_few_runs_on_one_side_say_so_instead_of_judging(tmp_path):
    db = tmp_path / "h.sqlite"
    _fill(db, 6, 3, slow_last=False)
    with Store(db, create=False) as store:
        [change] = site.gather(store, site.Filters()).changes
    assert not change.judged and change.rows == []
    assert change.note == "too few runs to say: 6 before and 3 after (5 on each side are needed)"


def test_the_key_figures_carry_a_band_of_normal_from_the_go_runs(gathered):
    busbw = next(f for f in gathered.figures if f.label.endswith("busbw at 1 GiB"))
    assert len(busbw.points) == 24 and busbw.band_runs == 23 and busbw.direction == "higher"
    low, high = busbw.band
    assert low < high and 400 < low and high < 480


def test_filters_narrow_the_runs_and_the_readiness(store_path):
    with Store(store_path, create=False) as store:
        only = site.gather(store, site.Filters(nodes_in=["gpu01", "gpu02"], since=fleet.START + timedelta(days=20)))
    assert len(only.runs) == 4 and (only.readiness.ready, only.readiness.total) == (2, 2)
    assert only.changes == []  # the change happened before the window


def test_the_bootstrap_interval_covers_the_change_and_is_reproducible():
    before = [100.0 + (i % 5) for i in range(20)]
    after = [93.0 + (i % 5) for i in range(20)]
    low, high = bootstrap_change(before, after)
    assert low < -0.069 < high < 0 and (low, high) == bootstrap_change(before, after)
    assert bootstrap_change([1.0], after) == (None, None)


def test_the_page_is_self_contained_and_escapes_what_comes_from_the_store(tmp_path):
    db = tmp_path / "h.sqlite"
    with Store(db, create=True) as store:
        for i in range(2):
            report = fleet.fleet_report([HOSTILE, "gpu02"], fleet.START + timedelta(days=i), seed=i)
            for result in report["results"]:
                for m in result["measurements"]:
                    m["name"] = m["name"].replace("busbw", "busbw $x$ <b>")
            store.ingest(report)
        page = site_page.page(site.gather(store, site.Filters()), tmp_path, store.location)
    assert "<script" not in page and "<b>" not in page
    assert "gpu&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert "busbw $x$ &lt;b&gt;" in page  # drawn literally in the chart title, not as math
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from elsewhere
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_the_command_writes_the_page_and_the_gauges(tmp_path, store_path):
    out = tmp_path / "site"
    done = CliRunner().invoke(cli, ["history", "site", "--out", str(out), "--url", str(store_path)])
    assert done.exit_code == 0, done.output
    assert "83% of 6 nodes ready" in done.output
    page = (out / "index.html").read_text()
    assert "83% of the fleet is ready" in page and "driver 550.54.15 -&gt; 550.90.07" in page
    metrics = {(s.name, json.dumps(s.labels, sort_keys=True)): s.value
               for family in text_string_to_metric_families((out / "fleet.prom").read_text()) for s in family.samples}
    assert metrics[("preflight_fleet_ready_ratio", "{}")] == pytest.approx(5 / 6)
    assert metrics[("preflight_fleet_runs", '{"verdict": "NO-GO"}')] == 1
    assert metrics[("preflight_fleet_nodes", '{"state": "not_ready"}')] == 1


def test_bad_input_is_exit_2_naming_the_flag(tmp_path, store_path):
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    done = CliRunner().invoke(cli, ["history", "site", "--out", str(a_file), "--url", str(store_path)])
    assert done.exit_code == 2 and "--out" in done.output and a_file.read_text() == "x"
    done = CliRunner().invoke(cli, ["history", "site", "--out", str(tmp_path / "s"), "--url", str(store_path),
                                    "--since", "yesterday-ish"])
    assert done.exit_code == 2 and "--since" in done.output


def test_a_run_whose_report_is_on_disk_is_linked(tmp_path):
    run_dir = tmp_path / "runs" / "one"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps(fleet.fleet_report(NODES[:2], fleet.START, seed=1)))
    (run_dir / "report.html").write_text("<!DOCTYPE html><p>report</p>")
    db = tmp_path / "h.sqlite"
    runner = CliRunner()
    assert runner.invoke(cli, ["history", "import", str(run_dir / "results.json"), "--url", str(db)]).exit_code == 0
    done = runner.invoke(cli, ["history", "site", "--out", str(tmp_path / "site"), "--url", str(db)])
    assert done.exit_code == 0, done.output
    assert 'href="../runs/one/report.html"' in (tmp_path / "site" / "index.html").read_text()
    (run_dir / "report.html").unlink()
    runner.invoke(cli, ["history", "site", "--out", str(tmp_path / "site"), "--url", str(db)])
    assert "not on disk" in (tmp_path / "site" / "index.html").read_text()
