"""Comparing two runs: planted regressions are found, equal runs are quiet, and a run carries its comparison."""

from __future__ import annotations

import copy
import json

import pytest

from preflight.core.compare import (
    BASELINE_CHECK_ID,
    Diff,
    FigureChange,
    StatusChange,
    VersionChange,
    attach,
    baseline_blocks,
    baseline_of,
    compare,
)
from preflight.reporters import baseline as words
from preflight.core.model import CLUSTER_NODE, Measurement, RunReport, Scope, Status
from preflight.reporters import json_report
from preflight.core.verdict import Verdict, decide
from tests.conftest import DATA, make_report, make_result
from tests.conftest import ROOT


def cluster_run() -> RunReport:
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return RunReport.from_dict(data)


def figure(report: RunReport, check_id: str, node: str, name: str) -> Measurement:
    result = report.result_for(check_id, node)
    assert result is not None
    return next(m for m in result.measurements if m.name == name)


@pytest.fixture
def old() -> RunReport:
    return cluster_run()


@pytest.fixture
def new(old) -> RunReport:
    later = copy.deepcopy(old)
    later.started_at, later.finished_at = "2026-12-06T10:00:00+00:00", "2026-12-06T10:15:00+00:00"
    return later


def test_two_equal_runs_have_no_change(old, new):
    result = compare(old, new)
    assert result.unchanged and result.regressions == [] and result.exit_code == 0
    assert result.compared_results == len(old.results)
    assert result.compared_figures == sum(len(r.measurements) for r in old.results)
    assert words.headline(result).startswith("no regression against the baseline run of 2026-11-29 10:00")


def test_a_lower_bandwidth_is_a_regression(old, new):
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu02").value = 70.0  # was 93.6, at least 10 needed
    (change,) = compare(old, new).regressions
    assert isinstance(change, FigureChange)
    assert (change.check_id, change.node, change.old, change.new, change.comparison) == \
        ("net.bandwidth", "gpu01 -> gpu02", 93.6, 70.0, ">=")
    assert change.change == pytest.approx(70.0 / 93.6 - 1)
    assert words.describe(change) == "net.bandwidth gpu01 -> gpu02: 93.6 Gbit/s -> 70 Gbit/s (-25%)"


def test_a_higher_figure_where_lower_is_better_is_a_regression(old, new):
    m = figure(new, "collectives.local", "gpu01", "nccl (8 GPUs): wrong elements (known sums, random data)")
    m.value = 3  # at most 0: any is worse
    latency = figure(old, "collectives.local", "gpu01", "nccl (8 GPUs): latency at 1 KiB")
    latency.comparison, latency.threshold = "<=", 200.0
    figure(new, "collectives.local", "gpu01", "nccl (8 GPUs): latency at 1 KiB").value = latency.value * 1.5
    kinds = {(c.name, c.kind) for c in compare(old, new).figures}
    assert ("nccl (8 GPUs): latency at 1 KiB", "regression") in kinds
    assert ("nccl (8 GPUs): wrong elements (known sums, random data)", "regression") in kinds


def test_changes_within_the_tolerance_are_not_reported(old, new):
    m = figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu02")
    m.value = m.value * 0.95
    assert compare(old, new).figures == []
    assert [c.kind for c in compare(old, new, tolerance=0.01).figures] == ["regression"]


def test_better_figures_are_improvements_not_regressions(old, new):
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu02 -> gpu03").value = 92.0
    result = compare(old, new)
    assert result.regressions == [] and [c.kind for c in result.improvements] == ["improvement"]


def test_figures_judged_against_nothing_are_information(old, new):
    figure(new, "scaling.multi_gpu", "gpu01", "effective devices on 8 GPUs").value = 5.0  # was 6.9, no threshold
    (change,) = compare(old, new).figures
    assert change.kind == "info" and change.comparison is None
    assert compare(old, new).exit_code == 0


