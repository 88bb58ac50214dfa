"""The after-run steps: an ordered list of small named steps, each testable on its own."""

from __future__ import annotations

import json

import pytest

from preflight.core.config import Config
from preflight.core.model import NodeInfo, Status
from preflight.run import finish as steps
from preflight.run.request import HISTORY_AUTO, HISTORY_OFF, HISTORY_ON, RunProblem, RunRequest
from tests.conftest import make_report, make_result


def finishing(tmp_path, said=None, **fields) -> steps.Finishing:
    request = RunRequest(history=HISTORY_OFF, **fields)
    return steps.Finishing(request, Config(), tmp_path, lambda kind, text: (said if said is not None else []).append(
        (kind, text)))


def a_report():
    return make_report([make_result("node.environment", "n1", Status.PASS, "ok")])


def test_the_run_steps_are_in_their_order_and_a_step_is_added_by_one_entry():
    assert [name for name, _ in steps.RUN_STEPS] == ["baseline", "fleet outliers", "history context", "shape",
                                                     "reports", "actions", "history record"]
    added = steps.with_step(steps.RUN_STEPS, "reports", "summary", lambda report, run: None)
    assert [name for name, _ in added][4:7] == ["reports", "summary", "actions"]
    with pytest.raises(ValueError, match="no step 'report'"):
        steps.with_step(steps.RUN_STEPS, "report", "x", lambda report, run: None)
    assert [name for name, _ in steps.without(steps.RUN_STEPS, "baseline")][0] == "fleet outliers"


def test_the_reports_step_writes_each_format_asked_for(tmp_path):
    run = finishing(tmp_path, formats=("json", "md"))
    steps.reports(a_report(), run)
    assert [p.name for p in run.written] == ["results.json", "report.md"] and run.problems == []
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["check_id"] == "node.environment"


def test_a_report_that_cannot_be_written_is_exit_2_after_every_later_step(tmp_path):
    (tmp_path / "results.json").mkdir()  # a directory where the report should go
    ran = []
    run = finishing(tmp_path, formats=("json", "md"))
    later = steps.with_step((("reports", steps.reports),), "reports", "actions", lambda r, f: ran.append("actions"))
    with pytest.raises(RunProblem, match="results.json"):
        steps.finish(a_report(), run, later)
    assert ran == ["actions"]  # the drain still happens
    assert (tmp_path / "report.md").is_file()  # and the other reports are written


def test_a_write_error_during_the_run_is_named_once_the_reports_hold_every_result(tmp_path):
    run = finishing(tmp_path, formats=("json",))
    run.write_error = "cannot write results.jsonl: No space left on device"
    with pytest.raises(RunProblem, match="No space left on device; the reports hold every result"):
        steps.finish(a_report(), run, (("reports", steps.reports),))


def test_history_is_kept_as_the_request_and_the_configuration_say(tmp_path):
    run = finishing(tmp_path)
    for mode, enabled, kept in ((HISTORY_AUTO, True, True), (HISTORY_AUTO, False, False), (HISTORY_ON, False, True),
                                (HISTORY_OFF, True, False)):
        run.request = RunRequest(history=mode)
        run.config.history_enabled = enabled
        assert steps.keeps_history(run) is kept, (mode, enabled)


def test_the_baseline_step_compares_only_when_a_baseline_was_given(tmp_path):
    report, run = a_report(), finishing(tmp_path, baseline_file="old/results.json")
    steps.baseline(report, run)
    assert report.baseline is None
    run.baseline = a_report()
    steps.baseline(report, run)
    assert report.baseline is not None and report.baseline["old_label"] == "old/results.json"


def test_fleet_outliers_need_more_than_one_node(tmp_path):
    report = a_report()
    report.nodes = [NodeInfo(name="n1")]
    steps.fleet_outliers(report, finishing(tmp_path))
    assert [r.check_id for r in report.results] == ["node.environment"]


def test_no_action_without_drain_or_cordon(tmp_path):
    said: list = []
    steps.actions(a_report(), finishing(tmp_path, said))
    assert said == []


def test_the_shape_step_answers_the_requests_shape_and_writes_the_subsets_node_lists(tmp_path):
    from preflight.core.model import CheckResult, Finding
    from preflight.core.shape import Shape
    from preflight.engine.runner import NodeTarget
    from preflight.run.shape import EXCLUDE_FILE, HOSTS_FILE, K8S_FILE
    from preflight.transport.local import LocalTransport

    names = ["gpu01", "gpu02", "gpu03"]
    results = [CheckResult("node.environment", n, Status.PASS, "fine") for n in names[:2]]
    results.append(CheckResult("node.environment", "gpu03", Status.FAIL, "shm small", findings=[
        Finding("node.environment.shm-small", Status.FAIL, "shm small", "grow it")]))
    nodes = [NodeTarget(LocalTransport(n)) for n in names]
    unasked = finishing(tmp_path)
    unasked.nodes = nodes
    report = make_report(results)
    steps.shape(report, unasked)
    assert report.subset is None and not (tmp_path / EXCLUDE_FILE).exists()
    run = finishing(tmp_path, shape=Shape(nodes_multiple_of=2))
    run.nodes = nodes
    steps.shape(report, run)
    assert report.subset["nodes"] == ["gpu01", "gpu02"] and report.subset["slurm_exclude"] == "gpu03"
    assert (tmp_path / EXCLUDE_FILE).read_text() == "gpu03\n"
    assert (tmp_path / HOSTS_FILE).read_text().split() == ["gpu01", "gpu02"]
    assert "gpu01" in (tmp_path / K8S_FILE).read_text()


def test_a_subset_file_that_cannot_be_written_is_a_run_problem_naming_it(tmp_path):
    from preflight.core.model import CheckResult, Finding
    from preflight.core.shape import Shape
    from preflight.run.shape import EXCLUDE_FILE, apply

    (tmp_path / EXCLUDE_FILE).mkdir()
    report = make_report([CheckResult("node.environment", "gpu01", Status.PASS, "fine"),
                          CheckResult("node.environment", "gpu02", Status.FAIL, "shm small", findings=[
                              Finding("node.environment.shm-small", Status.FAIL, "shm small", "grow it")])])
    with pytest.raises(RunProblem, match=f"{EXCLUDE_FILE}: cannot be written"):
        apply(report, Shape(), [], tmp_path)
