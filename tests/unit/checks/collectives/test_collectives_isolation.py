"""collectives.cluster judging an adaptive isolation pass (isolation="adaptive", the default).

The pass's facts are made the way the check makes them: preflight.launch.isolation run to its end, here
against the fault simulator in place of torchrun launches, in the shape preflight.launch.isolation_launch
records; the rest of the facts is a recorded four-node run that missed its busbw floor.
"""

from __future__ import annotations

import json

import pytest

from preflight.core.check import CannotMeasure, Expect
from preflight.launch.isolation import GroupResult, isolate
from preflight.launch.isolation_launch import isolation_method, judged_group
from preflight.launch.topology import topology_of
from preflight.launch.isolation_sim import Fault, FaultModel
from preflight.core.model import Status
from preflight_checks.collectives.cluster import CollectivesCluster, Params, pairwise_reason
from tests.conftest import load_facts

NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]


def with_isolation(faults: list[Fault], topology: dict[str, str] | None = None) -> dict:
    facts = load_facts("collectives_cluster/gpu_4nodes_gpu03_slow_built.json")
    facts.pop("pairwise")
    params = Params(**facts["_params"])
    reason = pairwise_reason(facts["run"], params, len(NODES))
    model = FaultModel(NODES, faults, topology=topology, seed=3, times=False)
    result = isolate(NODES, model.measure, topology=topology, screen=GroupResult(False, note=reason))
    facts["isolation"] = {"method": "adaptive", "reason": reason, "budget_s": 120.0,
                          "thresholds": {"min_busbw_gbps": params.min_busbw_gbps}, "isolation": result.to_dict(),
                          "launches": []}
    return json.loads(json.dumps(facts, allow_nan=False))  # what results.jsonl would hold


def evaluate(facts: dict):
    check = CollectivesCluster()
    return check.evaluate(facts, check.params_from(facts.get("_params", {})), Expect())


def ids(outcome) -> list[str]:
    return [f.id for f in outcome.findings if f.level is not Status.PASS]


def test_adaptive_is_the_default_and_unknown_methods_are_refused():
    assert Params().isolation == "adaptive"
    assert isolation_method("pairs") == "pairs"
    with pytest.raises(CannotMeasure):
        isolation_method("bisect")


def test_a_slow_node_is_named_by_the_adaptive_pass():
    outcome = evaluate(with_isolation([Fault("slow-node", ("gpu03",), 0.3)]))
    assert outcome.status is Status.FAIL
    assert "collectives.cluster.isolated-node" in ids(outcome)
    assert "gpu03 is at fault" in outcome.summary
    assert any(d.startswith("isolation round 1:") for d in outcome.details)


def test_a_slow_link_is_named_with_both_nodes():
    outcome = evaluate(with_isolation([Fault("bad-link", ("gpu01", "gpu04"), 0.3)]))
    assert "collectives.cluster.isolated-link" in ids(outcome)
    assert "between gpu01 and gpu04" in outcome.summary
    assert "collectives.cluster.isolated-node" not in ids(outcome)


def test_a_fault_no_group_reproduces_says_so():
    outcome = evaluate(with_isolation([]))
    assert ids(outcome).count("collectives.cluster.isolation-not-reproduced") == 1


def test_a_boundary_is_named_from_the_hosts_groups():
    ctx_nodes = [{"name": n, "group": "leaf1" if n in ("gpu01", "gpu02") else "leaf2"} for n in NODES]
    topology = topology_of(type("Ctx", (), {"nodes": ctx_nodes})())
    assert topology == {"gpu01": "leaf1", "gpu02": "leaf1", "gpu03": "leaf2", "gpu04": "leaf2"}
    outcome = evaluate(with_isolation([Fault("boundary", ("leaf1", "leaf2"), 0.3)], topology))
    assert "collectives.cluster.isolated-boundary" in ids(outcome)


def test_a_group_launch_is_judged_as_a_pair_is():
    ok, kept = judged_group({"nodes": ["a", "b", "c"], "state": "bad", "busbw_gbps": 12.0,
                             "problems": ["busbw 12.00 GB/s below 300"]})
    assert ok == GroupResult(False, figure=12.0, note="busbw 12.00 GB/s below 300") and kept["nodes"] == ["a", "b", "c"]
    assert judged_group({"nodes": ["a", "b"], "state": "error", "error": "no free port"})[0].ok is None


def test_an_isolated_node_carries_its_component_and_how_it_was_confirmed():
    outcome = evaluate(with_isolation([Fault("slow-node", ("gpu03",), 0.3)]))
    (named,) = [f for f in outcome.findings if f.id == "collectives.cluster.isolated-node"]
    assert named.component.kind == "node" and named.component.nodes == ["gpu03"] and named.component.confirmed
    how = named.component.confirmation
    assert how["bad_in"] >= 4 and len(set(how["partners"])) >= 2
    assert any(line.startswith("node gpu03: bad in") for line in outcome.details)


def test_a_run_that_met_its_floors_starts_the_pass_when_one_nodes_ranks_lag():
    from preflight.launch.isolation_launch import slow_ranks_reason

    times = {f"n{i}": 1.0 + 0.01 * i for i in range(8)}
    assert slow_ranks_reason(times) is None
    times["n5"] = 1.6
    assert slow_ranks_reason(times).startswith("n5's ranks took 1.6 s")
    assert slow_ranks_reason({"a": 1.0, "b": 9.0}) is None  # too few nodes to have a median worth the name


