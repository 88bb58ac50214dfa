"""Plain-language key findings, the cluster at a glance, and noisy figures: pure functions of the report."""

from __future__ import annotations

import copy
import json

import pytest

from preflight.core.check import measure
from preflight.core.model import (
    CLUSTER_NODE,
    FIGURE_LINK,
    FIGURE_RATE,
    FIGURE_SCALING,
    FIGURE_SIZE,
    Finding,
    Measurement,
    NodeInfo,
    RunReport,
    Scope,
    Status,
)
from preflight.reporters import html, markdown, terminal
from preflight.reporters.numbers import number as short
from preflight.reporters.view import (
    UNREACHABLE_FIX,
    build_view,
    key_findings,
    noisy_figures,
    sentence_noisy,
    when,
    where,
)
from tests.conftest import DATA, make_report, make_result


def cluster_run() -> RunReport:
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return RunReport.from_dict(data)


def one_check(*measurements: Measurement, status: Status = Status.PASS, node: str = "n1",
              title: str = "Acme") -> RunReport:
    return make_report([make_result("acme.thing", node, status, title=title, measurements=list(measurements))])


def test_sentences_come_from_declarations_of_any_check():
    link = one_check(measure("x", 4.2, "Gbps", at_least=10, figure=FIGURE_LINK, at="gpu03 -> gpu04"),
                     measure("y", 93.6, "Gbps", at_least=10, figure=FIGURE_LINK, at="gpu04 -> gpu03"),
                     status=Status.FAIL)
    assert [k.text for k in key_findings(link)] == [
        "The slowest link, gpu03 -> gpu04, carries 4.2 Gbps, below the 10 Gbps the cluster needs"]
    fine = one_check(measure("x", 93.6, "Gbit/s", at_least=10.0, figure=FIGURE_LINK, at="a -> b"))
    assert [k.text for k in key_findings(fine)] == [
        "The slowest link, a -> b, carries 93.6 Gbit/s, at least the 10 Gbit/s the cluster needs"]
    scaling = one_check(*[measure("t", v, "samples/s", figure=FIGURE_SCALING, series="ddp", at=n)
                          for n, v in ((1, 100.0), (2, 190.0), (8, 690.0))])
    assert [k.text for k in key_findings(scaling)] == ["8 devices deliver the throughput of 6.9 (86% efficiency)"]
    across = make_report([make_result("acme.nodes", CLUSTER_NODE, scope=Scope.CLUSTER, measurements=[
        measure("t", v, "samples/s", figure=FIGURE_SCALING, series="ddp", at=n) for n, v in ((1, 100.0), (4, 360.0))])])
    assert [k.text for k in key_findings(across)] == ["4 nodes deliver the throughput of 3.6 (90% efficiency)"]
    rate = one_check(measure("s", 0.62, "GB/s", at_least=1.0, figure=FIGURE_RATE, series="write", at="torch.save"),
                     measure("s", 3.21, "GB/s", at_least=1.0, figure=FIGURE_RATE, series="read", at="torch.save"),
                     status=Status.WARN)
    assert [k.text for k in key_findings(rate)] == [
        "torch.save write is 0.62 GB/s, below the 1 GB/s needed (read 3.2 GB/s)"]


def test_size_and_noisy_sentences():
    sized = one_check(measure("b", 19.3, "GB/s", figure=FIGURE_SIZE, series="nccl (8 GPUs)", at=1 << 20),
                      measure("b", 441.0, "GB/s", at_least=460.0, figure=FIGURE_SIZE, series="nccl (8 GPUs)",
                              at=1 << 30), status=Status.FAIL)
    assert [k.text for k in key_findings(sized)] == [
        "NCCL (8 GPUs) reaches 441 GB/s at 1 GiB, below the 460 GB/s needed"]
    report = make_report([make_result("a.b", "n1", measurements=[
        Measurement("x", 1.0, "s", samples=[1.0, 1.5, 2.0]), Measurement("y", 1.0, "s", samples=[1.0, 1.05, 1.1])])])
    figures = noisy_figures(report, 0.2)
    assert [(f.name, f.node, round(f.spread, 3)) for f in figures] == [("x", "n1", 0.667)]
    assert sentence_noisy(figures, 0.2) == ("1 figure varied across repeats by more than 20% of its median and is "
                                            "flagged as noisy: x on n1 (spread 67% over 3 runs)")
    assert "x (spread 67% over 3 runs)" in sentence_noisy(figures, 0.2, several_nodes=False)
    # The same spread, written the same way, in the table of every report.
    assert "spread 67% over 3 runs" in markdown.render(report) and "spread 67% over 3 runs" in html.render(report)


