"""The rules of a hook run (preflight.run.hook), judged without running anything: what runs, in how
much time, and what drains."""

from __future__ import annotations

import pytest

from preflight.run import hook as hc
from preflight.run.request import RunProblem as UsageProblem
from preflight.core import config as config_mod
from preflight.core.model import Finding, Status
from preflight.core.registry import LoadError, Registry, discover
from tests.conftest import make_report, make_result

REGISTRY = discover()


def quick_config():
    config = config_mod.Config()
    config.level = "quick"
    return config


def hook_checks():
    return REGISTRY.ordered(hc.hook_check_ids(REGISTRY.checks))


def test_every_check_gets_its_quick_time_when_the_budget_holds_it():
    timeouts, left_out = hc.allot(hook_checks(), quick_config(), hc.DEFAULT_BUDGET_S)
    assert not left_out
    assert timeouts == {c.id: hc.floor_s(c) for c in hook_checks()}
    assert sum(timeouts.values()) <= hc.DEFAULT_BUDGET_S


def test_a_check_the_budget_cannot_give_its_floor_does_not_run_and_says_why():
    floors = {c.id: hc.floor_s(c) for c in hook_checks()}
    budget = floors["gpu.visibility"] - 1  # enough for the others, not for gpu.visibility
    timeouts, left_out = hc.allot(hook_checks(), quick_config(), budget)
    assert "gpu.visibility" in left_out and "gpu.visibility" not in timeouts
    assert "--budget" in left_out["gpu.visibility"]
    assert set(timeouts) == {"node.environment", "versions.pinned"}
    assert sum(timeouts.values()) <= budget and all(t >= floors[cid] for cid, t in timeouts.items())


def test_a_shorter_timeout_of_the_users_own_is_honoured():
    config = quick_config()
    config.timeouts["gpu.visibility"] = 3.0
    timeouts, left_out = hc.allot(hook_checks(), config, hc.DEFAULT_BUDGET_S)
    assert timeouts["gpu.visibility"] == 3.0 and not left_out


def test_checks_and_skip_select_node_checks_only():
    assert hc.select(REGISTRY, "node.environment", None) == (["node.environment"], set())
    ids, skipped = hc.select(REGISTRY, None, "versions.pinned")
    assert "versions.pinned" not in ids and "gpu.visibility" in ids and skipped == {"versions.pinned"}
    with pytest.raises(UsageProblem, match="cluster check"):
        hc.select(REGISTRY, "versions.consistency", None)
    with pytest.raises(UsageProblem, match="unknown check id"):
        hc.select(REGISTRY, "gpu.visiblity", None)


def _with_errors(*names: str) -> Registry:
    registry = Registry(checks=dict(REGISTRY.checks), origin=dict(REGISTRY.origin))
    registry.errors = [LoadError(f"{n} = acme_{i}:Check", "acme-checks 0.3", "ImportError: boom")
                       for i, n in enumerate(names)]
    return registry


def test_load_errors_of_checks_it_might_run_count():
    registry = _with_errors("acme.unrelated", "versions.acme", "gpu.acme")
    # A plugin that did not load cannot say whether it is a hook check: without --checks every one
    # counts (INCOMPLETE, which drains nothing); with --checks, those asked for; --skip leaves one out.
    registry.errors.append(LoadError("gpu.visibility = preflight_checks.gpu.visibility:GpuVisibility",
                                     "preflight-cluster 0.1.0", "ImportError: boom"))
    assert [e["entry_point"].split(" =")[0] for e in hc.load_errors_of(registry, None, set())] == [
        "acme.unrelated", "versions.acme", "gpu.acme", "gpu.visibility"]
    assert [e["entry_point"].split(" =")[0] for e in hc.load_errors_of(
        registry, None, {"gpu.visibility", "acme.unrelated", "versions.acme"})] == ["gpu.acme"]
    assert [e["entry_point"].split(" =")[0] for e in hc.load_errors_of(registry, "gpu.acme", set())] == ["gpu.acme"]
    with pytest.raises(UsageProblem, match="its plugin failed to load"):
        hc.select(registry, "gpu.acme", None)


def test_only_a_measured_blocking_finding_of_this_node_drains():
    failed = make_result("node.environment", "n1", Status.FAIL, "shm small",
                         findings=[Finding("node.environment.shm-small", Status.FAIL, "shm small")])
    errored = make_result("gpu.visibility", "n1", Status.ERROR, "the torch probe would get 0 s")
    assert hc.drain_worthy(make_report([errored]), "n1") == []
    assert hc.drain_worthy(make_report([failed, errored]), "n1") == [("node.environment", "node.environment.shm-small")]


def test_the_exit_code_is_1_only_for_a_finding_of_this_node_and_the_hook_level_is_set_before_set():
    failed = make_result("node.environment", "n1", Status.FAIL, "shm small",
                         findings=[Finding("node.environment.shm-small", Status.FAIL, "shm small")])
    assert hc.exit_code(make_report([failed]), "n1") == hc.EXIT_DRAIN
    assert hc.exit_code(make_report([failed]), "n2") == hc.EXIT_HEALTHY
    config = config_mod.Config()
    hc.shape_config(config)
    config_mod.apply_cli_settings(config, ["node.environment.min_shm_gib=1"], REGISTRY.checks)
    assert config.level == "quick" and str(config.origins["node.environment.min_shm_gib"]) == "--set"