def test_text_figure_that_turns_unacceptable_is_a_regression(old, new):
    m = figure(new, "checkpoint.roundtrip", "gpu02", "resumed weights equal uninterrupted run")
    m.value, m.ok = "no", False
    (change,) = compare(old, new).regressions
    assert (change.old, change.new, change.kind) == ("yes", "no", "regression")


def test_pass_turned_fail_is_a_regression_and_fail_turned_pass_an_improvement(old, new):
    new.result_for("gpu.visibility", "gpu02").status = Status.FAIL
    new.result_for("net.bandwidth", CLUSTER_NODE).status = Status.PASS
    result = compare(old, new)
    assert [(c.check_id, c.node, c.old, c.new, c.kind) for c in result.statuses] == [
        ("gpu.visibility", "gpu02", "PASS", "FAIL", "regression"),
        ("net.bandwidth", CLUSTER_NODE, "FAIL", "PASS", "improvement"),
    ]
    assert result.exit_code == 1


def test_pass_turned_skip_lost_coverage_and_counts_as_worse(old, new):
    new.result_for("checkpoint.roundtrip", "gpu01").status = Status.SKIP
    assert [c.kind for c in compare(old, new).statuses] == ["regression"]


def test_a_version_change_is_found_and_grouped_by_nodes(old, new):
    for node in ("gpu01", "gpu02", "gpu03"):
        new.result_for("versions.pinned", node).facts["stack"]["torch"] = "2.5.0"
    new.result_for("versions.pinned", "gpu03").facts["stack"]["nccl"] = "2.21.5"
    result = compare(old, new)
    assert [(c.package, c.old, c.new, c.nodes, c.kind) for c in result.versions] == [
        ("torch", "2.4.1", "2.5.0", ["gpu01", "gpu02", "gpu03"], "regression"),
        ("nccl", "2.20.5", "2.21.5", ["gpu03"], "regression"),
    ]
    assert result.exit_code == 1
    assert words.describe(result.versions[0]) == "torch 2.4.1 -> 2.5.0 on gpu[01-03]"
    relaxed = compare(old, new, versions_regress=False)
    assert [c.kind for c in relaxed.versions] == ["info", "info"] and relaxed.exit_code == 0


def test_results_only_the_new_run_has_are_information(old, new):
    old.results = [r for r in old.results if r.check_id != "checkpoint.roundtrip"]
    result = compare(old, new)
    assert {(c.old, c.new, c.kind) for c in result.statuses} == {("", "PASS", "info"), ("", "WARN", "info")}
    assert result.exit_code == 0


def test_a_result_gone_from_the_new_run_is_a_regression(old, new):
    """Lost coverage: a check the new run was asked for and gave no result must not make a comparison look clean."""
    new.results = [r for r in new.results if r.check_id != "checkpoint.roundtrip"]
    result = compare(old, new)
    assert {(c.check_id, c.old, c.new, c.kind) for c in result.statuses} == {
        ("checkpoint.roundtrip", "PASS", "", "regression"), ("checkpoint.roundtrip", "WARN", "", "regression")}
    assert result.exit_code == 1
    assert "lost coverage" in words.describe(result.regressions[0])


def test_a_check_the_new_run_was_not_asked_for_lost_nothing(old, new):
    """`--checks net.bandwidth --baseline B --fail-on-regression` is not NO-GO for the checks it leaves out."""
    new.results = [r for r in new.results if r.check_id != "checkpoint.roundtrip"]
    new.planned = [cid for cid in new.planned if cid != "checkpoint.roundtrip"]
    result = compare(old, new)
    gone = [c for c in result.statuses if c.check_id == "checkpoint.roundtrip"]
    assert gone and {c.kind for c in gone} == {"info"} and result.exit_code == 0
    assert "not asked for" in gone[0].summary


