"""preflight.core.blame: whose a blocking finding is, read from its component alone."""

from __future__ import annotations

import json

from preflight.core import blame
from preflight.core.model import CLUSTER_NODE, CheckResult, Component, Finding, RunReport, Scope, Status
from preflight.integrations import slurm
from preflight.integrations.kubernetes.cordon import cordon_plan
from tests.conftest import make_report, make_result


def cluster(*findings: Finding, status: Status = Status.FAIL) -> CheckResult:
    return make_result("collectives.cluster", CLUSTER_NODE, status, "bad", scope=Scope.CLUSTER,
                       findings=list(findings))


def found(kind: str, component: Component | None, level: Status = Status.FAIL, node: str | None = None) -> Finding:
    # The message names n1 on purpose: nothing may read it to learn whom to act on.
    return Finding(f"collectives.cluster.{kind}", level, "n1 is named here in words only", "fix it", node, component)


def report(*results: CheckResult, **kwargs) -> RunReport:
    return make_report(list(results), nodes=["n1", "n2", "n3", "n4"], **kwargs)


def test_a_confirmed_node_is_that_nodes_own_and_the_reason_names_it():
    r = report(cluster(found("isolated-node", Component("node", ["n3"]))))
    assert blame.own_findings(r) == {"n3": [("collectives.cluster", "collectives.cluster.isolated-node")]}
    assert slurm.drain_plan(r, {}) == {"n3": "preflight: collectives.cluster (collectives.cluster.isolated-node, node n3)"}
    assert cordon_plan(r)["n3"][1].startswith("node n3: ")


def test_a_gpu_is_its_nodes_own_and_the_reason_names_the_gpu():
    r = report(make_result("gpu.visibility", "n2", Status.FAIL, "slow", findings=[
        Finding("gpu.visibility.fail-slow", Status.FAIL, "slow", "fix", "n2", Component("gpu", ["n2"], gpu=3))]))
    assert slurm.drain_plan(r, {}) == {"n2": "preflight: gpu.visibility (gpu.visibility.fail-slow, GPU 3 of n2)"}


def test_a_link_drains_neither_end_and_is_named():
    r = report(cluster(found("isolated-link", Component("link", ["n1", "n2"]))))
    assert blame.own_findings(r) == {}
    assert [b.component for b in blame.held(r)] == ["link n1 - n2"]
    assert slurm.drain_plan(r, {}) == {}
    assert cordon_plan(r) == {}


def test_a_boundary_drains_nobody_and_names_the_trunk():
    r = report(cluster(found("isolated-boundary", Component("boundary", groups=["rack1", "rack2"]))))
    assert blame.own_findings(r) == {}
    (held,) = blame.held(r)
    assert held.component == "boundary rack1 - rack2" and "trunk" in blame.held_text(held)


def test_a_shared_cause_drains_and_cordons_nobody_and_is_named():
    group = found("shared-cause", Component("group", groups=["leaf07"]))
    common = found("shared-cause", Component("group", ["n2"]))
    r = report(cluster(group, common))
    assert blame.own_findings(r) == {} and slurm.drain_plan(r, {}) == {} and cordon_plan(r) == {}
    assert [b.component for b in blame.held(r)] == ["shared cause: topology group leaf07", "shared cause: node n2"]
    assert "no node is acted on" in blame.held_text(blame.held(r)[0])


def test_a_suspect_is_never_acted_on_even_when_warnings_block():
    suspect = found("suspect", Component("node", ["n3"], confirmed=False), level=Status.WARN)
    r = report(cluster(suspect, status=Status.WARN), fail_on="warn")
    assert blame.own_findings(r) == {} and blame.held(r) == []


def test_a_node_checks_finding_stays_its_nodes_own_and_error_is_nobodys():
    r = report(make_result("node.environment", "n4", Status.FAIL, "shm", findings=[
        Finding("node.environment.shm-small", Status.FAIL, "shm", "fix")]),
        make_result("node.environment", "n2", Status.ERROR, "timed out"))
    assert blame.own_findings(r) == {"n4": [("node.environment", "node.environment.shm-small")]}


def test_an_older_results_file_without_components_still_loads_and_blames_by_its_node_field():
    r = report(cluster(found("pairwise-node", None, node="n2")))
    data = json.loads(json.dumps(r.to_dict()))
    assert all("component" not in f for result in data["results"] for f in result["findings"])  # as before
    again = RunReport.from_dict(data)
    assert again.results[0].findings[0].component is None
    assert blame.own_findings(again) == {"n2": [("collectives.cluster", "collectives.cluster.pairwise-node")]}


def test_a_component_round_trips_through_json():
    component = Component("link", ["n1", "n2"], confirmed=True, confirmation={"bad_in": 4, "of": 4, "partners": ["n3"]})
    r = report(cluster(found("isolated-link", component)))
    again = RunReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again.results[0].findings[0].component == component


