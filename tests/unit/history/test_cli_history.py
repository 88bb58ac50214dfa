"""`preflight history ...` and `preflight baseline learn` through click, on results.json files."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from preflight.cli.history import register
from tests.unit.history import scenario


@click.group()
def cli() -> None:
    """Stands in for the main command line, which registers the same groups."""


register(cli)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A directory of results.json files (one per run) imported into a store; returns (dir, store path)."""
    root = tmp_path_factory.mktemp("runs")
    for i, report in enumerate(scenario.runs()):
        (root / f"run{i:02d}").mkdir()
        (root / f"run{i:02d}" / "results.json").write_text(json.dumps(report))
    db = root / "history.sqlite"
    result = invoke("history", "import", str(root), "--url", str(db))
    assert result.exit_code == 0, result.output
    assert result.output.count(": run ") == len(scenario.runs())
    return root, db


def test_import_twice_keeps_one_copy(recorded):
    root, db = recorded
    again = invoke("history", "import", str(root / "run00"), "--url", str(db))
    assert again.exit_code == 0 and "already recorded" in again.output


def test_list_filters_by_verdict_and_image(recorded):
    _, db = recorded
    everything = json.loads(invoke("history", "list", "--url", str(db), "--json").output)
    assert len(everything) == len(scenario.runs())
    nogo = json.loads(invoke("history", "list", "--url", str(db), "--verdict", "no-go", "--json").output)
    assert [r["verdict"] for r in nogo] == ["NO-GO"]
    on_b = invoke("history", "list", "--url", str(db), "--image", "nccl=2.21.5")
    assert on_b.exit_code == 0 and on_b.output.split("images (`")[0].count("\n") == scenario.B_RUNS + 1


def test_show_names_the_outlier(recorded):
    _, db = recorded
    shown = json.loads(invoke("history", "show", "latest", "--url", str(db), "--json").output)
    assert shown["nodes"] == "gpu[01-16]"
    assert {f["node"] for f in shown["findings"] if f["id"] == "fleet.outlier"} == {"gpu07"}


def test_trend_writes_an_svg_chart(recorded, tmp_path):
    _, db = recorded
    page = tmp_path / "trend.html"
    result = invoke("history", "trend", "--url", str(db), "--figure", "busbw at 1 GiB", "--html", str(page))
    assert result.exit_code == 0
    html = page.read_text()
    assert "<svg" in html and "</svg>" in html and "busbw at 1 GiB" in html
    assert "http" not in html  # inline SVG needs no namespace URL; the page links nowhere