def test_a_skip_gone_from_the_new_run_lost_nothing():
    old = make_report([make_result("a.b", "n1", Status.PASS), make_result("c.d", "n1", Status.SKIP, "no GPU")])
    new = make_report([make_result("a.b", "n1", Status.PASS)])
    assert [(c.check_id, c.kind) for c in compare(old, new).statuses] == [("c.d", "info")]


def test_a_node_gone_from_the_new_run_is_a_regression_and_blocks_with_fail_on_regression():
    old = make_report([make_result("a.b", "n1", Status.PASS), make_result("a.b", "n2", Status.PASS)])
    new = make_report([make_result("a.b", "n1", Status.PASS)])
    result = compare(old, new)
    assert {(c.check_id, c.node, c.kind) for c in result.regressions} == {("a.b", "n2", "regression"),
                                                                           ("node", "n2", "regression")}
    assert "node n2 is not in the new run" in words.render_text(result)
    attach(new, old, fail_on_regression=True)
    assert decide(new).verdict is Verdict.NO_GO
    attach(new, old)
    assert decide(new).verdict is Verdict.GO and decide(new).warnings  # a warning without the flag


def test_noisy_figures_are_marked(old, new):
    m = figure(new, "net.bandwidth", CLUSTER_NODE, "gpu03 -> gpu01")  # samples 61, 93.1, 94.2
    m.value = 40.0
    (change,) = compare(old, new).regressions
    assert change.noisy and words.describe(change).endswith("[noisy]")


def test_tolerance_must_be_sensible(old, new):
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            compare(old, new, bad)


def test_diff_round_trips_through_json(old, new):
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu02").value = 70.0
    new.result_for("gpu.visibility", "gpu02").status = Status.FAIL
    new.result_for("versions.pinned", "gpu01").facts["stack"]["torch"] = "2.5.0"
    result = compare(old, new, old_label="old/results.json")
    again = Diff.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    data = json.loads(result.to_json())
    assert data["regressions"] == 3 and data["exit_code"] == 1


def test_renderers_list_every_regression(old, new):
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu02").value = 70.0
    new.result_for("gpu.visibility", "gpu02").status = Status.FAIL
    new.result_for("versions.pinned", "gpu01").facts["stack"]["torch"] = "2.5.0"
    result = compare(old, new, old_label="old/results.json")
    text = words.render_text(result)
    assert "Regressions:" in text and "gpu.visibility on gpu02: PASS -> FAIL" in text
    assert "torch 2.4.1 -> 2.5.0 on gpu01" in text and "93.6 Gbit/s -> 70 Gbit/s" in text
    md = words.render_markdown(result)
    assert md.startswith("### ❌ Against the baseline run of 2026-11-29 10:00 (`old/results.json`)")
    assert "- gpu.visibility on gpu02: PASS -> FAIL" in md and "&gt;" not in md  # Markdown, not HTML
    quiet = words.render_markdown(compare(old, copy.deepcopy(old)))
    assert quiet.startswith("### ✅") and "Regressions" not in quiet


def test_headline_counts_each_kind(old, new):
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu02").value = 70.0
    figure(new, "net.bandwidth", CLUSTER_NODE, "gpu01 -> gpu03").value = 70.0
    new.result_for("gpu.visibility", "gpu02").status = Status.FAIL
    assert words.headline(compare(old, new)).startswith(
        "1 status got worse and 2 figures regressed by more than 10% against the baseline run of 2026-11-29 10:00; "
        "first: gpu.visibility on gpu02: PASS -> FAIL")


# -- inside a run ------------------------------------------------------------------------------------

def passing_run() -> RunReport:
    return make_report([make_result("net.bandwidth", CLUSTER_NODE, Status.PASS, scope=Scope.CLUSTER, measurements=[
        Measurement("a -> b", 93.0, "Gbit/s", 10.0, ">=", True)])], nodes=["a", "b"])


