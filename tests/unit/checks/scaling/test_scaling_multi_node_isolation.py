"""scaling.multi_node's isolation pass: when it runs, how a group's DDP run is judged, and what
evaluate reports from the pass's facts. The groups' runs are the recorded three-node DDP run's
report, reshaped per group; the pass is preflight.launch.isolation itself."""

from __future__ import annotations

import copy
import json

import pytest

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Status
from preflight.launch.isolation import GroupResult, isolate
from preflight.launch.isolation_launch import judged_group
from preflight.launch.recheck import recheck_wanted
from preflight_checks.scaling.multi_node import Params, ScalingMultiNode, group_floor
from preflight_checks.scaling.multi_node_figures import below_floor, met_floor
from preflight_checks.scaling.multi_node_isolation import (
    group_facts, isolation_reason, judge_group, run_node_times, step_efficiency,
)
from tests.conftest import finding_ids, load_facts

NODES = [f"n{i}" for i in range(1, 9)]


def ddp_launch(group: list[str], slow_link: str | None = None, straggler: str | None = None) -> dict:
    """A group's DDP launch in the recorded shape; a slow link on `slow_link` adds exposed
    communication to every step, a `straggler` computes three times slower than its peers."""
    run = copy.deepcopy(load_facts("scaling_multi_node/testbed_3nodes.json")["all_nodes"])
    run.update(nodes=list(group), world_size=len(group), rank_nodes={str(r): n for r, n in enumerate(group)})
    result = run["result"]
    compute = result["compute_s"]
    result.update(world_size=len(group), step_s=compute * (8.0 if slow_link in group else 1.2))
    result["rank_compute_s"] = [compute * (3.0 if n == straggler else 1.0) * (1 + 0.01 * (r % 3))
                                for r, n in enumerate(group)]
    result["rank_step_s"] = [result["step_s"]] * len(group)
    return run


def run_pass(**fault) -> dict:
    floor = group_floor(Params())

    def measure(groups: list[list[str]]) -> list[GroupResult]:
        return [judged_group(judge_group(group_facts(ddp_launch(g, **fault)), floor), figure="step_efficiency")[0]
                for g in groups]

    screen = ddp_launch(NODES, **fault)
    result = isolate(NODES, measure, screen=GroupResult(False, note="efficiency 0.40 below 0.90",
                                                        times_s=run_node_times(screen)))
    return result.to_dict()


def facts_with(isolation: dict) -> dict:
    facts = load_facts("scaling_multi_node/testbed_3nodes.json")
    facts["isolation"] = {"method": "adaptive", "reason": "efficiency 0.40 below 0.90", "budget_s": 180.0,
                          "thresholds": {"min_step_efficiency": 0.75}, "isolation": isolation, "launches": [],
                          "wall_s": 1.0}
    return json.loads(json.dumps(facts, allow_nan=False))


def evaluate(facts: dict, **overrides):
    check = ScalingMultiNode()
    return check.evaluate(facts, check.params_from({**facts.get("_params", {}), **overrides}), Expect())


def test_the_pass_runs_only_on_a_bad_run_of_three_nodes_or_more():
    good = {"ok": True}
    assert isolation_reason(good, 0.95, 0.9, 8) is None
    assert isolation_reason(good, 0.5, 0.9, 8) == "efficiency 0.50 below 0.90"
    assert isolation_reason(good, 0.5, 0.9, 2) is None
    assert isolation_reason({"ok": False, "fault_nodes": []}, None, 0.9, 4) == "the DDP run across all nodes failed"
    assert isolation_reason({"ok": False, "phase": "rendezvous", "fault_nodes": ["n3"]}, None, 0.9, 4) is None
    assert isolation_reason({"ok": False, "phase": "stopped", "fault_nodes": ["n1", "n2", "n4"]}, None, 0.9, 4)


def test_unknown_isolation_methods_are_refused_before_anything_runs():
    assert Params().isolation == "adaptive"
    with pytest.raises(CannotMeasure):
        ScalingMultiNode().collect(None, Params(isolation="pairs"))


def test_a_group_is_judged_on_its_step_efficiency():
    slow = group_facts(ddp_launch(["n1", "n2"], slow_link="n2"))
    fine = group_facts(ddp_launch(["n1", "n3"], slow_link="n2"))
    assert step_efficiency({"step_s": 0.2, "compute_s": 0.05}) == pytest.approx(0.25)
    assert judge_group(slow, 0.75)["state"] == "bad" and judge_group(fine, 0.75)["state"] == "good"
    assert judge_group(fine, 0.9)["state"] == "bad"  # 1 / 1.2 is below a stricter floor
    assert judge_group({"nodes": ["a", "b"], "ok": False, "error": "timed out"}, 0.75)["state"] == "bad"
    assert judge_group({"nodes": ["a", "b"], "not_run": True}, 0.75)["state"] == "error"
    assert group_floor(Params()) == Params().warn_efficiency
    assert group_floor(Params(isolation_min_step_efficiency=0.3)) == 0.3


def test_a_slow_node_is_named_and_reported_at_the_runs_level():
    isolation = run_pass(slow_link="n6")
    assert [(a["kind"], a["members"]) for a in isolation["attributions"] if not a["ambiguous"]] == [("node", ["n6"])]
    outcome = evaluate(facts_with(isolation))
    assert "scaling.multi_node.isolated-node" in finding_ids(outcome)
    level = next(f.level for f in outcome.findings if f.id == "scaling.multi_node.isolated-node")
    assert level is next(f.level for f in outcome.findings if f.id == "scaling.multi_node.efficiency")
    assert any(d.startswith("isolation round 1:") for d in outcome.details)


