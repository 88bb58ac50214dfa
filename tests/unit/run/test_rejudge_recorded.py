"""`report --rejudge` starts from everything the run was judged with; options given to it go on top."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.config import Config
from preflight.core.registry import discover
from preflight.run.judging import record_judging
from tests.unit.run.test_rejudge import CHECKS, NODE, load, recorded_run, status_of

STRICT = ["collectives.local.min_busbw_gbps=600", "collectives.local.busbw_size_bytes=17179869184"]


def run_with(tmp_path: Path, settings: list[str], **fields) -> Path:
    """A run recorded as `preflight run --set ...` records it: its judgement made with those values."""
    from preflight.core import config as config_mod
    from preflight.run.rejudge import rejudge_report

    config = Config()
    config_mod.apply_cli_settings(config, settings, CHECKS)
    for key, value in fields.items():
        setattr(config, key, value)
    report = recorded_run()
    report.nodes[0].slots = None  # no hosts-file slots: the expectation, not the hosts file, says how many GPUs
    report.judged_with = record_judging(config, CHECKS)
    report.expect, report.fail_on = config.expect.to_dict(), config.fail_on
    judged = rejudge_report(report, discover(), config, source="the run", how={})  # what the run itself decided
    judged.rejudged = None
    path = tmp_path / "run" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(judged.to_dict()))
    return path


def rejudge(results: Path, *options: str) -> tuple[int, dict]:
    out = results.parent.parent / "again"
    done = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--format", "json", "--out", str(out),
                                    *options])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return done.exit_code, load(out / "results.json")


def test_a_no_go_run_with_set_thresholds_stays_no_go_when_rejudged_without_options(tmp_path):
    results = run_with(tmp_path, STRICT)
    assert status_of(load(results), "collectives.local") == "FAIL"
    code, after = rejudge(results)
    assert code == 1
    assert status_of(after, "collectives.local") == "FAIL"  # the run's --set threshold still holds
    assert after["rejudged"]["changed"] == []
    assert after["rejudged"]["sources"]["collectives.local.min_busbw_gbps"] == "the run (--set)"


def test_options_given_to_rejudge_override_what_the_run_recorded_and_say_so(tmp_path):
    results = run_with(tmp_path, STRICT)
    code, after = rejudge(results, "--set", "collectives.local.min_busbw_gbps=100")
    assert status_of(after, "collectives.local") == "PASS"
    sources = after["rejudged"]["sources"]
    assert sources["collectives.local.min_busbw_gbps"] == "--set"
    assert sources["collectives.local.busbw_size_bytes"] == "the run (--set)"
    assert {"check_id": "collectives.local", "node": NODE, "was": "FAIL", "now": "PASS"} in after["rejudged"]["changed"]


def test_the_runs_expectations_and_fail_on_are_kept(tmp_path):
    results = run_with(tmp_path, ["expect.gpus_per_node=4"], fail_on="warn")
    before = load(results)
    assert status_of(before, "gpu.visibility") == "FAIL"  # 8 GPUs seen, 4 expected
    code, after = rejudge(results)
    assert status_of(after, "gpu.visibility") == "FAIL" and after["expect"]["gpus_per_node"] == 4
    assert after["fail_on"] == "warn" and code == 1
    assert after["rejudged"]["sources"]["expect.gpus_per_node"] == "the run (--set)"


def test_a_profile_given_to_rejudge_replaces_the_runs_profile_values_and_keeps_its_set(tmp_path):
    results = run_with(tmp_path, ["collectives.local.min_busbw_gbps=600"])
    code, after = rejudge(results, "--profile", "h100-8x")
    sources = after["rejudged"]["sources"]
    assert sources["collectives.local.busbw_size_bytes"] == "--profile h100-8x"
    assert sources["collectives.local.min_busbw_gbps"] == "--profile h100-8x"  # the option is on top
    assert status_of(after, "collectives.local") == "PASS"


def test_an_older_report_without_the_record_is_rejudged_with_what_it_kept_and_says_so(tmp_path):
    report = recorded_run()
    report.nodes[0].slots = None
    report.expect = {"gpus_per_node": 4, "nodes": None, "frameworks": None}
    path = tmp_path / "old" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(report.to_dict()))
    code, after = rejudge(path)
    assert status_of(after, "gpu.visibility") == "FAIL"  # its recorded expectation is kept
    assert "note" in after["rejudged"]["sources"]


def test_a_real_run_with_set_rejudges_to_the_same_findings(tmp_path, monkeypatch):
    """`preflight run --set ...` then `report --rejudge` with no options: the same statuses and findings."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(cli, ["run", "--checks", "node.environment", "--set",
                                "node.environment.min_free_disk_gib=1000000", "--format", "json", "--out", "run"])
    assert first.exit_code in (0, 1, 3), first.output
    before = load(tmp_path / "run" / "results.json")
    assert "node.environment.disk-low" in {f["id"] for f in before["results"][0]["findings"]}
    assert before["judged_with"]["sources"]["node.environment.min_free_disk_gib"] == "--set"
    again = runner.invoke(cli, ["report", "run/results.json", "--rejudge", "--format", "json", "--out", "again"])
    after = load(tmp_path / "again" / "results.json")
    assert again.exit_code == first.exit_code
    assert [f["id"] for f in after["results"][0]["findings"]] == [f["id"] for f in before["results"][0]["findings"]]
    assert after["rejudged"]["changed"] == []
