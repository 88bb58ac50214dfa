"""The run against fleet history in the reports: the HTML section (percentile among earlier runs of the
node type, p05-p95, a sparkline, the image changes, escaped), the Markdown line, and results.json
carrying it, valid against the schema, while results without it still load."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from preflight.core.model import RunReport
from preflight.core.results_file import ResultsFileError, parse_report
from preflight.history import record_run, report_context
from preflight.reporters import html, json_report, markdown
from tests.conftest import ROOT
from tests.unit.history import fleet

HOSTILE = "n<script>alert(1)</script>"
BUSBW = "nccl (8 GPUs): busbw at 1 GiB"


def _report_with_history(tmp_path, earlier=4, nodes=None, images=None, earlier_images=None):
    nodes = nodes or fleet.node_names(3)
    url = tmp_path / "history.sqlite"
    for i in range(earlier):
        run = fleet.fleet_report(nodes, fleet.START + timedelta(hours=i), seed=i, images=earlier_images)
        assert record_run(run, url) is None
    data = fleet.fleet_report(nodes, fleet.START + timedelta(days=1), seed=40, images=images)
    context, warning = report_context(data, url)
    assert warning is None
    report = RunReport.from_dict(data)
    report.history = context
    return report


def _section(page: str) -> str:
    start = page.index('<section id="history">')
    return page[start:page.index("</section>", start)]


def test_html_shows_each_figure_against_the_history_of_its_node_type(tmp_path):
    report = _report_with_history(tmp_path)
    entry = next(e for e in report.history["figures"] if e["name"] == BUSBW)
    section = _section(html.render(report))
    row = next(r for r in section.split("<tr") if BUSBW in r)
    assert f"{entry['better_than']:.0f}% of 4 earlier runs of this node type" in row
    assert "4 earlier runs of the same node type (8 x NVIDIA H100 80GB HBM3)" in section
    assert row.count('<svg class="spark"') == 1 and len(re.findall(r"\d+(?:\.\d+)?,\d+", row)) == 5  # 4 runs + this
    assert "http" not in section and "<script" not in section


def test_html_names_the_image_change_and_escapes_the_node(tmp_path):
    nodes = ["gpu01", HOSTILE]
    report = _report_with_history(tmp_path, nodes=nodes, images={HOSTILE: fleet.IMAGE_B})
    assert [c["node"] for c in report.history["image_changes"]] == [HOSTILE]
    section = _section(html.render(report))
    assert f"driver {fleet.IMAGE_A['driver']} → {fleet.IMAGE_B['driver']}" in section
    assert "n&lt;script&gt;alert(1)&lt;/script&gt;" in section and "<script" not in section
    line = next(x for x in markdown.render(report).splitlines() if x.startswith("**Against fleet history:**"))
    assert "image changed: driver" in line and not re.search(r"(?<!\\)<script", line)  # escaped for Markdown


def test_too_few_earlier_runs_are_one_line_instead_of_a_percentile(tmp_path):
    report = _report_with_history(tmp_path, earlier=2)
    section = _section(html.render(report))
    assert '<table class="history">' not in section and "Too few earlier runs of this node type" in section
    assert "at most 2 recorded, 3 needed" in section
    assert "Too few earlier runs" in markdown.render(report)


def test_a_report_without_history_has_no_section(sample_report):
    assert 'id="history"' not in html.render(sample_report)
    assert "fleet history" not in markdown.render(sample_report)


def test_results_json_carries_the_history_and_both_old_and_new_files_validate(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "preflight" / "schema" / "run-report.schema.json").read_text())
    report = _report_with_history(tmp_path)
    text = json_report.render(report)
    data = json.loads(text)
    assert data["history"]["figures"] and data["history"]["history_runs"] == 4
    jsonschema.validate(data, schema)
    assert parse_report(text, "results.json").history == report.history
    old = dict(data)
    del old["history"]
    jsonschema.validate(old, schema)
    loaded = parse_report(json.dumps(old), "old/results.json")
    assert loaded.history is None and "history" not in json.loads(json_report.render(loaded))
    damaged = {**data, "history": {**data["history"], "figures": [{"name": "x"}]}}
    with pytest.raises(ResultsFileError, match="history"):
        parse_report(json.dumps(damaged), "damaged/results.json")


def test_figures_that_never_moved_are_one_line_and_two_node_types_are_named_per_row(tmp_path):
    a100 = {**fleet.IMAGE_A, "gpu_model": "NVIDIA A100-SXM4-80GB"}
    nodes = fleet.node_names(4)
    two_types = {"gpu03": a100, "gpu04": a100}
    report = _report_with_history(tmp_path, nodes=nodes, images=two_types, earlier_images=two_types)
    section = _section(html.render(report))
    view_rows = [r for r in section.split("<tr") if BUSBW in r]
    assert len(view_rows) == 2  # one per node type, each named
    assert any("(8 x NVIDIA A100-SXM4-80GB)" in r for r in view_rows)
    assert any("(8 x NVIDIA H100 80GB HBM3)" in r for r in view_rows)
    steady = next(p for p in section.split("<p") if "The same as in every earlier run" in p)
    assert "/dev/shm size" in steady  # the same on every synthesised node and run


def test_a_history_with_nothing_to_show_draws_no_section(sample_report):
    sample_report.history = {"history_runs": 0, "min_runs": 3, "figures": [], "image_changes": []}
    assert 'id="history"' not in html.render(sample_report)
    assert "fleet history" not in markdown.render(sample_report)