def test_a_results_file_with_components_passes_the_schema_and_loads():
    from preflight.core.results_file import parse_report

    component = Component("gpu", ["n2"], gpu=5, confirmation={"peers": 31})
    r = report(cluster(found("isolated-node", Component("node", ["n3"])), found("x", component, level=Status.WARN)))
    again = parse_report(json.dumps(r.to_dict()), "results.json")
    assert [f.component for f in again.results[0].findings] == [Component("node", ["n3"]), component]


def _silenced_node_blocker(**kwargs) -> RunReport:
    blocker = make_result("node.environment", "n2", Status.FAIL, "bad", findings=[
        Finding("node.environment.disk-unreadable", Status.FAIL, "cannot read", "fix", "n2")])
    fine = [make_result("node.environment", n, Status.PASS, "ok") for n in ("n1", "n3", "n4")]
    return report(blocker, *fine, silenced={"node.environment.disk-unreadable": {"reason": "known", "until": ""}},
                  **kwargs)


def test_a_silenced_blocker_is_acted_on_nowhere_the_verdict_says_go():
    from preflight.core.shape import parse
    from preflight.core.verdict import Verdict, decide
    from preflight.run import hook
    from preflight.run.shape import answer

    r = _silenced_node_blocker()
    assert decide(r).verdict is Verdict.GO and decide(r).exit_code == 0
    assert blame.own_findings(r) == {} and slurm.drain_plan(r, {}) == {} and cordon_plan(r) == {}
    assert hook.exit_code(r, "n2") == hook.EXIT_HEALTHY
    subset = answer(r, parse(["nodes-multiple-of=2"]))
    assert "n2" in subset["nodes"] and not subset["exclude"]


def test_a_silence_never_covers_an_error_nor_a_finding_past_its_date():
    errored = make_result("node.environment", "n2", Status.ERROR, "could not measure shm", findings=[
        Finding("node.environment.could-not-measure", Status.ERROR, "could not measure shm", "fix", "n2")])
    r = report(errored, silenced={"node.environment.could-not-measure": {"reason": "r", "until": ""}})
    from preflight.core.verdict import Verdict, decide

    assert decide(r).verdict is Verdict.NO_GO and not decide(r).acknowledged_findings
    expired = _silenced_node_blocker()
    expired.silenced["node.environment.disk-unreadable"]["until"] = "2026-01-01"
    assert decide(expired).verdict is Verdict.NO_GO
    assert blame.own_findings(expired) == {"n2": [("node.environment", "node.environment.disk-unreadable")]}


def _fleet(count: int, bad: list[str], groups: int = 1) -> RunReport:
    names = [f"n{i:03d}" for i in range(count)]
    results = [make_result("node.environment", n, Status.FAIL, "shm small", findings=[
        Finding("node.environment.shm-small", Status.FAIL, "small", "grow it", n)]) for n in bad]
    return make_report(results, nodes=names)


def test_the_blast_radius_acts_on_at_most_2_percent_of_the_nodes_and_at_least_one():
    small = _fleet(4, ["n001"])
    assert set(blame.acting(small).nodes) == {"n001"}  # 2% of 4 is under one: one node is still allowed
    two = _fleet(4, ["n001", "n002"])
    past = blame.acting(two)
    assert past.nodes == {} and set(past.withheld) == {"n001", "n002"}
    assert "more than the blast radius of 1" in past.why and "n[001-002]" in past.why
    assert slurm.drain_plan(two, {}) == {} and cordon_plan(two) == {}
    assert set(blame.acting(two, radius=0.5).nodes) == {"n001", "n002"}  # settable
    fleet = _fleet(200, [f"n{i:03d}" for i in (3, 50, 90, 120)])
    assert set(blame.acting(fleet).nodes) == {"n003", "n050", "n090", "n120"}  # 4 of 200: within 2%
    assert blame.acting(_fleet(200, [f"n{i:03d}" for i in range(0, 100, 20)])).nodes == {}  # 5 of 200: past it


def test_the_blast_radius_never_takes_more_than_half_of_one_topology_group():
    fleet = _fleet(200, ["n000", "n001"])
    groups = {f"n{i:03d}": f"leaf{i // 4}" for i in range(200)}  # four nodes a switch
    assert set(blame.acting(fleet, groups=groups).nodes) == {"n000", "n001"}  # half of leaf0: allowed
    three = _fleet(200, ["n000", "n001", "n002"])
    past = blame.acting(three, groups=groups)
    assert past.nodes == {} and "3 of the 4 nodes of topology group leaf0" in past.why


def test_past_the_blast_radius_slurm_drains_nothing_and_says_why_naming_the_nodes():
    calls = []

    def scontrol(argv, **_):
        from preflight.transport.process import Completed
        calls.append(argv)
        return Completed(argv, 0, "", "")

    actions = slurm.apply(_fleet(4, ["n001", "n002"]), drain=True, resume=False, run=scontrol)
    assert not any("State=DRAIN" in " ".join(c) for c in calls)
    (held,) = [a for a in actions if a.what == "hold"]
    assert held.describe().startswith("not drained: 2 nodes would be drained or cordoned")
