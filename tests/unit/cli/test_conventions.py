"""Command-line conventions: --json summaries, colour and NO_COLOR, durations, did-you-mean, --tag;
./preflight.toml is read, report files follow the umask, a run folder names its results, an empty
history is an answer, every duration option takes 2m."""

import json
import os
import stat

import click
import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.cli.options import Duration
from preflight.core.files import write_atomic


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("PREFLIGHT_HISTORY_URL", raising=False)
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


def test_the_working_directorys_preflight_toml_is_read_and_said_and_config_wins(runner, tmp_path):
    (tmp_path / "preflight.toml").write_text('[checks."node.environment"]\nno_such_parameter = 1\n')
    done = runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out"])
    assert done.exit_code == 2 and "preflight.toml:2" in done.stderr  # read: its bad key stops the run
    assert "reading ./preflight.toml" in done.stderr
    (tmp_path / "other.toml").write_text('[checks."node.environment"]\nanother_unknown = 1\n')
    done = runner.invoke(cli, ["run", "--checks", "node.environment", "--out", "out", "--config", "other.toml"])
    assert done.exit_code == 2 and "other.toml:2" in done.stderr and "reading ./preflight.toml" not in done.stderr


def test_report_files_are_written_with_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "report.md", "x")
        assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o644
        os.umask(0o077)
        write_atomic(tmp_path / "report.html", "x")
        assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_report_and_diff_take_a_run_folder(runner, tmp_path, sample_report):
    run = tmp_path / "run1"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(sample_report.to_dict()))
    shown = runner.invoke(cli, ["report", str(run), "--format", "md", "--out", "-"])
    assert shown.exit_code in (0, 1, 3), shown.output
    assert "preflight: **" in shown.stdout
    same = runner.invoke(cli, ["diff", str(run), str(run)])
    assert same.exit_code == 0, same.output
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = runner.invoke(cli, ["diff", str(empty), str(run)])
    assert refused.exit_code == 2 and "holds no results.json" in refused.output


def test_an_empty_history_is_an_answer_not_a_usage_error(runner, tmp_path):
    url = str(tmp_path / "none.sqlite")
    for args in (["history", "list"], ["history", "nodes"], ["history", "show"]):
        done = runner.invoke(cli, [*args, "--url", url])
        assert done.exit_code == 0, (args, done.output)
        assert "nothing has been recorded" in done.stderr
    listed = runner.invoke(cli, ["history", "list", "--url", url, "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []


def _options(group: click.Group, prefix: str = ""):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _options(command, f"{prefix}{name} ")
            continue
        for param in command.params:
            if isinstance(param, click.Option):
                yield f"{prefix}{name}", param


# Written into Prometheus rules as they are: Prometheus reads them (its durations take 2m too).
PROMETHEUS_DURATIONS = {"alerts --window", "alerts --for"}


def test_every_duration_option_takes_2m():
    timed = [(name, p) for name, p in _options(cli) if f"{name} {p.opts[0]}" not in PROMETHEUS_DURATIONS
             if any(word in (p.help or "").lower() for word in ("second", "duration", "how long"))
             or any(word in p.opts[0] for word in ("timeout", "budget", "interval", "ceiling"))]
    assert len(timed) >= 4  # run --timeout, healthcheck --budget, alerts --comm-latency-ceiling, --k8s-start-timeout
    for name, param in timed:
        assert isinstance(param.type, Duration), f"{name} {param.opts[0]} does not take a duration"
        assert param.type.convert("2m", None, None) == 120.0, f"{name} {param.opts[0]}"
