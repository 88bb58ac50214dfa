"""One cause, one finding: nodes that cannot be reached are one blocking finding with their node set,
counted as the reports list it; a terminal line is wrapped between words."""

from __future__ import annotations

from preflight.core.check import Expect, too_few_nodes
from preflight.core.model import CheckResult, Finding, NodeInfo, Scope, Status
from preflight.core.node_causes import NODES_CHECK
from preflight.core.verdict import Verdict, decide
from preflight.reporters import markdown, terminal
from preflight.reporters.view import build_view
from tests.conftest import make_report, make_result

NODE_CHECKS = ["node.environment", "gpu.visibility", "versions.pinned", "checkpoint.roundtrip",
               "dataloader.throughput", "collectives.local", "scaling.multi_gpu", "canary.training"]
CLUSTER_CHECKS = ["net.bandwidth", "collectives.cluster", "storage.shared", "scaling.multi_node"]


def cross_node_result(cid: str, unreachable: list[str]) -> CheckResult:
    class Declared:
        id = cid

        @classmethod
        def finding(cls, suffix, level, message, fix=None):
            return Finding(f"{cid}.{suffix}", level, message, fix or "")

    outcome = too_few_nodes(Declared, [], unreachable, Expect(), single="", nothing="nothing measured")
    return CheckResult(cid, "cluster", outcome.status, outcome.summary, title=cid, scope=Scope.CLUSTER,
                       findings=outcome.findings)


def two_unreachable_nodes():
    results = [make_result(cid, node, Status.ERROR, f"cannot reach {node} over SSH: ssh: Could not resolve "
                                                    f"hostname {node}: Name or service not known")
               for node in ("node1", "node2") for cid in NODE_CHECKS]
    results += [cross_node_result(cid, ["node1", "node2"]) for cid in CLUSTER_CHECKS]
    report = make_report(results, nodes=["node1", "node2"])
    report.nodes = [NodeInfo(n, reachable=False, error=f"cannot reach {n} over SSH") for n in ("node1", "node2")]
    return report


def test_two_unreachable_nodes_are_one_blocking_finding_with_their_node_set():
    report = two_unreachable_nodes()
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO
    assert len(decision.blocking) == len(NODE_CHECKS) * 2 + len(CLUSTER_CHECKS)  # the results stay as they are
    view = build_view(report)
    assert [row.id for row in view.blocking] == [f"{NODES_CHECK}.unreachable"]
    [row] = view.blocking
    assert row.message.startswith("cannot reach node[1-2] over SSH") and row.nodes == ["node1", "node2"]
    assert decision.reason.startswith("1 blocking finding: cannot reach node[1-2] over SSH")
    text = markdown.render(report)
    assert "What blocks the verdict" in text and text.count("- 💥") == 1


def test_a_node_cause_on_one_node_of_two_keeps_the_other_nodes_findings():
    results = [make_result(cid, "node1", Status.ERROR, "cannot reach node1 over SSH: timed out") for cid in NODE_CHECKS]
    results += [make_result("node.environment", "node2", Status.FAIL, "shm is small")]
    results += [make_result(cid, "node2", Status.PASS) for cid in NODE_CHECKS[1:]]
    report = make_report(results, nodes=["node1", "node2"])
    report.nodes = [NodeInfo("node1", reachable=False, error="cannot reach node1 over SSH"), NodeInfo("node2")]
    ids = [row.id for row in build_view(report).blocking]
    assert sorted(ids) == sorted([f"{NODES_CHECK}.unreachable", "node.environment.fail"])
    assert decide(report).reason.startswith("2 blocking findings:")


def test_the_headline_counts_one_finding_on_three_nodes_as_one():
    results = [make_result("node.environment", n, Status.FAIL, "shm is small") for n in ("a1", "a2", "a3")]
    report = make_report(results)
    assert decide(report).reason.startswith("1 blocking finding: shm is small (on a[1-3])")
    assert len(build_view(report).blocking) == 1


def test_a_terminal_line_is_wrapped_between_words_never_inside_one():
    report = two_unreachable_nodes()
    text = terminal.render(report, width=60)
    words = set(terminal.render(report).split())
    for line in text.splitlines():
        assert len(line) <= 60 or " " not in line.strip()
        assert all(word in words for word in line.split())  # every piece is a whole word of the unwrapped text
    assert terminal.render(report, width=None) == terminal.render(report)


def test_a_sentence_that_mentions_its_node_still_says_where():
    report = make_report([make_result("node.environment", "vm", Status.FAIL, "hostname 'vm' resolves to loopback")])
    assert "hostname 'vm' resolves to loopback (on vm)" in decide(report).reason