def test_short_figures():
    assert [short(v) for v in (4.2, 0.42, 1.916, 4.0, 10.0, 29.923, 182.3, 20010.0, 0.0)] == \
        ["4.2", "0.42", "1.9", "4", "10", "29.9", "182", "20,010", "0"]


def test_cluster_results_read_across_the_cluster():
    assert where(CLUSTER_NODE, cluster=True) == "across the cluster" and where("gpu01") == "on gpu01"
    assert where(CLUSTER_NODE) == "on cluster"  # a host may be called "cluster": the scope says which
    view = build_view(cluster_run())
    net = [f for f in view.blocking if f.check_id == "net.bandwidth"]
    assert net and net[0].where == "across the cluster"
    assert "net.bandwidth across the cluster:" in terminal.render(cluster_run())


def test_key_findings_of_a_cluster_run_blocking_first():
    texts = [(k.blocking, k.status, k.text) for k in build_view(cluster_run()).key_findings]
    assert texts == [
        (True, "FAIL", "On gpu03, the worst of 3 nodes, nccl reaches 441 GB/s at 1 GiB, below the 460 GB/s needed"),
        (True, "FAIL", "The slowest link, gpu02 -> gpu03, carries 4.2 Gbit/s, below the 10 Gbit/s the cluster needs"),
        (False, "WARN", "On gpu01, the worst of 3 nodes, 8 devices deliver the throughput of 6.9 (86% efficiency)"),
        # The loader is judged against no demand here (the scaling figure is not the team's model): no need.
        (False, "WARN", "On gpu02, the worst of 3 nodes, torch DataLoader supply is 14,336 samples/s"),
        (False, "WARN", "On gpu03, the worst of 3 nodes, torch.save write is 0.62 GB/s, below the 1 GB/s needed "
                        "(read 3.2 GB/s)"),
        (False, "WARN", "1 figure varied across repeats by more than 20% of its median and is flagged as noisy: "
                        "gpu03 -> gpu01 (spread 36% over 3 runs)"),
    ]


def test_one_node_findings_name_no_node():
    report = cluster_run()
    report.results = [r for r in report.results if r.node in ("gpu01", CLUSTER_NODE) and r.check_id != "net.bandwidth"]
    report.nodes = report.nodes[:1]
    texts = [k.text for k in key_findings(report)]
    assert "8 devices deliver the throughput of 6.9 (86% efficiency)" in texts
    assert not any("gpu01" in t for t in texts)


def test_slowest_link_from_measurements_when_no_matrix_was_recorded(sample_report):
    texts = [k.text for k in build_view(sample_report).key_findings]
    assert texts == ["The slowest link, gpu01 -> gpu02, carries 4.2 Gbps, below the 10 Gbps the cluster needs"]


def test_no_figures_no_findings():
    report = make_report([make_result("node.environment", "n1", Status.PASS)])
    assert build_view(report).key_findings == []
    assert "No throughput, bandwidth or loader figures" in html.render(report)


def test_noisy_threshold_is_configurable_and_shown_in_html_and_markdown():
    report = make_report([make_result("a.b", "n1", Status.PASS, measurements=[
        Measurement("throughput", 100.0, "samples/s", 50.0, ">=", True, [70.0, 100.0, 110.0])])])
    assert build_view(report).noisy and "noisy" in html.render(report)
    assert "⚠️ noisy" in markdown.render(report) and "1 noisy figure" in markdown.render(report)
    relaxed = build_view(report, noisy_spread=0.5)
    assert relaxed.noisy == [] and not relaxed.is_noisy(report.results[0].measurements[0])
    assert "noisy" not in html.render(report, noisy_spread=0.5).split("</style>")[1]
    assert "noisy" not in markdown.render(report, noisy_spread=0.5)


