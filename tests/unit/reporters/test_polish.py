"""Report details: matrix headers that break only between words, per-step figures drawn not listed,
series named for what they are, unjudged bars said to be unjudged."""

import re

import pytest

from preflight.core.check import measure
from preflight.core.model import FIGURE_RATE, FIGURE_SCALING, FIGURE_STEP, Status
from preflight.reporters import html, markdown
from preflight.reporters.view import build_view
from tests.conftest import ROOT, make_report, make_result


def test_matrix_headers_break_after_dots_never_inside_a_word(sample_report):
    page = html.render(sample_report)
    matrix = page[page.index('class="matrix"'):]
    assert "<th title=\"checkpoint.roundtrip\">checkpoint.<wbr>roundtrip</th>" in matrix
    css = (ROOT / "templates" / "report.css").read_text()
    assert "overflow-wrap: anywhere" not in css and "word-break: keep-all" in css


def canary_result():
    steps = [measure(f"step time at step {i}", 100.0 + i, "ms", figure=FIGURE_STEP, series="torch", at=i)
             for i in range(60)]
    return make_result("canary.training", "n1", Status.PASS, title="Training canary", measurements=[
        measure("step time (median)", 120.0, "ms"), measure("data wait share", 2.0, "%", at_most=10.0), *steps])


def test_a_canary_lists_its_summary_figures_and_draws_its_60_steps():
    report = make_report([canary_result()])
    rows, note = build_view(report).table_rows(report.results[0])
    assert [m.name for m in rows] == ["step time (median)", "data wait share"]
    assert note == "60 per-step figures are drawn in the chart above"
    page = html.render(report)
    section = page[page.index('id="check-canary.training"'):]
    assert "step time at step 7" not in section and "60 per-step figures are drawn in the chart above" in section
    assert "step time at step" not in markdown.render(report)


def test_a_long_table_lists_the_figures_that_miss_first_and_says_where_the_rest_are():
    figures = [measure(f"link {i}", 90.0, "Gbit/s", at_least=10.0) for i in range(100)]
    figures[77] = measure("link 77", 4.2, "Gbit/s", at_least=10.0)
    report = make_report([make_result("acme.links", "n1", Status.FAIL, measurements=figures)])
    rows, note = build_view(report).table_rows(report.results[0])
    assert len(rows) == 40 and "link 77" in [m.name for m in rows]
    assert note.startswith("60 more figures are in results.json")


def test_the_scaling_series_is_named_for_its_framework():
    from tests.unit.core.test_findings import cluster_run

    report = cluster_run()
    series = {m.series for r in report.results_for("scaling.multi_gpu") for m in r.measurements
              if m.figure == FIGURE_SCALING}
    assert series == {"torch"}
    both = make_report([make_result("scaling.multi_gpu", "n1", Status.PASS, measurements=[
        measure("t", v, "samples/s", figure=FIGURE_SCALING, series=s, at=n)
        for s, rates in (("torch", (100.0, 190.0)), ("tensorflow", (90.0, 135.0))) for n, v in zip((1, 2), rates)])])
    texts = [k.text for k in build_view(both).key_findings]
    assert texts and texts[0].startswith("With tensorflow, 2 devices deliver")
    assert not any("measured" in t.split(",")[0] for t in texts)


def test_bars_without_a_threshold_beside_judged_ones_say_they_are_not_judged():
    pytest.importorskip("matplotlib")
    from preflight.reporters import charts

    bars = [measure("torch.save write", 2.0, "GB/s", at_least=1.0, figure=FIGURE_RATE, series="write", at="torch.save"),
            measure("torch.save read", 3.0, "GB/s", at_least=1.0, figure=FIGURE_RATE, series="read", at="torch.save"),
            measure("tf write", 0.5, "GB/s", figure=FIGURE_RATE, series="write", at="TensorFlow"),
            measure("tf read", 0.7, "GB/s", figure=FIGURE_RATE, series="read", at="TensorFlow")]
    report = make_report([make_result("checkpoint.roundtrip", "n1", Status.PASS, title="Checkpoints", measurements=bars)])
    (chart,) = charts.render_charts(report)
    assert "TensorFlow: reported, not judged" in chart.caption and "torch.save: reported" not in chart.caption
    assert re.search(r"needed", chart.svg)
