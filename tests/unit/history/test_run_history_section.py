"""`preflight run` shows this run against the fleet's earlier runs of its node type in results.json and
report.html, names an image change since the node's previous run, and stays best effort: a store that
cannot be read leaves the section out with a warning and the same exit code. `preflight healthcheck
--history` records its run; without the flag it records nothing.

The earlier runs are this machine's own: one real run, recorded again through record_run at earlier
times with its /dev/shm figure scaled, so that where the real run stands among them is known."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.history import open_store, record_run
from preflight.history.queries import list_runs

CHECKS = "node.environment,versions.pinned"
SHM = "/dev/shm size"
FACTORS = (0.5, 0.6, 0.7, 1.4, 1.5)  # the real figure is above 3 of these 5 earlier runs


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    result = CliRunner().invoke(cli, ["run", "--checks", CHECKS, "--level", "quick", "--out", str(out),
                                      "--format", "json,html,md", *extra])
    return result, out


def _earlier(report, days, factor, driver=None):
    """The report as if run `days` before, with its /dev/shm figure times `factor`."""
    earlier = copy.deepcopy(report)
    for key in ("started_at", "finished_at"):
        when = datetime.fromisoformat(earlier[key].replace("Z", "+00:00"))
        earlier[key] = (when - timedelta(days=days)).isoformat()
    for result in earlier["results"]:
        for m in result["measurements"]:
            if m["name"] == SHM:
                m["value"] *= factor
        if result["check_id"] == "versions.pinned" and driver:
            result["facts"]["stack"]["driver"] = driver
    earlier.pop("history", None)
    return earlier


def _seeded(tmp_path, monkeypatch, driver=None):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    url = tmp_path / "fleet.sqlite"
    monkeypatch.setenv("PREFLIGHT_HISTORY_URL", str(url))
    reference, out = _run(tmp_path, "reference", "--no-history")
    assert reference.exit_code in (0, 1), reference.output
    real = json.loads((out / "results.json").read_text())
    for i, factor in enumerate(FACTORS):
        assert record_run(_earlier(real, len(FACTORS) - i, factor, driver), url) is None
    return reference, url


def _stored_runs(url) -> int:
    store = open_store(url)
    try:
        return len(list_runs(store))
    finally:
        store.close()


def test_a_run_after_earlier_ones_shows_its_percentile_in_results_and_report(tmp_path, monkeypatch):
    reference, url = _seeded(tmp_path, monkeypatch)
    result, out = _run(tmp_path, "now")
    assert result.exit_code == reference.exit_code, result.output
    history = json.loads((out / "results.json").read_text())["history"]
    shm = next(e for e in history["figures"] if e["name"] == SHM)
    assert shm["runs"] == len(FACTORS) and shm["better_than"] == 60.0 and shm["kind"] == "no GPU"
    assert len(shm["recent"]) == len(FACTORS)
    page = (out / "report.html").read_text()
    assert '<section id="history">' in page
    assert "Better than 60% of 5 earlier runs of this node type" in page
    assert "earlier runs of the same node type (without GPUs)" in page
    assert "**Against fleet history:**" in (out / "report.md").read_text()
    assert _stored_runs(url) == len(FACTORS) + 1  # and the run itself recorded after its reports


def test_a_driver_change_since_the_previous_run_is_named(tmp_path, monkeypatch):
    reference, _ = _seeded(tmp_path, monkeypatch, driver="535.104.05")
    result, out = _run(tmp_path, "now")
    assert result.exit_code == reference.exit_code
    history = json.loads((out / "results.json").read_text())["history"]
    [change] = history["image_changes"]
    assert change["changed"]["driver"][0] == "535.104.05"
    assert "driver 535.104.05 → " in (out / "report.html").read_text()


def test_too_few_earlier_runs_say_so_instead_of_a_percentile(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PREFLIGHT_HISTORY_URL", str(tmp_path / "fleet.sqlite"))
    first, out = _run(tmp_path, "first")
    assert first.exit_code in (0, 1), first.output
    history = json.loads((out / "results.json").read_text())["history"]
    assert history["figures"] and all(e["percentile"] is None for e in history["figures"])
    assert "have no earlier run of this node type in fleet history yet" in (out / "report.html").read_text()


def test_a_store_that_cannot_be_read_leaves_the_section_out_and_the_verdict_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    reference, _ = _run(tmp_path, "reference", "--no-history")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"this is not a database" * 100)
    monkeypatch.setenv("PREFLIGHT_HISTORY_URL", str(broken))
    result, out = _run(tmp_path, "now")
    assert result.exit_code == reference.exit_code
    assert "left out of the report" in result.output and "broken.sqlite" in result.output
    assert "history" not in json.loads((out / "results.json").read_text())
    assert 'id="history"' not in (out / "report.html").read_text()


def test_no_history_reads_nothing(tmp_path, monkeypatch):
    _seeded(tmp_path, monkeypatch)
    _, out = _run(tmp_path, "off", "--no-history")
    assert "history" not in json.loads((out / "results.json").read_text())


def test_healthcheck_records_its_run_only_with_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PREFLIGHT_HISTORY_URL", raising=False)
    default = tmp_path / "xdg" / "preflight" / "history.sqlite"
    plain = CliRunner().invoke(cli, ["healthcheck", "--checks", "node.environment"])
    assert plain.exit_code in (0, 1), plain.output
    assert not default.exists()
    recorded = CliRunner().invoke(cli, ["healthcheck", "--checks", "node.environment", "--history"])
    assert recorded.exit_code == plain.exit_code, recorded.output
    store = open_store(default)
    try:
        [run] = list_runs(store)
    finally:
        store.close()
    assert run.level == "quick"  # the healthcheck's run, recorded once


def test_healthcheck_history_to_a_broken_store_is_a_warning_not_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"this is not a database" * 100)
    monkeypatch.setenv("PREFLIGHT_HISTORY_URL", str(broken))
    plain = CliRunner().invoke(cli, ["healthcheck", "--checks", "node.environment"])
    result = CliRunner().invoke(cli, ["healthcheck", "--checks", "node.environment", "--history"])
    assert result.exit_code == plain.exit_code
    assert "warning" in result.output and "broken.sqlite" in result.output
