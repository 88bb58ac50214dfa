"""NaN and infinity are usage errors on every number option (exit 2 naming the flag), never a value."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.cli.options import Duration, FiniteFloat
from preflight.integrations import alerts


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return CliRunner()


def _float_options(group: click.Group):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from ((f"{name} {sub}", option) for sub, option in _float_options(command))
            continue
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, (click.types.FloatParamType,
                                                                           click.FloatRange, Duration)):
                yield name, param


def test_every_float_option_of_every_command_is_finite():
    found = list(_float_options(cli))
    assert {f"{name} {option.opts[0]}" for name, option in found} >= {
        "run --timeout", "run --baseline-tolerance", "diff --tolerance", "healthcheck --budget",
        "alerts --gpu-util-floor", "alerts --comm-latency-ceiling"}
    # A duration option (90s, 5m) takes seconds too, and refuses nan and inf the same way.
    plain = [f"{name} {option.opts[0]}" for name, option in found
             if not isinstance(option.type, (FiniteFloat, Duration))]
    assert not plain, f"float options that accept nan/inf: {plain}"


@pytest.mark.parametrize("args, flag", [
    (["run", "--timeout", "nan"], "--timeout"),
    (["run", "--timeout", "inf"], "--timeout"),
    (["run", "--baseline-tolerance", "inf", "--baseline", "old.json"], "--baseline-tolerance"),
    (["run", "--baseline-tolerance", "nan", "--baseline", "old.json"], "--baseline-tolerance"),
    (["diff", "old.json", "new.json", "--tolerance", "inf"], "--tolerance"),
    (["diff", "old.json", "new.json", "--tolerance", "NaN"], "--tolerance"),
    (["healthcheck", "--budget", "nan"], "--budget"),
    (["healthcheck", "--budget", "inf"], "--budget"),
    (["alerts", "--gpu-util-floor", "nan"], "--gpu-util-floor"),
    (["alerts", "--comm-latency-ceiling", "inf"], "--comm-latency-ceiling"),
    (["alerts", "--comm-latency-ceiling", "-inf"], "--comm-latency-ceiling"),
])
def test_nan_and_inf_are_exit_2_naming_the_flag(runner, tmp_path, sample_report, args, flag):
    for name in ("old.json", "new.json"):
        (tmp_path / name).write_text(json.dumps(sample_report.to_dict()))
    result = runner.invoke(cli, [*args, *(["--out", "out"] if args[0] == "run" else [])])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "finite" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out").exists()


def test_finite_numbers_still_work_with_ranges():
    assert FiniteFloat().convert("2.5", None, None) == 2.5
    assert FiniteFloat(min=1).convert("45", None, None) == 45.0
    with pytest.raises(click.BadParameter):
        FiniteFloat(min=1).convert("0.5", None, None)


def test_a_non_finite_canary_figure_sets_no_alert_threshold():
    report = {"results": [{"check_id": "canary.training", "node": "gpu01", "measurements": [
        {"name": "GPU utilisation (least busy GPU)", "value": float("nan"), "unit": "%"},
        {"name": "all-reduce latency per bucket p99", "value": float("inf"), "unit": "ms"}]}]}
    thresholds, _notes = alerts.thresholds_from_results(report, alerts.Thresholds())
    assert thresholds == alerts.Thresholds()
    with pytest.raises(ValueError, match="--comm-latency-ceiling"):
        alerts.build(ceiling_s=float("inf"))
