"""The shared pieces of the check API that checks lean on."""

import dataclasses

import pytest

from preflight.core.check import TOO_FEW_NODES_FIXES, Check, Expect, outcome_from_findings, param, too_few_nodes
from preflight.core.model import Scope, Status
from tests.conftest import finding_ids


class Pairs(Check):
    id = "demo.pairs"
    scope = Scope.CLUSTER
    fixes = {**TOO_FEW_NODES_FIXES, "slow": "check the link"}


def test_too_few_nodes_skips_one_node_unless_several_are_expected():
    one = too_few_nodes(Pairs, ["n1"], [], Expect(), single="nothing to pair", nothing="no pair measured")
    assert one.status is Status.SKIP and finding_ids(one) == ["demo.pairs.one-node"]
    assert one.remediation == []  # one node is not a fault: nothing to fix
    expected = too_few_nodes(Pairs, ["n1"], [], Expect(nodes=3), single="nothing to pair", nothing="no pair measured")
    assert expected.status is Status.ERROR and finding_ids(expected) == ["demo.pairs.nodes-missing"]
    assert expected.remediation == [TOO_FEW_NODES_FIXES["nodes-missing"]]


def test_too_few_nodes_names_the_unreachable_and_lets_two_through():
    lost = too_few_nodes(Pairs, ["n1"], ["n2", "n3"], Expect(), single="-", nothing="no pair measured")
    assert lost.status is Status.ERROR and finding_ids(lost) == ["demo.pairs.nodes-unreachable"]
    assert "n2, n3" in lost.findings[0].message  # the unreachable nodes are named
    assert too_few_nodes(Pairs, ["n1", "n2"], ["n3"], Expect(nodes=3), single="-", nothing="-") is None


def test_a_finding_takes_its_fix_from_its_kind_not_from_a_position():
    slow = Pairs.finding("slow", Status.FAIL, "a slow link", node="n1 -> n2")
    assert (slow.id, slow.fix, slow.node) == ("demo.pairs.slow", "check the link", "n1 -> n2")
    # A fix of its own for this occurrence, and none at PASS (nothing to fix).
    assert Pairs.finding("slow", Status.WARN, "x", fix="check eth1").fix == "check eth1"
    assert Pairs.finding("slow", Status.PASS, "fine").fix == ""


def test_a_finding_worse_than_pass_without_a_fix_is_a_mistake_in_the_check():
    with pytest.raises(ValueError, match="demo.pairs: finding kind 'undeclared'"):
        Pairs.finding("undeclared", Status.FAIL, "something broke")
    # A SKIP may say on purpose that there is nothing to fix, or that it does not apply here.
    assert Pairs.finding("cpu-node", Status.SKIP, "no GPU here", fix="").fix == ""
    assert Pairs.finding("one-gpu.not-applicable", Status.SKIP, "one GPU only").fix == ""
    with pytest.raises(ValueError):
        Pairs.finding("cpu-node", Status.SKIP, "no GPU here")


def test_outcome_details_list_every_fired_finding_then_the_notes():
    findings = [Pairs.finding("slow", Status.FAIL, "a slow link"), Pairs.finding("slow", Status.PASS, "a fine link")]
    outcome = outcome_from_findings(findings, passed="", notes=["measured 3 links"])
    assert outcome.details == ["a slow link", "measured 3 links"]
    assert outcome_from_findings(findings, passed="").details == []  # one finding fired: the summary says it


def test_hooks_the_planner_reads_are_declared_with_their_defaults():
    assert (Check.needs, Check.role, Check.hook, Check.headlines, Check.alarm_figures, Check.fixes) == \
        (None, "", False, (), {}, {})
    assert Check.prepare_on_coordinator({"a": 1}, None) == {"a": 1}


def test_param_declares_kind_and_meaning_in_the_field():
    @dataclasses.dataclass
    class Params:
        floor: float = param(1.0, kind="threshold", help="lowest rate (GB/s)")
        sizes: list[int] = param(kind="size", factory=lambda: [8, 1024], help="message sizes (bytes)")

    class Demo(Check):
        id = "demo.params"

    Demo.Params = Params
    fields = {f.name: f for f in dataclasses.fields(Params)}
    assert fields["floor"].metadata["preflight.kind"] == "threshold"
    assert Params().sizes == [8, 1024] and Params().sizes is not Params().sizes
    assert Demo.param_docs() == {"floor": "lowest rate (GB/s)", "sizes": "message sizes (bytes)"}
    with pytest.raises(ValueError):
        param(1, kind="percentage", help="-")
    with pytest.raises(ValueError):
        param("a", kind="choice", help="-")  # a choice names its choices
