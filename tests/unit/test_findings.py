"""Plain-language key findings, the cluster at a glance, and noisy figures: pure functions of the report."""

from __future__ import annotations

import copy
import json

import pytest

from preflight.model import CLUSTER_NODE, Measurement, RunReport, Scope, Status
from preflight.reporters import html, markdown, terminal
from preflight.reporters.view import (
    build_view,
    key_findings,
    noisy_figures,
    sentence_busbw,
    sentence_checkpoint,
    sentence_loader,
    sentence_noisy,
    sentence_scaling,
    sentence_slowest_link,
    short,
    when,
    where,
)
from tests.conftest import DATA, make_report, make_result


def cluster_run() -> RunReport:
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return RunReport.from_dict(data)


def test_sentences_read_as_a_person_would_say_them():
    assert sentence_scaling(8, 6.9, 0.8625) == "8 GPUs deliver the throughput of 6.9 (86% efficiency)"
    assert sentence_scaling(2, 1.32, 0.66, "CPU processes") == \
        "2 CPU processes deliver the throughput of 1.3 (66% efficiency)"
    assert sentence_slowest_link("gpu03", "gpu04", 4.2, "Gbps", 10) == \
        "the slowest link, gpu03 -> gpu04, carries 4.2 Gbps, below the 10 Gbps the cluster needs"
    assert sentence_slowest_link("a", "b", 93.6, "Gbit/s", 10.0) == \
        "the slowest link, a -> b, carries 93.6 Gbit/s, at least the 10 Gbit/s the cluster needs"
    assert sentence_slowest_link("a", "b", 1.916, "Gbit/s", None) == "the slowest link, a -> b, carries 1.9 Gbit/s"
    assert sentence_loader(69.6) == "the data loader can feed 70% of what the GPUs consume"


def test_checkpoint_sentence_puts_what_falls_short_last():
    assert sentence_checkpoint("torch.save", {"write": 2.21, "read": 3.52}, {"write": 1.0, "read": 1.0}) == \
        "torch.save checkpoints write at 2.2 GB/s and read at 3.5 GB/s"
    assert sentence_checkpoint("torch.save", {"write": 0.62, "read": 3.21}, {"write": 1.0, "read": 1.0}) == \
        "torch.save checkpoints read at 3.2 GB/s but write at 0.62 GB/s, below the 1 GB/s needed"
    assert sentence_checkpoint("DCP", {"write": 0.72, "read": 0.24}, {"write": 1.0, "read": 2.0}) == \
        "DCP checkpoints write at 0.72 GB/s and read at 0.24 GB/s, below the 1 and 2 GB/s needed"


def test_busbw_and_noisy_sentences():
    assert sentence_busbw("nccl (8 GPUs)", 441.0, "1 GiB", 460.0) == \
        "all-reduce over nccl (8 GPUs) reaches 441 GB/s bus bandwidth at 1 GiB, below the 460 GB/s required"
    assert sentence_busbw("gloo (2 processes)", 1.07, "16 MiB", None) == \
        "all-reduce over gloo (2 processes) reaches 1.1 GB/s bus bandwidth at 16 MiB"
    report = make_report([make_result("a.b", "n1", measurements=[
        Measurement("x", 1.0, "s", samples=[1.0, 1.5, 2.0]), Measurement("y", 1.0, "s", samples=[1.0, 1.05, 1.1])])])
    figures = noisy_figures(report, 0.2)
    assert [(f.name, f.node, round(f.spread, 3)) for f in figures] == [("x", "n1", 0.667)]
    assert sentence_noisy(figures, 0.2) == ("1 figure varied across repeats by more than 20% of its median and is "
                                            "flagged as noisy: x on n1 (spread 67%)")
    assert "x (spread 67%)" in sentence_noisy(figures, 0.2, several_nodes=False)


def test_short_figures():
    assert [short(v) for v in (4.2, 0.42, 1.916, 4.0, 10.0, 29.923, 182.3, 20010.0, 0.0)] == \
        ["4.2", "0.42", "1.9", "4", "10", "29.9", "182", "20,010", "0"]