def test_a_run_without_regressions_carries_a_passing_comparison():
    report = passing_run()
    attach(report, passing_run(), label="base/results.json")
    assert report.baseline is not None and report.baseline["old_label"] == "base/results.json"
    assert report.result_for(BASELINE_CHECK_ID, CLUSTER_NODE) is None  # a field of the report, not a result
    assert decide(report).verdict is Verdict.GO and not baseline_blocks(report)


def test_regressions_warn_by_default_and_block_with_fail_on_regression():
    baseline = passing_run()
    report = passing_run()
    report.results[0].measurements[0].value = 40.0  # still above the 10 needed: only the baseline sees it
    attach(report, baseline)
    decision = decide(report)
    assert decision.verdict is Verdict.GO and not baseline_blocks(report)
    assert [(r.check_id, r.status) for r in decision.warnings] == [(BASELINE_CHECK_ID, Status.WARN)]

    attach(report, baseline, fail_on_regression=True)
    assert [r.check_id for r in report.results] == ["net.bandwidth"]  # nothing added to the results
    assert baseline_blocks(report)
    blocking = decide(report)
    assert blocking.verdict is Verdict.NO_GO and blocking.blocking[0].check_id == BASELINE_CHECK_ID
    assert blocking.blocking[0].status is Status.FAIL
    assert "a -> b: 93 Gbit/s -> 40 Gbit/s" in words.describe(Diff.from_dict(
        {k: v for k, v in report.baseline.items() if k != "fail_on_regression"}).regressions[0])

    report.fail_on = "warn"
    attach(report, baseline)
    assert decide(report).verdict is Verdict.NO_GO  # a warning blocks when the run blocks on warnings


def test_diff_module_is_pure_comparison():
    # No import circle: diff imports the model only, never a reporter.
    import ast
    import inspect

    from preflight.core import compare as diff

    tree = ast.parse(inspect.getsource(diff))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(name and name.startswith("preflight.reporters") for name in imported), imported
    assert not hasattr(diff, "render_markdown") and not hasattr(diff, "baseline_result")


def test_comparison_ignores_earlier_comparisons():
    baseline = passing_run()
    attach(baseline, passing_run())
    report = passing_run()
    result = compare(baseline, report)
    assert result.unchanged


def test_run_report_with_a_comparison_matches_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    report = passing_run()
    attach(report, passing_run())
    schema = json.loads((ROOT / "preflight" / "schema" / "run-report.schema.json").read_text())
    data = json.loads(json_report.render(report))
    jsonschema.validate(data, schema)
    assert RunReport.from_dict(data).baseline == report.baseline


def test_change_records_are_plain_data():
    assert StatusChange("a", "n", "PASS", "FAIL", "regression").kind == "regression"
    assert VersionChange("torch", "1", "2").kind == "regression"


# -- runs made differently ---------------------------------------------------------------------------

def _at_level_quick(report: RunReport, check_id: str) -> None:
    from preflight.core.model import Finding

    report.level = "quick"
    for result in report.results_for(check_id):
        result.status, result.measurements = Status.SKIP, []
        result.findings = [Finding(f"{check_id}.skipped-at-level", Status.SKIP, "not run at --level quick: slow",
                                   "run with --level standard to include it")]


def test_a_skip_the_run_level_made_is_neither_regression_nor_improvement(old, new):
    _at_level_quick(new, "checkpoint.roundtrip")  # standard PASS/WARN -> quick SKIP
    result = compare(old, new)
    changes = [c for c in result.statuses if c.check_id == "checkpoint.roundtrip"]
    assert changes and all(c.kind == "info" and c.level_skip for c in changes)
    assert result.regressions == [] and result.improvements == [] and result.exit_code == 0
    assert result.context[0] == "the run level differs: standard before, quick now"
    back = compare(new, old)  # quick -> standard: SKIP -> WARN is no improvement either
    assert back.improvements == [] and back.regressions == []