def test_ranks_that_compute_slower_name_a_straggler():
    isolation = run_pass(straggler="n3")
    assert [(a["kind"], a["members"]) for a in isolation["attributions"] if not a["ambiguous"]] == [
        ("straggler", ["n3"])]
    outcome = evaluate(facts_with(isolation))
    assert "scaling.multi_node.straggler" in finding_ids(outcome)


def test_without_a_pass_nothing_is_attributed():
    outcome = evaluate(load_facts("scaling_multi_node/testbed_3nodes.json"))
    assert not [i for i in finding_ids(outcome) if "isolat" in i or "straggler" in i]


# -- the all-node run trained again when the pass blames nothing (preflight.launch.recheck) -------------


def all_nodes_at(facts: dict, share: float) -> dict:
    """The recorded all-node run with its throughput set to `share` of N times the one-node run's."""
    run = copy.deepcopy(facts["all_nodes"])
    target = share * len(run["nodes"]) * facts["one_node"]["result"]["samples_per_s"]
    scale = run["result"]["samples_per_s"] / target
    run["result"].update(samples_per_s=target, step_s=run["result"]["step_s"] * scale)
    return run


def test_a_shortfall_no_group_reproduces_is_trained_again_and_a_run_at_the_floor_is_a_transient():
    isolation = run_pass()  # no fault: every group trains well
    assert recheck_wanted(isolation) and not isolation["attributions"]
    facts = facts_with(isolation)
    params = Params(**facts["_params"])
    one, everyone = facts["one_node"], facts["all_nodes"]
    assert below_floor(one, everyone, params) and met_floor(one, everyone, params) is False
    assert evaluate(facts).status is Status.FAIL  # one reading, not measured again: it stands
    good = all_nodes_at(facts, params.min_efficiency)
    assert met_floor(one, good, params) and not below_floor(one, good, params)

    # efficiency 0.33 against warn_efficiency: under half of it, but no other run below it: one burst, a WARN
    far = evaluate({**facts, "rechecks": [good, good]})
    assert far.status is Status.WARN and "scaling.multi_node.transient" in finding_ids(far)
    # under a quarter of it: dropped out, intermittent even when both rechecks meet it
    out = evaluate({**facts, "all_nodes": all_nodes_at(facts, 0.2 * params.warn_efficiency), "rechecks": [good, good]})
    assert out.status is Status.FAIL and "scaling.multi_node.intermittent" in finding_ids(out)

    near = {**facts, "all_nodes": all_nodes_at(facts, 0.8 * params.warn_efficiency)}  # below, not far below
    transient = evaluate({**near, "rechecks": [good, good]})
    assert transient.status is Status.WARN  # GO: one run below the floor, the next two met it
    assert "scaling.multi_node.transient" in finding_ids(transient)
    assert "scaling.multi_node.efficiency" not in finding_ids(transient)
    (finding,) = [f for f in transient.findings if f.id == "scaling.multi_node.transient"]
    assert "below its floor in 1 of 3 all-node readings (then efficiency " in finding.message
    flapping = evaluate({**near, "rechecks": [good, near["all_nodes"]]})  # below, above, below
    assert flapping.status is Status.FAIL and "scaling.multi_node.intermittent" in finding_ids(flapping)

    confirmed = evaluate({**facts, "rechecks": [everyone, everyone]})
    assert confirmed.status is Status.FAIL
    (slow,) = [f for f in confirmed.findings if f.id == "scaling.multi_node.efficiency"]
    assert "below its floor in 3 of 3 all-node readings" in slow.message

    unmeasured = evaluate({**facts, "rechecks": [{"not_run": "less than 20 s of the check's time was left"}]})
    assert unmeasured.status is Status.FAIL and "not measured again" in unmeasured.summary


def test_a_run_that_only_warns_or_did_not_run_is_not_trained_again():
    facts = load_facts("scaling_multi_node/testbed_3nodes.json")
    params = Params(**facts["_params"])
    between = all_nodes_at(facts, (params.min_efficiency + params.warn_efficiency) / 2)
    assert not below_floor(facts["one_node"], between, params)  # a WARN is GO
    failed = {**facts["all_nodes"], "ok": False, "phase": "collective", "error": "timed out"}
    assert not below_floor(facts["one_node"], failed, params) and met_floor(facts["one_node"], failed, params) is None
    assert not recheck_wanted(run_pass(slow_link="n6"))  # a node the pass named


def test_a_run_just_under_its_floor_that_meets_it_trained_again_at_once_is_a_transient_warn():
    from preflight.launch.recheck import AGAIN_OF, FIRST_AGAIN, MARGINAL
    from preflight_checks.scaling.multi_node_figures import far_below

    facts = facts_with(run_pass())
    facts.pop("isolation")  # trained again at once and met: no pass ran
    params = Params(**facts["_params"])
    one = facts["one_node"]
    near = {**facts, "all_nodes": all_nodes_at(facts, 0.93 * params.warn_efficiency)}
    assert below_floor(one, near["all_nodes"], params) and not far_below(one, near["all_nodes"], params, MARGINAL)
    assert far_below(one, all_nodes_at(facts, 0.8 * params.warn_efficiency), params, MARGINAL)
    good = all_nodes_at(facts, params.min_efficiency)
    result = evaluate({**near, "rechecks": [{**good, FIRST_AGAIN: True}, good]})
    assert result.status is Status.WARN and "scaling.multi_node.efficiency" not in finding_ids(result)
    (finding,) = [f for f in result.findings if f.id == "scaling.multi_node.transient"]
    assert "over it when measured again at once" in finding.message
    # a later run just under the floor and over it trained again at once counts as met
    later = evaluate({**facts, "all_nodes": good, "rechecks": [{**good, AGAIN_OF: near["all_nodes"]}]})
    assert later.status is Status.PASS and "met its floor in 2 of 2 all-node readings" in later.details
