"""versions.consistency from multi-node facts (tests/data/versions/cluster_*.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.engine.context import ClusterContext
from preflight.core.model import Scope, Status
from preflight_checks.versions.consistency import VersionsConsistency, compare_field
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "versions"
CHECK = VersionsConsistency()
STACK = json.loads((DATA / "stack_recorded.json").read_text(encoding="utf-8"))["stack"]


def cluster(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def run(data: dict, expect: Expect | None = None, unreachable: list[str] | None = None, **params):
    """collect() over the node facts the runner would pass, then evaluate(); collect writes nothing."""
    expect = expect or Expect()
    ctx = ClusterContext(nodes=[{"name": n, "kind": "ssh"} for n in data["nodes"]], output_dir=Path("."), scratch_dir=Path("."),
                         expect=expect, timeout_s=30, node_facts=data["node_facts"], unreachable=unreachable or [])
    p = CHECK.params_from(params)
    facts = CHECK.collect(ctx, p)
    json.dumps(facts)  # facts travel as JSON
    return facts, CHECK.evaluate(facts, p, expect)


def nodes_with(stacks: dict[str, dict]) -> dict:
    return {"nodes": list(stacks), "node_facts": {n: {"versions.pinned": {"stack": s}} for n, s in stacks.items()}}


def test_is_a_cluster_check_after_versions_pinned():
    assert CHECK.scope is Scope.CLUSTER
    assert "versions.pinned" in CHECK.run_after


def fired(outcome) -> list[tuple[str, str | None]]:
    return [(f.id, f.node) for f in outcome.findings if f.level is not Status.PASS]


def test_three_identical_nodes_pass():
    facts, outcome = run(cluster("cluster_identical_3.json"))
    assert sorted(facts["stacks"]) == ["gpu01", "gpu02", "gpu03"]
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    assert next(m for m in outcome.measurements if m.name == "nodes compared").value == 3
    differing = next(m for m in outcome.measurements if m.name == "stack fields that differ")
    assert differing.value == 0 and differing.ok


def test_one_node_with_another_torch_is_named_against_the_majority():
    _, outcome = run(cluster("cluster_torch_differs.json"))
    assert outcome.status is Status.FAIL
    # torch_cuda differs as well (None elsewhere on this CPU-recorded stack).
    assert fired(outcome) == [("versions.consistency.torch-differs", "gpu03"),
                              ("versions.consistency.torch-cuda-differs", "gpu03")]
    assert next(m for m in outcome.measurements if m.name == "stack fields that differ").value == 2


def test_a_tie_names_every_group_and_blames_no_one():
    _, outcome = run(cluster("cluster_tie.json"))
    assert outcome.status is Status.FAIL
    assert fired(outcome) == [("versions.consistency.nccl-differs", None)]  # no node is blamed
    assert outcome.summary == "nccl differs with no majority: 2.21.5 on gpu01, gpu02; 2.20.5 on gpu03, gpu04"


def test_two_nodes_that_disagree_are_a_tie():
    other = dict(STACK, driver="550.54.15")
    _, outcome = run(nodes_with({"a": dict(STACK, driver="535.104.05"), "b": other}))
    assert outcome.status is Status.FAIL
    assert fired(outcome) == [("versions.consistency.driver-differs", None)]
    assert "NVIDIA driver" in outcome.findings[0].fix  # its own fix, not the rebuild of the Python stack


def test_plurality_without_half_still_names_the_minority():
    stacks = {f"n{i}": dict(STACK, kernel=kernel) for i, kernel in enumerate(["6.8.0", "6.8.0", "6.5.0", "6.2.0"])}
    _, outcome = run(nodes_with(stacks))
    assert fired(outcome) == [("versions.consistency.kernel-differs", "n2"), ("versions.consistency.kernel-differs", "n3")]


def test_many_nodes_are_listed_briefly():
    stacks = {f"gpu{i:02d}": copy.deepcopy(STACK) for i in range(1, 11)}
    stacks["gpu10"]["numpy"] = "1.26.4"
    _, outcome = run(nodes_with(stacks))
    assert f"node gpu10: numpy 1.26.4 differs from {STACK['numpy']} on gpu01, gpu02, gpu03, gpu04, gpu05 and 4 more" \
        == outcome.summary


def test_node_without_facts_is_noted_and_the_rest_compared():
    facts, outcome = run(cluster("cluster_one_without_facts.json"))
    assert facts["no_facts"] == ["gpu04"]
    assert outcome.status is Status.WARN
    assert finding_ids(outcome) == ["versions.consistency.no-facts"]
    assert next(m for m in outcome.measurements if m.name == "nodes compared").value == 3


def test_unreachable_nodes_are_noted():
    _, outcome = run(cluster("cluster_identical_3.json"), unreachable=["gpu09"])
    assert outcome.status is Status.PASS
    assert any("unreachable, not compared: gpu09" in d for d in outcome.details)


@pytest.mark.parametrize("nodes", [1, 0])
def test_one_or_no_node_skips_unless_several_are_expected(nodes):
    data = nodes_with({f"gpu0{i}": STACK for i in range(nodes)})
    _, outcome = run(data)
    assert outcome.status is Status.SKIP
    assert finding_ids(outcome) == ["versions.consistency.single-node"]
    _, expected = run(data, Expect(nodes=4))
    assert expected.status is Status.ERROR
    assert finding_ids(expected) == ["versions.consistency.too-few-stacks"]


def test_expected_to_run_when_several_nodes_are_expected():
    assert CHECK.expected_to_run(Expect(nodes=2))
    assert not CHECK.expected_to_run(Expect(nodes=1))
    assert not CHECK.expected_to_run(Expect())


def test_fields_are_configurable():
    stacks = {n: copy.deepcopy(STACK) for n in ("a", "b", "c")}
    stacks["c"]["kernel"] = "5.15.0-105-generic"
    assert run(nodes_with(stacks))[1].status is Status.FAIL
    fields = [f for f in CHECK.params_from().fields if f != "kernel"]
    assert run(nodes_with(stacks), fields=fields)[1].status is Status.PASS


def test_a_field_one_node_does_not_record_is_noted():
    stacks = {n: copy.deepcopy(STACK) for n in ("a", "b", "c")}
    del stacks["c"]["glibc"]
    _, outcome = run(nodes_with(stacks))
    assert outcome.status is Status.PASS
    assert any("glibc: not recorded on c" in d for d in outcome.details)


def test_compare_field_directly():
    assert compare_field("torch", {"a": "2.5.1", "b": "2.5.1"}) == []
    assert compare_field("tensorflow", {"a": None, "b": None, "c": "2.17.0"}) == [
        "node c: tensorflow 2.17.0 differs from not installed on a, b"]


def test_two_nodes_without_any_stack_compared_nothing_and_do_not_pass():
    data = {"nodes": ["gpu01", "gpu02"], "node_facts": {}}
    _, outcome = run(data)
    assert outcome.status is Status.ERROR
    assert [f.id for f in outcome.findings] == ["versions.consistency.too-few-stacks"]


def test_differences_are_findings_naming_the_node():
    stacks = {n: copy.deepcopy(STACK) for n in ("a", "b", "c")}
    stacks["c"]["torch"] = "2.4.0"
    _, outcome = run(nodes_with(stacks))
    assert fired(outcome) == [("versions.consistency.torch-differs", "c")]
    assert outcome.remediation == [VersionsConsistency.fixes["torch-differs"]]


def test_a_field_the_team_adds_is_compared_with_the_rebuild_fix():
    stacks = {n: dict(STACK, cuda_home="/usr/local/cuda-12.4") for n in ("a", "b", "c")}
    stacks["c"]["cuda_home"] = "/usr/local/cuda-12.1"
    _, outcome = run(nodes_with(stacks), fields=["cuda_home"])
    assert fired(outcome) == [("versions.consistency.cuda-home-differs", "c")]
    assert outcome.findings[0].fix == VersionsConsistency.fixes["torch-differs"]