def test_cluster_at_a_glance():
    rows = dict(build_view(cluster_run()).at_a_glance)
    assert rows["Nodes"] == "3: gpu[01-03]"
    assert rows["GPUs"] == "24 x NVIDIA H100 80GB HBM3 (8 per node)"
    assert rows["Frameworks"] == "torch 2.4.1 (CUDA 12.4, cuDNN 90100, NCCL 2.20.5)"
    assert rows["Software"].startswith("Python 3.11.9, numpy 1.26.4, NVIDIA driver 550.54.15")
    assert rows["When"] == "2026-11-29 10:00:00 UTC, took 14m 32s"


def test_at_a_glance_says_when_versions_differ_and_falls_back_to_other_facts():
    report = cluster_run()
    drifted = report.result_for("versions.pinned", "gpu03")
    drifted.facts = copy.deepcopy(drifted.facts)
    drifted.facts["stack"]["torch"] = "2.5.0"
    assert "differs across nodes" in dict(build_view(report).at_a_glance)["Frameworks"]
    report.results = [r for r in report.results if "stack" not in r.facts and "nvml" not in r.facts]
    rows = dict(build_view(report).at_a_glance)
    assert rows["Frameworks"] == "torch 2.4.1" and "GPUs" not in rows


def test_at_a_glance_counts_gpus_per_node_where_they_differ_and_says_when_none_were_found():
    report = cluster_run()
    inventory = report.result_for("gpu.visibility", "gpu03")
    inventory.facts = copy.deepcopy(inventory.facts)
    inventory.facts["nvml"]["gpus"] = inventory.facts["nvml"]["gpus"][:4]
    assert dict(build_view(report).at_a_glance)["GPUs"] == \
        "20 x NVIDIA H100 80GB HBM3 (8 on gpu[01-02], 4 on gpu03)"
    for result in report.results:
        if result.check_id == "gpu.visibility":
            result.facts = copy.deepcopy(result.facts)
            result.facts["nvml"]["gpus"], result.facts["torch"]["devices"] = [], []
    assert dict(build_view(report).at_a_glance)["GPUs"] == "none found"


@pytest.mark.parametrize("stamp, text", [
    ("2026-11-29T10:00:00+00:00", "2026-11-29 10:00:00 UTC"),
    ("2026-11-29T10:00:00.123456+01:00", "2026-11-29 10:00:00+01:00"),
    ("not a time", "not a time"),
])
def test_when(stamp, text):
    assert when(stamp) == text


def test_cluster_scope_results_go_to_the_cluster_table():
    report = make_report([make_result("net.bandwidth", CLUSTER_NODE, Status.PASS, scope=Scope.CLUSTER),
                          make_result("node.environment", "n1")])
    view = build_view(report)
    assert [r.check_id for r in view.cluster_results] == ["net.bandwidth"]
    assert "Across the cluster" in html.render(report)


def test_a_figure_that_meets_its_need_is_not_blamed_for_its_checks_other_failures():
    report = cluster_run()
    for node in ("gpu01", "gpu02", "gpu03"):
        report.result_for("checkpoint.roundtrip", node).status = Status.FAIL  # say, the resume test failed
    report.result_for("checkpoint.roundtrip", "gpu03").measurements = [
        m for m in report.result_for("checkpoint.roundtrip", "gpu03").measurements if "write" not in m.name]
    (finding,) = [k for k in key_findings(report) if k.check_id == "checkpoint.roundtrip"]
    assert finding.text == "On gpu02, the worst of 3 nodes, torch.save write is 2 GB/s, at least the 1 GB/s needed " \
                           "(read 3.4 GB/s)"
    assert (finding.status, finding.blocking) == ("PASS", False)


