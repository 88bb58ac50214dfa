"""The kind of a run (preflight.run.kind): the ordinary run and the healthcheck each answer where the
nodes come from, what runs after it, what it writes and its exit code; nothing else asks which it is."""

from __future__ import annotations

from pathlib import Path

from preflight.core.config import Config
from preflight.core.model import Finding, Status
from preflight.core.verdict import decide
from preflight.run import finish as steps
from preflight.run import hook
from preflight.run.kind import ORDINARY, Healthcheck, kind_of
from preflight.run.request import HOSTS, K8S, LOCAL, SLURM, HookRequest, K8sRequest, RunRequest
from tests.conftest import make_report, make_result

HOOK = HookRequest(budget_s=45.0, node="gpu07")


def test_the_request_names_its_kind_and_each_kind_says_where_its_nodes_come_from():
    assert kind_of(RunRequest()) is ORDINARY
    assert kind_of(RunRequest(hook=HOOK)) == Healthcheck(HOOK)
    for request, source in ((RunRequest(), LOCAL), (RunRequest(nodes_file="gpu[01-02]"), HOSTS),
                            (RunRequest(drain=True), SLURM), (RunRequest(k8s=K8sRequest(image="x")), K8S)):
        assert ORDINARY.node_source(request) == source
        # A hook checks the node it runs on, whatever else was asked; --drain acts on that node.
        assert Healthcheck(HOOK).node_source(request) == LOCAL
    assert ORDINARY.local_name() is None and Healthcheck(HOOK).local_name() == "gpu07"
    assert Healthcheck(HookRequest(budget_s=45.0)).local_name() is None


def test_each_kind_has_its_own_after_run_steps_and_only_the_ordinary_run_writes_a_step_summary():
    assert [name for name, _ in ORDINARY.steps] == [name for name, _ in steps.RUN_STEPS]
    assert [name for name, _ in Healthcheck(HOOK).steps] == ["reports", "actions", "history record"]
    assert ORDINARY.step_summary and not Healthcheck(HOOK).step_summary


def test_a_github_step_summary_is_appended_by_the_ordinary_run_alone(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = make_report([make_result("node.environment", "gpu07", Status.PASS, "fine")])
    for kind in (Healthcheck(HOOK), ORDINARY):
        run = steps.Finishing(RunRequest(history="off", formats=("json",)), Config(), tmp_path,
                              lambda kind, text: None, step_summary=kind.step_summary)
        steps.reports(report, run)
        if kind is not ORDINARY:
            assert not summary.exists()
    assert "node.environment" in summary.read_text()


def test_only_the_healthcheck_has_a_budget_and_a_scratch_output(tmp_path):
    assert ORDINARY.budget([], Config(), 0.0) == ({}, {})
    assert ORDINARY.discover_options() == {} and Healthcheck(HOOK).discover_options() == {"limit_s": 15.0}
    out, scratch = Healthcheck(HOOK).output(RunRequest(hook=HOOK))
    try:
        assert scratch and out.is_dir() and out.name.startswith("preflight-healthcheck-")
    finally:
        out.rmdir()
    kept = str(tmp_path / "kept")
    assert Healthcheck(HOOK).output(RunRequest(hook=HOOK, out_dir=kept, formats=("json",))) == \
        ORDINARY.output(RunRequest(out_dir=kept, formats=("json",)))
    assert not ORDINARY.output(RunRequest(out_dir=kept, formats=("json",)))[1]
    assert isinstance(ORDINARY.output(RunRequest(out_dir=kept, formats=("json",)))[0], Path)


def test_the_exit_code_is_the_verdicts_for_a_run_and_the_nodes_own_finding_for_a_healthcheck():
    failed = make_result("node.environment", "gpu07", Status.FAIL, "shm small",
                         findings=[Finding("node.environment.shm-small", Status.FAIL, "shm small")])
    errored = make_result("gpu.visibility", "gpu07", Status.ERROR, "timed out")
    for results in ([failed], [errored], [make_result("node.environment", "gpu07", Status.PASS, "fine")]):
        report = make_report(results)
        assert ORDINARY.exit_code(report, "gpu07") == decide(report).exit_code
        assert Healthcheck(HOOK).exit_code(report, "gpu07") == hook.exit_code(report, "gpu07")
    assert Healthcheck(HOOK).exit_code(make_report([errored]), "gpu07") == hook.EXIT_HEALTHY
    assert ORDINARY.exit_code(make_report([errored]), "gpu07") != 0
