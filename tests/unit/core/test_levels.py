"""Run levels: each check's declarations, their precedence, the quick budget, and what reports say."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from preflight.core import config as config_mod
from preflight.core.config_init import render_init
from preflight.core import levels
from preflight.core.results_file import SCHEMA_PATH
from preflight.core.check import Check
from preflight.cli.main import cli
from preflight.core.model import CLUSTER_NODE, Finding, Scope, Status
from preflight.core.registry import discover
from preflight.engine.runner import NodeTarget, RunPlan, Runner
from preflight.transport import LocalTransport
from preflight.core.verdict import Verdict, decide
from tests.conftest import make_report, make_result

CHECKS = discover().checks


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_every_level_declaration_is_valid_for_its_check(check_id):
    check = CHECKS[check_id]
    assert set(check.levels) <= set(levels.LEVELS), check.levels
    for level, declared in check.levels.items():
        reason = declared.get(levels.SKIP_KEY)
        assert reason is None or (isinstance(reason, str) and len(reason) > 20)
        if reason:
            assert set(declared) == {levels.SKIP_KEY}, "a skipped check has nothing else to change"
            continue

        def fail(message, key):
            raise AssertionError(f"{check_id} level {level}: {key}: {message}")

        config = config_mod.Config()
        config_mod._apply_check_overrides(config, check, declared, f"{check_id}.{level}", fail)
        # The parameters build, and every override reaches them.
        config.level = level
        params = config.params_for(check)
        for key, value in levels.overrides(check, level).items():
            assert getattr(params, key) == value


def test_quick_fits_its_budget_per_node_by_design():
    """Every node check that runs at quick declares a quick timeout; together they fit 30 s."""
    quick = config_mod.Config(level="quick")
    running = [c for c in CHECKS.values() if c.scope is Scope.NODE and not quick.skipped_at_level(c)]
    assert {c.id for c in running} >= {"node.environment", "versions.pinned", "gpu.visibility"}
    for check in running:
        assert levels.timeout(check, "quick") is not None, f"{check.id} runs at quick without a quick timeout"
    assert sum(quick.timeout_for(c) for c in running) <= levels.QUICK_BUDGET_S == levels.BUDGET_S["quick"] == 30


def test_slow_checks_are_skipped_at_quick_with_a_reason():
    quick = config_mod.Config(level="quick")
    for check_id in ("collectives.local", "scaling.multi_gpu", "canary.training", "checkpoint.roundtrip",
                     "dataloader.throughput", "collectives.cluster", "scaling.multi_node"):
        assert quick.skipped_at_level(CHECKS[check_id])
    standard = config_mod.Config()
    assert not any(standard.skipped_at_level(c) for c in CHECKS.values())


def test_thorough_measures_more():
    thorough = config_mod.Config(level="thorough")
    standard = config_mod.Config()
    net = CHECKS["net.bandwidth"]
    assert thorough.params_for(net).pattern == "full" and standard.params_for(net).pattern == "ring"
    assert thorough.params_for(net).repeats > standard.params_for(net).repeats
    ckpt = CHECKS["checkpoint.roundtrip"]
    assert thorough.params_for(ckpt).size_mb > standard.params_for(ckpt).size_mb
    assert thorough.timeout_for(ckpt) > standard.timeout_for(ckpt)
    assert thorough.params_for(CHECKS["collectives.local"]).iters > standard.params_for(CHECKS["collectives.local"]).iters


@dataclasses.dataclass
class _Params:
    a: int = 1
    b: int = 1
    c: int = 1
    d: int = 1


class _Leveled(Check):
    id = "demo.leveled"
    title = "demo"
    Params = _Params
    timeout_s = 100.0
    levels = {"quick": {"a": 2, "b": 2, "c": 2, "d": 2, "timeout": 7}}


def test_precedence_defaults_level_profile_file_set(tmp_path):
    checks = {"demo.leveled": _Leveled}
    profile = tmp_path / "p.toml"
    profile.write_text('[checks."demo.leveled"]\nb = 3\nc = 3\nd = 3\n')
    file = tmp_path / "preflight.toml"
    file.write_text('[run]\nlevel = "quick"\n[checks."demo.leveled"]\nc = 4\nd = 4\n')
    config = config_mod.load(file, checks, profile=str(profile))
    config_mod.apply_cli_settings(config, ["demo.leveled.d=5"], checks)
    assert config.level == "quick"
    params = config.params_for(_Leveled)
    assert (params.a, params.b, params.c, params.d) == (2, 3, 4, 5)
    assert config.timeout_for(_Leveled) == 7  # the level's timeout over the check's
    config.default_timeout = 50  # [run] timeout or --timeout
    assert config.timeout_for(_Leveled) == 50
    assert config_mod.Config().params_for(_Leveled).a == 1  # standard: the defaults


def test_run_level_in_the_file_is_validated(tmp_path):
    with pytest.raises(config_mod.ConfigError, match="quick, standard, thorough"):
        config_mod.parse('[run]\nlevel = "fast"\n', CHECKS)
    assert config_mod.parse('[run]\nlevel = "thorough"\n', CHECKS).level == "thorough"
    assert 'level = "standard"' in render_init(CHECKS)


def test_level_overrides_reach_the_agent_job_and_skips_are_recorded(tmp_path, monkeypatch):
    """The runner sends each check the level's parameters and timeout, and SKIPs what the level leaves out."""
    chosen = [CHECKS[i] for i in ("node.environment", "versions.pinned", "collectives.local", "scaling.multi_node")]
    plan = RunPlan(checks=chosen, config=config_mod.Config(level="quick"), output_dir=tmp_path,
                   nodes=[NodeTarget(LocalTransport())])
    runner = Runner(plan)
    jobs = []
    monkeypatch.setattr(Runner, "_run_node_checks", lambda self: jobs.append(
        [{"id": c.id, "timeout_s": self.plan.config.timeout_for(c), "params": self.plan.config.overrides_for(c)}
         for c in self.plan.node_checks]))
    report = runner.run()
    assert jobs == [[{"id": "node.environment", "timeout_s": 5.0, "params": {}},
                     {"id": "versions.pinned", "timeout_s": 5.0, "params": {"probe_builds": False}}]]
    assert report.level == "quick" and report.level_budget_s == 30
    skipped = {(r.check_id, r.node): r for r in report.results}
    node = plan.nodes[0].name
    assert set(skipped) == {("collectives.local", node), ("scaling.multi_node", CLUSTER_NODE)}
    for result in skipped.values():
        assert result.status is Status.SKIP
        assert [f.id for f in result.findings] == [f"{result.check_id}.skipped-at-level"]
    header = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])["preflight_plan"]
    assert header["level"] == "quick"