def test_the_judged_backend_speaks_for_all_reduce():
    report = cluster_run()
    result = report.result_for("collectives.local", "gpu03")
    # A gloo fallback beside NCCL, judged against nothing: the judged backend speaks for the group.
    result.measurements += [measure("gloo busbw", 1.0, "GB/s", figure=FIGURE_SIZE, series="gloo (2 processes)",
                                    at=size) for size in (1 << 20, 1 << 30)]
    (finding,) = [k for k in key_findings(report) if k.check_id == "collectives.local"]
    assert "nccl reaches 441 GB/s" in finding.text and finding.node == "gpu03" and finding.blocking


def test_sentences_keep_the_spelling_of_names_they_start_with():
    from preflight.reporters.view import _capital

    assert _capital("tensorflow checkpoints write at 1 GB/s") == "TensorFlow checkpoints write at 1 GB/s"
    assert _capital("torch.save checkpoints write at 1 GB/s") == "torch.save checkpoints write at 1 GB/s"
    assert _capital("nccl_ops reach 1 GB/s") == "nccl_ops reach 1 GB/s"
    assert _capital("the slowest link") == "The slowest link"


def test_a_go_with_skipped_checks_says_how_much_was_not_measured():
    from preflight.core.model import Status
    from preflight.reporters.view import build_view
    from tests.conftest import make_report, make_result

    clean = build_view(make_report([make_result(status=Status.PASS)]))
    assert clean.verdict == "GO" and clean.headline == "Ready to train, as far as was measured: 1 check."
    partial = build_view(make_report([make_result(status=Status.PASS),
                                      make_result("gpu.visibility", status=Status.SKIP, summary="no driver")]))
    assert partial.verdict == "GO"
    assert partial.headline == "Ready to train, as far as was measured: 1 of 2 checks skipped."


# -- advice: the fixes of the findings that fired, nothing else ---------------------------------------

def test_reports_show_the_fixes_of_the_findings_that_fired_only():
    result = make_result("node.environment", "n1", Status.WARN, "hostname does not resolve",
                         remediation=["Raise /dev/shm.", "Make the hostname resolve."],
                         findings=[Finding("node.environment.shm", Status.PASS, "shm is 64 GiB", "Raise /dev/shm."),
                                   Finding("node.environment.hostname", Status.WARN, "hostname does not resolve",
                                           "Make the hostname resolve.")])
    report = make_report([result], fail_on="warn")
    view = build_view(report)
    assert [f.remediation for f in view.blocking] == [["Make the hostname resolve."]]
    for text in (markdown.render(report), html.render(report), terminal.render(report)):
        assert "Make the hostname resolve." in text and "Raise /dev/shm." not in text


def test_an_unreachable_node_gets_advice_on_reaching_it_only():
    results = [make_result(check, "ghost", Status.ERROR, "cannot reach ghost: Could not resolve hostname",
                           remediation=[f"{check}: reseat the GPU"]) for check in ("gpu.visibility", "acme.thing")]
    report = make_report(results)
    report.nodes = [NodeInfo("ghost", reachable=False, error="Could not resolve hostname ghost")]
    view = build_view(report)
    assert all(f.remediation == [UNREACHABLE_FIX] for f in view.blocking)
    for text in (markdown.render(report), html.render(report)):
        assert "reseat" not in text and "ssh" in text


def test_a_failing_figure_inside_a_warn_check_is_not_marked_as_a_failure():
    report = one_check(Measurement("open files", 1024, "", 65536, ">=", False), status=Status.WARN)
    text = markdown.render(report)
    assert "❌" not in text and "| 1,024 ⚠️ |" in text
    page = html.render(report)
    assert 'class="bad WARN"' in page


def test_numbers_read_the_same_everywhere():
    report = one_check(Measurement("open files", 1048576, "", 65536, ">=", True),
                       Measurement("rate", 1234.5678, "MB/s", 1000.0, ">=", True), status=Status.WARN)
    for text in (markdown.render(report), html.render(report)):
        assert "1,048,576" in text and "1,235 MB/s" in text and "&gt;= 1,000 MB/s" not in text.split("</style>")[-1][:0]
    assert "1 warning from 1 check" in markdown.render(report) and "1 warnings" not in markdown.render(report)
    assert "1 warning from 1 check" in terminal.render(report) and "1 warnings" not in terminal.render(report)