def test_the_reports_list_an_isolated_node_on_that_node_and_a_link_on_neither():
    from preflight.core.model import CLUSTER_NODE, Scope
    from preflight.core.verdict import decide
    from preflight.reporters import markdown
    from tests.conftest import make_report, make_result

    def report_of(outcome):
        result = make_result("collectives.cluster", CLUSTER_NODE, outcome.status, outcome.summary,
                             scope=Scope.CLUSTER, findings=outcome.findings)
        return make_report([result], nodes=NODES)

    node_outcome = evaluate(with_isolation([Fault("slow-node", ("gpu03",), 0.3)]))
    (named,) = [f for f in node_outcome.findings if f.id == "collectives.cluster.isolated-node"]
    assert named.node == "gpu03"
    report = report_of(node_outcome)
    assert "(on gpu03)" in decide(report).reason
    rows = [line for line in markdown.render(report).splitlines() if line.startswith("- ") and "gpu03 is at fault" in line]
    assert rows and all(line.endswith("collectives.cluster on gpu03") for line in rows)

    link_outcome = evaluate(with_isolation([Fault("bad-link", ("gpu01", "gpu04"), 0.3)]))
    (link,) = [f for f in link_outcome.findings if f.id == "collectives.cluster.isolated-link"]
    assert link.node is None and link.component.nodes == ["gpu01", "gpu04"]


def test_a_shortfall_no_group_reproduces_is_measured_again_and_a_reading_that_meets_the_floor_is_a_transient():
    from preflight_checks.collectives.cluster import below_floor, met_floor

    facts = with_isolation([])  # a healthy fleet: every group meets the floor
    params = Params(**facts["_params"])
    assert below_floor(facts["run"], params) and not met_floor(facts["run"], params)
    good_run = load_facts("collectives_cluster/gpu_2nodes_8x_h100_nccl_built.json")["run"]  # 368 GB/s
    assert met_floor(good_run, params)

    # 92 GB/s against a floor of 300 is under half of it, but no other reading is below it: one burst, a WARN
    far = evaluate({**facts, "rechecks": [good_run, good_run]})
    assert far.status is Status.WARN and "collectives.cluster.transient" in ids(far)
    (finding,) = [f for f in far.findings if f.id == "collectives.cluster.transient"]
    assert "one of them under 50% of it, and no other below it (one burst)" in finding.message
    # at 46 GB/s, under a quarter of it: dropped out, intermittent (NO-GO) though the rechecks meet it
    run = facts["run"]
    sizes = [{**size, "busbw_gbps": size["busbw_gbps"] / 2} for size in run["result"]["sizes"]]
    out = evaluate({**facts, "run": {**run, "result": {**run["result"], "sizes": sizes}},
                    "rechecks": [good_run, good_run]})
    assert out.status is Status.FAIL and "collectives.cluster.intermittent" in ids(out)
    assert "collectives.cluster.transient" not in ids(out)

    near = {**facts, "_params": {**facts["_params"], "min_busbw_gbps": 150.0}}  # 92 GB/s: below, not far below
    transient = evaluate({**near, "rechecks": [good_run, good_run]})
    assert transient.status is Status.WARN  # GO: one reading below, the next two met it
    assert "collectives.cluster.transient" in ids(transient)
    assert "collectives.cluster.slow-busbw" not in ids(transient)
    (finding,) = [f for f in transient.findings if f.id == "collectives.cluster.transient"]
    assert "below its floor in 1 of 3 all-node readings (then 368.0 GB/s, 368.0 GB/s)" in finding.message

    flapping = evaluate({**near, "rechecks": [good_run, near["run"]]})  # below, above, below
    assert flapping.status is Status.FAIL and "collectives.cluster.intermittent" in ids(flapping)
    (finding,) = [f for f in flapping.findings if f.id == "collectives.cluster.intermittent"]
    assert "below its floor in 2 of 3 all-node readings" in finding.message and finding.component is None

    confirmed = evaluate({**facts, "rechecks": [facts["run"], facts["run"]]})
    assert confirmed.status is Status.FAIL
    (slow,) = [f for f in confirmed.findings if f.id == "collectives.cluster.slow-busbw"]
    assert "below its floor in 3 of 3 all-node readings" in slow.message

    unmeasured = evaluate({**facts, "rechecks": [{"not_run": "less than 20 s of the check's time was left"}]})
    assert unmeasured.status is Status.FAIL and "not measured again" in unmeasured.summary


def test_a_reading_just_under_its_floor_that_meets_it_measured_again_at_once_is_a_transient_warn():
    from preflight.launch.recheck import FIRST_AGAIN, MARGINAL
    from preflight_checks.collectives.figures import far_below

    facts = with_isolation([])
    facts.pop("isolation")  # measured again at once and met: no pass ran
    near = {**facts, "_params": {**facts["_params"], "min_busbw_gbps": 100.0}}  # 92 GB/s: 8% under it
    assert not far_below(near["run"]["result"], Params(**near["_params"]), MARGINAL)  # measured again at once
    assert far_below(near["run"]["result"], Params(**{**facts["_params"], "min_busbw_gbps": 150.0}), MARGINAL)
    good_run = load_facts("collectives_cluster/gpu_2nodes_8x_h100_nccl_built.json")["run"]  # 368 GB/s
    result = evaluate({**near, "rechecks": [{**good_run, FIRST_AGAIN: True}, good_run]})
    assert result.status is Status.WARN and "collectives.cluster.slow-busbw" not in ids(result)
    (finding,) = [f for f in result.findings if f.id == "collectives.cluster.transient"]
    assert "just under its floor and over it when measured again at once; below its floor in 0 of 2" in finding.message
    # measured again at once and under it again: the first reading stands, and 2 of 3 is intermittent
    again = evaluate({**near, "rechecks": [{**near["run"], FIRST_AGAIN: True}, good_run, near["run"]]})
    assert again.status is Status.FAIL and "collectives.cluster.intermittent" in ids(again)