def test_cluster_results_read_across_the_cluster():
    assert where(CLUSTER_NODE) == "across the cluster" and where("gpu01") == "on gpu01"
    view = build_view(cluster_run())
    net = [f for f in view.blocking if f.check_id == "net.bandwidth"]
    assert net and net[0].where == "across the cluster"
    assert "net.bandwidth across the cluster:" in terminal.render(cluster_run())


def test_key_findings_of_a_cluster_run_blocking_first():
    texts = [(k.blocking, k.status, k.text) for k in build_view(cluster_run()).key_findings]
    assert texts == [
        (True, "FAIL", "The slowest link, gpu02 -> gpu03, carries 4.2 Gbit/s, below the 10 Gbit/s the cluster needs"),
        (True, "FAIL", "On gpu02, the lowest of 3 nodes, the data loader can feed 70% of what the GPUs consume"),
        (True, "FAIL", "On gpu03, the slowest of 3 nodes, all-reduce over nccl (8 GPUs) reaches 441 GB/s bus "
                       "bandwidth at 1 GiB, below the 460 GB/s required"),
        (False, "WARN", "On gpu01, the least efficient of 3 nodes, 8 GPUs deliver the throughput of 6.9 "
                        "(86% efficiency)"),
        (False, "WARN", "On gpu03, the slowest of 3 nodes, torch.save checkpoints read at 3.2 GB/s but write at "
                        "0.62 GB/s, below the 1 GB/s needed"),
        (False, "WARN", "1 figure varied across repeats by more than 20% of its median and is flagged as noisy: "
                        "gpu03 -> gpu01 (spread 36%)"),
    ]


def test_one_node_findings_name_no_node():
    report = cluster_run()
    report.results = [r for r in report.results if r.node in ("gpu01", CLUSTER_NODE) and r.check_id != "net.bandwidth"]
    report.nodes = report.nodes[:1]
    texts = [k.text for k in key_findings(report)]
    assert "8 GPUs deliver the throughput of 6.9 (86% efficiency)" in texts
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
    assert rows["Nodes"] == "3: gpu01, gpu02, gpu03"
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
    report.results = [r for r in report.results if r.check_id not in ("versions.pinned", "gpu.visibility")]
    rows = dict(build_view(report).at_a_glance)
    assert rows["Frameworks"] == "torch 2.4.1" and "GPUs" not in rows


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
    assert finding.text == "On gpu02, the slowest of 3 nodes, torch.save checkpoints write at 2 GB/s and read at 3.4 GB/s"
    assert (finding.status, finding.blocking) == ("PASS", False)


def test_the_judged_backend_speaks_for_all_reduce():
    report = cluster_run()
    facts = report.result_for("collectives.local", "gpu03").facts
    gloo = copy.deepcopy(facts["runs"][0])
    gloo.update(role="fallback", backend="gloo", device="cpu", world_size=2)
    for size in gloo["result"]["sizes"]:
        size["busbw_gbps"] = 1.0
    facts["runs"].append(gloo)
    (finding,) = [k for k in key_findings(report) if k.check_id == "collectives.local"]
    assert "nccl (8 GPUs) reaches 441 GB/s" in finding.text and finding.node == "gpu03" and finding.blocking


def test_sentences_keep_the_spelling_of_names_they_start_with():
    from preflight.reporters.view import _capital

    assert _capital("tensorflow checkpoints write at 1 GB/s") == "TensorFlow checkpoints write at 1 GB/s"
    assert _capital("torch.save checkpoints write at 1 GB/s") == "torch.save checkpoints write at 1 GB/s"
    assert _capital("the slowest link") == "The slowest link"


def test_a_go_with_skipped_checks_says_how_much_was_not_measured():
    from preflight.model import Status
    from preflight.reporters.view import build_view
    from tests.conftest import make_report, make_result

    clean = build_view(make_report([make_result(status=Status.PASS)]))
    assert clean.verdict == "GO" and clean.headline == "Ready to train."
    partial = build_view(make_report([make_result(status=Status.PASS),
                                      make_result("gpu.visibility", status=Status.SKIP, summary="no driver")]))
    assert partial.verdict == "GO"
    assert partial.headline == "Ready to train, as far as was measured: 1 of 2 checks skipped."
