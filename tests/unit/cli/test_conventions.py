"""Command-line conventions: --json summaries, colour and NO_COLOR, durations, did-you-mean, --tag."""

import json

import click
import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.cli.options import Duration


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return CliRunner()


@pytest.mark.parametrize("text,seconds", [("300", 300), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5m", 90),
                                          ("250ms", 0.25), (45, 45)])
def test_durations(text, seconds):
    assert Duration().convert(text, None, None) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "m", "-5s", "0", "5m3"])
def test_bad_durations(text):
    with pytest.raises(click.BadParameter):
        Duration().convert(text, None, None)


def test_run_json_prints_only_the_summary_on_stdout(runner):
    done = runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out", "--timeout", "1m", "--json"])
    data = json.loads(done.stdout)
    assert data["exit_code"] == done.exit_code and data["verdict"] in ("GO", "NO-GO") and data["checks"] == 1
    assert set(data["findings"]) >= {"blocking", "warnings", "not_measured", "acknowledged"}
    assert data["output_dir"].endswith("out") and any(p.endswith("results.json") for p in data["reports"])
    assert "preflight:" in done.stderr  # the human summary went to stderr
    results = json.loads(open("out/results.json").read())
    assert results["results"][0]["check_id"] == "node.environment"


def test_the_verdict_line_is_coloured_on_a_terminal_unless_told_not_to(runner, monkeypatch):
    args = ["run", "--checks", "node.environment", "--out", "out"]
    coloured = runner.invoke(cli, args, color=True)
    line = next(l for l in coloured.stdout.splitlines() if "preflight: " in l and " - " in l)
    assert "\x1b[" in line
    plain = runner.invoke(cli, [*args, "--no-color"], color=True)
    assert "\x1b[" not in plain.stdout
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in runner.invoke(cli, args, color=True).stdout


def test_unknown_check_ids_get_a_did_you_mean(runner):
    done = runner.invoke(cli, ["run", "--checks", "gpu.visibilty", "--out", "out"])
    assert done.exit_code == 2 and "did you mean 'gpu.visibility'" in done.stderr
    done = runner.invoke(cli, ["explain", "node.enviroment"])
    assert done.exit_code == 2 and "did you mean 'node.environment'" in done.stderr


def test_tag_selects_checks(runner):
    done = runner.invoke(cli, ["run", "--tag", "os", "--out", "out", "--json"])
    data = json.loads(done.stdout)
    ran = {r["check_id"] for r in json.loads(open("out/results.json").read())["results"]}
    assert ran == {"node.environment"} and data["checks"] == 1
    bad = runner.invoke(cli, ["run", "--tag", "gpuu", "--out", "out2"])
    assert bad.exit_code == 2 and "did you mean 'gpu'" in bad.stderr


def test_report_help_describes_its_own_out(runner):
    text = runner.invoke(cli, ["report", "--help"]).stdout
    assert "beside RESULTS" in " ".join(text.split()) and "Never moves latest" in " ".join(text.split())
    assert "a new preflight-report/<UTC time>/ per run" not in " ".join(text.split())


def test_healthcheck_budget_takes_a_duration(runner):
    done = runner.invoke(cli, ["healthcheck", "--budget", "soon"])
    assert done.exit_code == 2 and "not a finite duration" in done.stderr