def test_compare_reports_the_image_that_costs_bandwidth_and_exits_1(recorded):
    _, db = recorded
    result = invoke("history", "compare", "driver=550.54.15", "driver=550.90.07", "--url", str(db), "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    worse = {f["key"]["name"] for f in data["figures"] if f["verdict"] == "worse"}
    assert scenario.BUSBW_FIGURE in worse
    assert all(f["test"].startswith("Mann-Whitney U") for f in data["figures"])
    same = invoke("history", "compare", "driver=550.54.15", "driver=550.90.07", "--url", str(db),
                  "--check", "node.environment")
    assert same.exit_code == 0 and "no figure changed beyond noise" in same.output


def test_nodes_lemons(recorded):
    _, db = recorded
    result = invoke("history", "nodes", "--url", str(db), "--lemons", "-k", "3", "-n", "5", "--json")
    assert [n["name"] for n in json.loads(result.output)] == ["gpu07"]
    assert invoke("history", "nodes", "--url", str(db), "--lemons", "-k", "6", "-n", "5").exit_code == 2


def test_baseline_learn_writes_a_profile(recorded, tmp_path):
    _, db = recorded
    out = tmp_path / "learned.toml"
    result = invoke("baseline", "learn", "--url", str(db), "--image", "driver=550.54.15", "--out", str(out))
    assert result.exit_code == 0
    assert '[checks."collectives.local"]' in out.read_text()
    refused = invoke("baseline", "learn", "--url", str(db), "--since", "2030-01-01")
    assert refused.exit_code == 2 and "--min-runs" in refused.output


@pytest.mark.parametrize("args, named", [
    (["history", "list", "--since", "last tuesday"], "--since"),
    (["history", "list", "--image", "colour=blue"], "colour"),
    (["history", "trend", "--figure", "no such figure"], "no such figure"),
    (["history", "trend"], "--figure"),
    (["history", "show", "999"], "999"),
    (["history", "list", "--nodes", "gpu[3-1]"], "--nodes"),
])
def test_bad_input_exits_2_naming_it(recorded, args, named):
    _, db = recorded
    result = invoke(*args, "--url", str(db))
    assert result.exit_code == 2
    assert named in result.output


def test_a_results_file_given_as_the_store_is_named(recorded):
    root, _ = recorded
    wrong = root / "run00" / "results.json"
    result = invoke("history", "list", "--url", str(wrong))
    assert result.exit_code == 2 and str(wrong) in result.output


def test_import_of_a_file_that_is_no_report_records_nothing(recorded, tmp_path):
    root, _ = recorded
    bad = tmp_path / "results.json"
    bad.write_text('{"hello": "world"}')
    db = tmp_path / "fresh.sqlite"
    result = invoke("history", "import", str(root / "run00" / "results.json"), str(bad), "--url", str(db))
    assert result.exit_code == 2 and str(bad) in result.output
    assert not db.exists()


def test_a_read_only_store_can_be_listed_and_shown(recorded):
    """A store this user may only read (here: a copy in a folder and file without write permission,
    read by an unprivileged user when the tests run as root) is opened read-only."""
    import os
    import shutil
    import stat
    import subprocess
    import sys
    import tempfile

    _, db = recorded
    folder = tempfile.mkdtemp(prefix="preflight-ro-")
    try:
        copy = os.path.join(folder, "history.sqlite")
        shutil.copy(db, copy)
        os.chmod(copy, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.chmod(folder, 0o555)
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        if as_user and shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is needed to read as another user")
        for args in (["history", "list"], ["history", "show", "latest"]):
            done = subprocess.run([*as_user, sys.executable, "-m", "preflight", *args, "--url", copy],
                                  capture_output=True, text=True, timeout=120, cwd="/")
            assert done.returncode == 0, done.stderr
            assert "run " in done.stdout or "GO" in done.stdout
        assert sorted(os.listdir(folder)) == ["history.sqlite"]  # nothing written beside it
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


def test_history_show_neutralises_control_characters_in_what_was_recorded(tmp_path):
    from preflight.core.model import Status
    from preflight.history import record_run
    from tests.conftest import make_report, make_result

    node = "n1\x1b[2J\r## preflight: GO\u202e"
    report = make_report([make_result("node.environment", node, Status.FAIL, "bad")], nodes=[node],
                         command="preflight run \x1b]0;title\x07 --x")
    db = tmp_path / "h.sqlite"
    assert record_run(report.to_dict(), db) is None
    shown = invoke("history", "show", "latest", "--url", str(db))
    assert shown.exit_code == 0, shown.output
    assert not any(c in shown.output for c in "\x1b\r\x07\u202e")
    listed = invoke("history", "list", "--url", str(db))
    assert not any(c in listed.output for c in "\x1b\r\x07\u202e")


def test_what_history_list_shows_of_an_image_is_what_compare_takes(recorded):
    """Both forms `history list` prints for an image, its digest prefix and its FIELD=VALUE pairs,
    name the same image to `history compare`."""
    _, db = recorded
    listed = invoke("history", "list", "--url", str(db)).output
    legend = listed[listed.index("images (`preflight history compare A B`"):].splitlines()[1:]
    forms = [line.split(None, 1) for line in legend if line.startswith("  ")]
    assert len(forms) >= 2 and all("=" in pairs for _, pairs in forms), listed
    (prefix_a, pairs_a), (prefix_b, pairs_b) = forms[:2]
    by_prefix = invoke("history", "compare", prefix_a, prefix_b, "--url", str(db), "--json")
    by_fields = invoke("history", "compare", pairs_a, pairs_b, "--url", str(db), "--json")
    assert by_prefix.exit_code in (0, 1) and by_fields.exit_code == by_prefix.exit_code, by_prefix.output
    assert json.loads(by_prefix.output)["figures"] == json.loads(by_fields.output)["figures"]
