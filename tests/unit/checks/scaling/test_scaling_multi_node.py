"""scaling.multi_node judged from recorded and built facts.

Recorded facts (tests/data/collectives_cluster/record.py) are real DDP runs under torchrun: two
local nodes, and three namespace nodes over ssh that share one two-core machine. The GPU facts are
built and say so in "_source".
"""

from __future__ import annotations

import copy

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.scaling.multi_node import Params, ScalingMultiNode, choose_model, efficiency
from tests.conftest import finding_ids, load_facts


def facts_of(name: str) -> dict:
    return load_facts(f"scaling_multi_node/{name}")


def evaluate(facts: dict, expect: Expect | None = None, **overrides):
    check = ScalingMultiNode()
    return check.evaluate(facts, check.params_from({**facts.get("_params", {}), **overrides}), expect or Expect())


def measured(outcome, fragment: str):
    found = [m for m in outcome.measurements if fragment in m.name]
    assert len(found) == 1, [m.name for m in outcome.measurements]
    return found[0]


def expected_efficiency(facts: dict) -> float:
    nodes = len(facts["all_nodes"]["nodes"])
    return facts["all_nodes"]["result"]["samples_per_s"] / (nodes * facts["one_node"]["result"]["samples_per_s"])


def test_healthy_gpu_nodes_pass_with_efficiency_and_effective_nodes():
    facts = facts_of("gpu_4nodes_8x_h100_built.json")
    assert facts["_source"].startswith("built, not measured")
    outcome = evaluate(facts)
    e = expected_efficiency(facts)
    assert outcome.status is Status.PASS
    assert measured(outcome, "efficiency on 4 nodes").value == pytest.approx(e, abs=1e-3)
    assert measured(outcome, "efficiency on 4 nodes").threshold == Params().min_efficiency
    assert measured(outcome, "effective nodes of 4").value == pytest.approx(4 * e, abs=0.01)
    assert finding_ids(outcome, Status.PASS) == ["scaling.multi_node.efficiency"]
    assert f"4 nodes deliver the throughput of {4 * e:.2f}" in outcome.summary  # what the cluster is worth
    assert measured(outcome, "throughput on 4 nodes x 8 GPUs").value == pytest.approx(
        facts["all_nodes"]["result"]["samples_per_s"], rel=1e-6)
    assert any("scaling.multi_gpu on each node" in d for d in outcome.details)


def test_a_slower_fabric_warns_then_fails_with_a_stricter_floor():
    facts = facts_of("gpu_4nodes_slow_fabric_built.json")
    e = expected_efficiency(facts)
    assert 0.75 <= e < 0.90
    assert evaluate(facts).status is Status.WARN and finding_ids(evaluate(facts)) == ["scaling.multi_node.efficiency"]
    assert evaluate(facts, warn_efficiency=e + 0.01).status is Status.FAIL
    grown = next(d for d in evaluate(facts).details if d.startswith("all 4 nodes: step"))
    assert "exposed communication" in grown


def test_recorded_testbed_run_is_judged_on_what_it_measured():
    facts = facts_of("testbed_3nodes.json")
    e = expected_efficiency(facts)
    outcome = evaluate(facts)
    assert measured(outcome, "efficiency on 3 nodes").value == pytest.approx(e, abs=1e-3)
    want = Status.PASS if e >= 0.9 else Status.WARN if e >= 0.75 else Status.FAIL
    assert outcome.status is want
    # The namespace nodes share one machine's two cores: said in the details.
    assert any("one machine" in d for d in outcome.details)
    assert any("share its CPUs" in d for d in outcome.details)
    # Thresholds for such a machine (three processes on two cores cannot exceed 2/3) are honoured.
    assert evaluate(facts, min_efficiency=e - 0.01, warn_efficiency=e - 0.02).status is Status.PASS


