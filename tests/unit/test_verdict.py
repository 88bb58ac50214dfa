import pytest

from preflight.model import Scope, Status
from preflight.verdict import EXIT_CODES, Verdict, decide
from tests.conftest import make_report, make_result


def test_all_pass_is_go_exit_0():
    report = make_report([make_result(status=Status.PASS), make_result("gpu.visibility", status=Status.PASS)])
    decision = decide(report)
    assert decision.verdict is Verdict.GO and decision.exit_code == 0


def test_warn_alone_is_go_but_listed():
    report = make_report([make_result(status=Status.WARN, summary="nofile low")])
    decision = decide(report)
    assert decision.verdict is Verdict.GO
    assert [r.summary for r in decision.warnings] == ["nofile low"]


def test_fail_on_warn_blocks():
    report = make_report([make_result(status=Status.WARN)], fail_on="warn")
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO and decision.exit_code == 1
    assert decision.blocking[0].status is Status.WARN


@pytest.mark.parametrize("status", [Status.FAIL, Status.ERROR])
def test_fail_or_error_is_no_go(status):
    report = make_report([make_result(status=Status.PASS), make_result("gpu.visibility", status=status)])
    decision = decide(report)
    assert decision.verdict is Verdict.NO_GO and decision.exit_code == 1
    assert [r.check_id for r in decision.blocking] == ["gpu.visibility"]


def test_skip_is_not_silently_green_when_expected():
    skipped = make_result("gpu.visibility", status=Status.SKIP, summary="no NVIDIA driver")
    assert decide(make_report([skipped])).verdict is Verdict.GO
    decision = decide(make_report([skipped], expected=["gpu.visibility"]))
    assert decision.verdict is Verdict.NO_GO
    assert decision.skipped_expected == [skipped]


def test_missing_results_make_it_incomplete_exit_3():
    report = make_report([make_result("node.environment", "node1")], nodes=["node1", "node2"])
    decision = decide(report)
    assert decision.verdict is Verdict.INCOMPLETE and decision.exit_code == 3
    assert decision.missing == [("node.environment", "node2")]


def test_missing_cluster_result_is_incomplete():
    report = make_report([make_result("node.environment", "node1")], planned=["node.environment", "net.bandwidth"],
                         cluster_checks=["net.bandwidth"])
    assert decide(report).missing == [("net.bandwidth", "cluster")]


def test_interrupted_run_without_failures_is_incomplete_but_failures_still_block():
    ok = make_report([make_result(status=Status.PASS)], incomplete=True, incomplete_reason="interrupted")
    assert decide(ok).verdict is Verdict.INCOMPLETE
    bad = make_report([make_result(status=Status.FAIL)], incomplete=True, incomplete_reason="interrupted")
    assert decide(bad).verdict is Verdict.NO_GO


def test_empty_run_is_incomplete():
    assert decide(make_report([])).verdict is Verdict.INCOMPLETE


def test_blocking_is_ordered_worst_first():
    report = make_report([
        make_result("a.warn", status=Status.WARN), make_result("b.fail", status=Status.FAIL),
        make_result("c.error", status=Status.ERROR), make_result("d.cluster", "cluster", Status.FAIL, scope=Scope.CLUSTER),
    ], fail_on="warn")
    assert [r.status for r in decide(report).blocking] == [Status.ERROR, Status.FAIL, Status.FAIL, Status.WARN]


def test_exit_codes_are_distinct():
    assert EXIT_CODES == {Verdict.GO: 0, Verdict.NO_GO: 1, Verdict.INCOMPLETE: 3}