def test_a_skip_at_level_never_blocks():
    skip = make_result("scaling.multi_gpu", "gpu01", Status.SKIP, "not run at --level quick: slow",
                       findings=[Finding("scaling.multi_gpu" + levels.SKIPPED_AT_LEVEL, Status.SKIP, "slow")])
    report = make_report([make_result("gpu.visibility", "gpu01"), skip], expected=["scaling.multi_gpu"],
                         profile="h100-8x", needs={"scaling.multi_gpu": ["gpu", "framework"]}, level="quick")
    assert decide(report).verdict is Verdict.GO


def test_reports_show_the_level_and_budget(sample_report):
    from preflight.reporters import html, markdown, terminal

    sample_report.level, sample_report.level_budget_s = "quick", 30.0
    for render in (markdown.render, html.render, terminal.render):
        text = render(sample_report)
        assert "quick: probes and small measurements only" in text and "at most 30 s of checks per node" in text


def test_the_schema_accepts_the_level_fields(sample_report):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SCHEMA_PATH).read_text())
    sample_report.level, sample_report.level_budget_s, sample_report.stopped_early = "thorough", 3600.0, "x"
    jsonschema.validate(sample_report.to_dict(), schema)


def test_cheap_checks_run_first_on_every_node():
    ordered = [c.id for c in discover().ordered()]
    node_ids = [i for i in ordered if CHECKS[i].scope is Scope.NODE]
    assert set(node_ids[:3]) == {"node.environment", "versions.pinned", "gpu.visibility"}


def test_unknown_level_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(cli, ["run", "--level", "fast", "--out", str(tmp_path)])
    assert result.exit_code == 2


def test_the_level_line_says_every_check_at_its_defaults_only_when_nothing_was_set():
    from preflight.core.levels import level_text
    from tests.conftest import make_report, make_result

    report = make_report([make_result()])
    assert level_text(report).startswith("standard: every check at its defaults;")
    report.judged_with = {"settings": ["net.bandwidth.min_gbps=100"], "config_file": "preflight.toml", "profile": ""}
    text = level_text(report)
    assert "every check at its defaults" not in text
    assert text.startswith("standard: each check at its defaults, except what --set and preflight.toml set;")
    report.judged_with = {"settings": [], "config_file": "", "profile": "h100-8x"}
    assert "except what the profile h100-8x set" in level_text(report)