def test_recorded_local_run_reports_both_step_splits():
    facts = facts_of("local_2nodes.json")
    outcome = evaluate(facts)
    for label in ("1 node x 1 process", "2 nodes x 1 process"):
        step = measured(outcome, f"step time on {label}")
        compute = measured(outcome, f"compute (no_sync) on {label}")
        comm = measured(outcome, f"exposed communication on {label}")
        assert comm.value == pytest.approx(step.value - compute.value, abs=0.02)
    assert "[CPU only" in outcome.summary


def test_one_node_is_skip_unless_several_are_expected():
    facts = {"nodes": ["only"], "unreachable": [], "probes": {}}
    assert evaluate(facts).status is Status.SKIP and finding_ids(evaluate(facts)) == ["scaling.multi_node.one-node"]
    assert finding_ids(evaluate(facts, Expect(nodes=2))) == ["scaling.multi_node.nodes-missing"]


def test_a_failed_all_node_launch_is_error_naming_the_node():
    facts = copy.deepcopy(facts_of("gpu_4nodes_8x_h100_built.json"))
    facts["all_nodes"].update(ok=False, result=None, phase="rendezvous", fault_nodes=["gpu04"],
                              error="torchrun on gpu04 never joined the rendezvous within 60s (still running; stopped)")
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["scaling.multi_node.rendezvous"]
    assert "gpu04" in outcome.findings[0].message
    assert not any(m.name.startswith("efficiency") for m in outcome.measurements)


def test_unreachable_nodes_are_noted():
    facts = copy.deepcopy(facts_of("gpu_4nodes_8x_h100_built.json"))
    facts["unreachable"] = ["gpu05"]
    outcome = evaluate(facts)
    assert outcome.status is Status.PASS
    assert any("unreachable: gpu05" in d for d in outcome.details)


def test_efficiency_above_one_is_flagged_as_suspect():
    facts = copy.deepcopy(facts_of("gpu_4nodes_8x_h100_built.json"))
    facts["one_node"]["result"]["samples_per_s"] /= 1.5
    outcome = evaluate(facts)
    assert any(d.startswith("efficiency ") and "is above 1" in d for d in outcome.details)


def test_a_straggler_in_scaling_multi_gpu_is_pointed_out():
    facts = copy.deepcopy(facts_of("gpu_4nodes_8x_h100_built.json"))
    facts["per_node"]["gpu02"]["samples_per_s"] *= 0.7
    outcome = evaluate(facts)
    assert any(d.startswith("gpu02 is more than 10% below the median node") for d in outcome.details)


def test_model_choice_prefers_parameters_then_this_runs_scaling_multi_gpu():
    earlier = {"device_kind": "cuda", "model": {"hidden": 2048, "layers": 4, "batch": 512, "workload": None}}
    from_run = choose_model(Params(), "cuda", earlier)
    assert (from_run["hidden"], from_run["layers"], from_run["batch"]) == (2048, 4, 512)
    assert "scaling.multi_gpu ran" in from_run["source"]
    overridden = choose_model(Params(batch_per_device=64), "cuda", earlier)
    assert overridden["batch"] == 64 and overridden["hidden"] == 2048 and overridden["source"] == "the check's parameters"
    default = choose_model(Params(), "cpu", earlier)  # a GPU run's model does not fit CPU ranks
    assert (default["hidden"], default["batch"]) == (512, 128)


def test_efficiency_formula():
    figures = efficiency(one=1000.0, all_nodes=3600.0, nodes=4)
    assert figures["efficiency"] == pytest.approx(0.9)
    assert figures["effective_nodes"] == pytest.approx(3.6)


def test_efficiency_is_a_finding_and_throughput_declares_the_scaling_figure():
    facts = facts_of("gpu_4nodes_slow_fabric_built.json")
    outcome = evaluate(facts)
    efficiency_finding = next(f for f in outcome.findings if f.id == "scaling.multi_node.efficiency")
    assert efficiency_finding.level is outcome.status and efficiency_finding.fix
    throughput = [m for m in outcome.measurements if m.figure == "scaling"]
    assert sorted(m.at for m in throughput) == [1, 4] and {m.series for m in throughput} == {"torch"}
    assert evaluate(facts, min_efficiency=0.0, warn_efficiency=0.0).status is Status.PASS