def test_different_profiles_and_versions_are_said(old, new):
    new.profile, new.preflight_version = "h100-8x", "0.2.0"
    said = compare(old, new).context
    assert "the profile differs: none before, h100-8x now" in said
    assert "the preflight version differs: 0.1.0 before, 0.2.0 now" in said
    assert compare(old, copy.deepcopy(old)).context == []


def test_only_declared_versions_are_version_changes(old, new):
    for report, probed in ((old, True), (new, False)):
        for result in report.results_for("versions.pinned"):
            result.facts["stack"]["builds_probed"] = probed
    assert compare(old, new).versions == []  # a flag, not a version (no declaration: text entries only)
    for report in (old, new):
        for result in report.results_for("versions.pinned"):
            result.facts["stack_versions"] = ["torch"]
    new.result_for("versions.pinned", "gpu01").facts["stack"]["numpy"] = "2.0.0"
    new.result_for("versions.pinned", "gpu01").facts["stack"]["torch"] = "2.5.0"
    assert [c.package for c in compare(old, new).versions] == ["torch"]  # numpy is not declared here


def test_every_rendering_says_how_the_runs_differ(old, new):
    _at_level_quick(new, "checkpoint.roundtrip")
    result = compare(old, new)
    text = words.render_text(result)
    assert "How the runs differ:\n  The run level differs: standard before, quick now" in text
    other = text.split("Other changes:")[1]
    assert "checkpoint.roundtrip on gpu01: WARN -> SKIP (the run levels differ" in other or \
        "checkpoint.roundtrip on gpu01: PASS -> SKIP (the run levels differ" in other
    assert "Regressions:" not in text
    assert "the run level differs" in words.headline(result)
    assert "The run level differs" in words.render_markdown(result)


def test_a_regression_of_a_figure_the_run_marks_noisy_does_not_block_fail_on_regression():
    baseline = passing_run()
    report = passing_run()
    m = report.results[0].measurements[0]
    m.value, m.samples = 40.0, [10.0, 40.0, 90.0]  # spread (90 - 10) / 40 = 200%: noise, not a change
    attach(report, baseline, fail_on_regression=True)
    comparison = baseline_of(report)
    assert comparison.regressions and comparison.regressions[0].noisy  # still listed, marked noisy
    assert not baseline_blocks(report)
    decision = decide(report)
    assert decision.verdict is Verdict.GO
    assert [(r.check_id, r.status) for r in decision.warnings] == [(BASELINE_CHECK_ID, Status.WARN)]
    m.samples = [39.0, 40.0, 41.0]  # the same drop, measured steadily, blocks
    attach(report, baseline, fail_on_regression=True)
    assert decide(report).verdict is Verdict.NO_GO


def test_diff_leads_with_regressions_and_folds_per_step_noise():
    from preflight.core.model import FIGURE_STEP

    def run(step_ms: list[float], busbw: float, level: str) -> RunReport:
        steps = [Measurement(f"step time at step {i}", v, "ms", figure=FIGURE_STEP, series="step time", at=i,
                             better="lower") for i, v in enumerate(step_ms)]
        return make_report([make_result("canary.training", "vm", Status.PASS, measurements=steps),
                            make_result("collectives.local", "vm", Status.PASS, measurements=[
                                Measurement("busbw", busbw, "GB/s", 1.0, ">=", True)])], level=level)

    old = run([10.0 + (i % 3) for i in range(40)], 10.0, "standard")
    new = run([10.0 + ((i + 1) % 3) * 2 for i in range(40)], 5.0, "thorough")
    diff = compare(old, new)
    assert [c.name for c in diff.regressions] == ["busbw"]  # a step's time is noise, not a regression
    text = words.render_text(diff)
    body = text.splitlines()[2:]
    assert body[0] == "Regressions:"  # before how the runs differ
    assert sum("step time at step" in line for line in text.splitlines()) == 0
    assert any("per-step figures moved" in line for line in text.splitlines())
