"""Expectations are enforced by the checks they concern and by the verdict itself, whatever a flag
leaves out: fewer nodes than expect.nodes is NO-GO; GPU nodes measured without their GPUs are NO-GO;
--skip of what an expectation needs is exit 2 naming both."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.check import Expect
from preflight.core.expectations import EXPECT_CHECK_ID, expectation_results
from preflight.core.model import NodeInfo, Scope, Status
from preflight.core.registry import discover
from preflight.core.verdict import Verdict, decide
from preflight.run import plan as plan_mod
from tests.conftest import load_facts, make_result
from tests.conftest import make_report as _make_report

CHECKS = discover().checks
NEEDS = {"collectives.local": ["framework"], "gpu.visibility": ["gpu"]}


def make_report(results, nodes=None, **kwargs):
    """A report as a run records it: node.environment declares the inventory role."""
    kwargs.setdefault("roles", {"node.environment": "inventory"})
    return _make_report(results, nodes, **kwargs)


def _env(node="n1", gpus=0):
    facts = {"nvidia_gpus": [{"address": f"0000:{i:02x}:00.0", "class": "0x030200"} for i in range(gpus)]}
    return make_result("node.environment", node, Status.PASS, facts=facts)


def _cpu_collectives(node="n1"):
    return make_result("collectives.local", node, Status.PASS, "gloo 2 ranks: 1.2 GB/s",
                       facts={"gpu_count": 0, "device_kind": "cpu", "runs": []})


def ids(decision):
    return {f.id for r in decision.blocking for f in r.findings}


# -- fewer nodes than expected ------------------------------------------------------------------------

def test_fewer_nodes_than_expected_is_no_go_whatever_ran():
    report = make_report([_env()], expect={"nodes": 2})
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert ids(decision) == {f"{EXPECT_CHECK_ID}.nodes"}
    assert decide(make_report([_env()])).verdict is Verdict.GO  # the same run without the expectation


def test_fewer_nodes_is_no_go_even_when_every_check_skipped_or_nothing_ran():
    skipped = make_result("net.bandwidth", "cluster", Status.SKIP, "one node: nothing to measure", scope=Scope.CLUSTER)
    assert decide(make_report([skipped], nodes=["n1"], expect={"nodes": 4})).verdict is Verdict.NO_GO
    assert decide(make_report([], nodes=["n1"], expect={"nodes": 4})).verdict is Verdict.NO_GO


def test_nodes_listed_but_not_reached_do_not_count():
    report = make_report([_env("n1")], nodes=["n1", "n2"], expect={"nodes": 2})
    report.nodes[1].reachable = False
    (derived,) = expectation_results(report)
    assert derived.findings[0].id == f"{EXPECT_CHECK_ID}.nodes" and "1 reached" in derived.summary
    report.nodes[1].reachable = True
    assert expectation_results(report) == []


# -- GPUs expected, measured without them --------------------------------------------------------------

@pytest.mark.parametrize("setting", [{"profile": "h100-8x", "expect": {"gpus_per_node": 8}},
                                     {"expect": {"gpus_per_node": 8}}])
def test_a_check_that_ran_on_cpu_while_gpus_are_expected_blocks(setting):
    report = make_report([_env(gpus=0), _cpu_collectives()], needs=NEEDS, **setting)
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert ids(decision) == {f"{EXPECT_CHECK_ID}.gpus", f"{EXPECT_CHECK_ID}.measured-without-gpus"}
    assert decide(make_report([_env(gpus=0), _cpu_collectives()], needs=NEEDS)).verdict is Verdict.GO


def test_hosts_file_slots_are_an_expectation_too():
    report = make_report([_env(gpus=4), _cpu_collectives()], needs=NEEDS)
    report.nodes = [NodeInfo("n1", slots=8)]
    assert ids(decide(report)) == {f"{EXPECT_CHECK_ID}.gpus", f"{EXPECT_CHECK_ID}.measured-without-gpus"}
    report.nodes = [NodeInfo("n1", slots=0)]  # slots=0 says: a CPU node
    assert decide(report).verdict is Verdict.GO


def test_without_node_environment_the_checks_own_facts_still_tell():
    report = make_report([_cpu_collectives()], needs=NEEDS, expect={"gpus_per_node": 8})
    assert ids(decide(report)) == {f"{EXPECT_CHECK_ID}.measured-without-gpus"}


def test_a_gpu_node_that_measured_on_its_gpus_meets_the_expectation():
    gpu_run = make_result("collectives.local", "n1", Status.PASS, "nccl", facts={"gpu_count": 8, "device_kind": "cuda"})
    report = make_report([_env(gpus=8), gpu_run], needs=NEEDS, expect={"gpus_per_node": 8})
    assert decide(report).verdict is Verdict.GO


@pytest.mark.parametrize("check_id, cpu_fixture, gpu_fixture", [
    ("collectives.local", "collectives/cpu_gloo_2ranks.json", "collectives/healthy_h100-8x_built.json"),
    ("scaling.multi_gpu", "scaling/cpu_2proc.json", "scaling/gpu_8x_h100_healthy_built.json"),
    ("canary.training", "canary/cpu_2ranks.json", None),
])
def test_the_checks_that_need_gpus_fail_on_cpu_when_gpus_are_expected(check_id, cpu_fixture, gpu_fixture):
    check = CHECKS[check_id]()
    facts = load_facts(cpu_fixture)
    expected = check.evaluate(facts, check.params_from(), Expect(gpus_per_node=8))
    assert expected.status is Status.FAIL
    assert f"{check_id}.gpus-expected" in {f.id for f in expected.findings}
    unstated = check.evaluate(facts, check.params_from(), Expect())
    assert f"{check_id}.gpus-expected" not in {f.id for f in unstated.findings}
    if gpu_fixture:
        on_gpus = check.evaluate(load_facts(gpu_fixture), check.params_from(), Expect(gpus_per_node=8))
        assert f"{check_id}.gpus-expected" not in {f.id for f in on_gpus.findings}


# -- deselecting what an expectation needs -------------------------------------------------------------

def _deselect(skip: set[str], expect: Expect, slots=(None,), only=None):
    wanted = only or sorted(CHECKS)
    selection = plan_mod.select(CHECKS, wanted, skip, explicit=bool(only))
    plan_mod.check_deselection(CHECKS, wanted, skip, selection, expect, list(slots))


def test_skipping_what_the_expectations_need_names_both():
    with pytest.raises(plan_mod.PlanError, match=r"--skip versions.pinned removes versions.consistency.*expect.nodes = 2"):
        _deselect({"versions.pinned"}, Expect(nodes=2))
    with pytest.raises(plan_mod.PlanError, match=r"--skip versions.consistency: expect.nodes = 2"):
        _deselect({"versions.consistency"}, Expect(nodes=2))
    with pytest.raises(plan_mod.PlanError, match=r"--skip gpu.visibility: the hosts file's slots=8"):
        _deselect({"gpu.visibility"}, Expect(), slots=(8, None))
    with pytest.raises(plan_mod.PlanError, match=r"--skip collectives.local: expect.frameworks = \['torch'\]"):
        _deselect({"collectives.local"}, Expect(frameworks=["torch"]))


def test_skipping_is_free_when_no_expectation_needs_the_check():
    _deselect({"versions.pinned"}, Expect())
    _deselect({"gpu.visibility"}, Expect(nodes=2))
    # a narrower --checks is the user's question, not a contradiction
    _deselect(set(), Expect(nodes=2, gpus_per_node=8), only=["node.environment"])


def test_the_cli_refuses_the_skip_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", "--skip", "versions.pinned", "--set", "expect.nodes=2", "--out", "out"])
    assert result.exit_code == 2, result.output
    assert "versions.pinned" in result.output and "versions.consistency" in result.output
    assert "expect.nodes = 2" in result.output
    assert not (tmp_path / "out" / "results.jsonl").exists()
    profile = CliRunner().invoke(cli, ["run", "--profile", "h100-8x", "--skip", "gpu.visibility", "--out", "out"])
    assert profile.exit_code == 2 and "--profile h100-8x" in profile.output, profile.output


def test_a_cross_node_check_that_ran_gloo_on_cpu_while_gpus_are_expected_blocks():
    choice = {"backend": "gloo", "device": "cpu", "nproc_per_node": 1}
    cluster = make_result("collectives.cluster", "cluster", Status.PASS, "gloo across 2 nodes", scope=Scope.CLUSTER,
                          facts={"choice": choice})
    needs = {"collectives.cluster": ["framework"]}
    report = make_report([cluster], nodes=["n1", "n2"], needs=needs, expect={"gpus_per_node": 8})
    assert ids(decide(report)) == {f"{EXPECT_CHECK_ID}.measured-without-gpus"}
    cluster.facts = {"choice": {"backend": "nccl", "device": "cuda", "nproc_per_node": 8}}
    assert decide(report).verdict is Verdict.GO
    cluster.facts = {"choice": choice}
    assert decide(make_report([cluster], nodes=["n1", "n2"], needs=needs)).verdict is Verdict.GO
