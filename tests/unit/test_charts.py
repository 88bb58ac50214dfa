"""Charts: drawn only from data that exists, as inline SVG that is well-formed, self-contained and reproducible."""

from __future__ import annotations

import copy
import json
import re
import sys
import xml.etree.ElementTree as ET

import markupsafe
import pytest

from preflight.model import RunReport
from preflight.reporters import charts, html
from tests.conftest import DATA, make_report, make_result

pytest.importorskip("matplotlib")

CHART_OF_CHECK = {
    "scaling.multi_gpu": "Scaling across devices",
    "net.bandwidth": "Network bandwidth between nodes",
    "dataloader.throughput": "Data loader supply against GPU demand",
    "checkpoint.roundtrip": "Checkpoint write and read throughput",
    "collectives.local": "All-reduce bus bandwidth by message size",
}


def cluster_run() -> RunReport:
    """A 3-node run whose results come from each check's evaluate() on synthesised facts."""
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return RunReport.from_dict(data)


def only(report: RunReport, *check_ids: str) -> RunReport:
    trimmed = copy.deepcopy(report)
    trimmed.results = [r for r in trimmed.results if r.check_id in check_ids]
    return trimmed


@pytest.fixture(scope="module")
def every_chart() -> list[charts.Chart]:
    return charts.render_charts(cluster_run())


def test_every_chart_is_drawn_when_all_data_exists(every_chart):
    assert [c.title for c in every_chart] == list(CHART_OF_CHECK.values())
    for chart in every_chart:
        assert chart.caption and chart.svg.startswith("<svg ")


@pytest.mark.parametrize("check_id", sorted(CHART_OF_CHECK))
def test_a_chart_is_drawn_only_from_its_own_data(check_id):
    drawn = charts.render_charts(only(cluster_run(), check_id, "node.environment", "gpu.visibility"))
    assert [c.title for c in drawn] == [CHART_OF_CHECK[check_id]]


def test_no_data_no_charts_and_no_note(sample_report):
    # The sample has a bandwidth measurement but no matrix in its facts: nothing to draw.
    assert charts.render_charts(sample_report) == []
    assert charts.unavailable_note(sample_report) == ""
    assert 'id="charts"' not in html.render(sample_report)


def test_failed_or_skipped_checks_without_figures_draw_nothing():
    report = cluster_run()
    for result in report.results:
        result.facts = {"error": "could not measure"} if result.check_id != "versions.pinned" else result.facts
        result.measurements = []
    assert charts.render_charts(report) == []


def test_svg_is_well_formed_and_names_no_url(every_chart):
    for chart in every_chart:
        root = ET.fromstring(chart.svg)
        assert root.tag == "svg" and root.get("role") == "img" and root.get("aria-label") == chart.title
        assert not re.search(r"https?:|xlink:|<!DOCTYPE|<\?xml|<!--", chart.svg), chart.title
        for element in root.iter():
            for attribute in ("href", "src"):
                target = element.get(attribute)
                assert target is None or target.startswith(("#", "data:")), (chart.title, target)


def test_ids_are_unique_on_the_page_and_references_resolve(every_chart):
    seen: set[str] = set()
    for chart in every_chart:
        ids = re.findall(r'\bid="([^"]+)"', chart.svg)
        assert len(ids) == len(set(ids)) and not seen & set(ids), chart.title
        seen |= set(ids)
        references = re.findall(r'href="#([^"]+)"', chart.svg) + re.findall(r"url\(#([^)]+)\)", chart.svg)
        assert references and set(references) <= set(ids), chart.title


def test_output_is_deterministic(every_chart):
    assert charts.render_charts(cluster_run()) == every_chart


def test_heatmap_outlines_exactly_the_links_below_the_threshold():
    report = only(cluster_run(), "net.bandwidth")
    grid = charts.bandwidth_data(report)
    assert grid is not None and grid.threshold == 10.0 and grid.unit == "Gbit/s"
    facts = report.results[0].facts["matrix_gbps"]
    for i, src in enumerate(grid.nodes):
        for j, dst in enumerate(grid.nodes):
            assert grid.gbps[i][j] == (facts[src].get(dst) if src != dst else None)
    below = [link for link in grid.links() if link[0] < grid.threshold]
    assert below == [(4.2, "gpu02", "gpu03")]
    (chart,) = charts.render_charts(report)
    assert chart.svg.count("stroke: #82071e") == len(below)

    # Every link fast: no outline at all.
    for row in report.results[0].facts["matrix_gbps"].values():
        for dst in row:
            row[dst] = 93.0
    (chart,) = charts.render_charts(report)
    assert "#82071e" not in chart.svg


def test_scaling_data_follows_the_recorded_table():
    data = charts.scaling_data(cluster_run())
    assert data is not None and data.min_efficiency == 0.9
    by_node = {s.node: s for s in data.series}
    assert sorted(by_node) == ["gpu01", "gpu02", "gpu03"]
    table = cluster_run().result_for("scaling.multi_gpu", "gpu01").facts["table"]
    assert by_node["gpu01"].points == [(row["devices"], row["samples_per_s"], row.get("efficiency")) for row in table]
    assert by_node["gpu01"].noun == "GPUs"


def test_loader_and_checkpoint_data_come_from_facts_and_measurements():
    report = cluster_run()
    loader = {d.node: d for d in charts.loader_data(report)}
    assert loader["gpu02"].percent == 70.0 and loader["gpu02"].margin == 1.2
    assert loader["gpu02"].supply["torch DataLoader"] == pytest.approx(14336.0)
    assert loader["gpu02"].demand == 20480.0
    checkpoint = {d.node: d for d in charts.checkpoint_data(report)}
    assert set(checkpoint["gpu03"].formats) == {"torch.save", "DCP"}
    assert checkpoint["gpu03"].formats["torch.save"]["write"] == pytest.approx(0.62)
    assert checkpoint["gpu03"].thresholds == {"write": 1.0, "read": 1.0}


def test_text_from_the_machine_is_escaped_inside_the_svg():
    report = only(cluster_run(), "net.bandwidth")
    facts = report.results[0].facts
    hostile = '<script>alert("x")</script>&'
    facts["matrix_gbps"][hostile] = facts["matrix_gbps"].pop("gpu01")
    facts["nodes"] = [hostile if n == "gpu01" else n for n in facts["nodes"]]
    (chart,) = charts.render_charts(report)
    ET.fromstring(chart.svg)
    assert "<script" not in chart.svg and "&lt;script&gt;" in chart.svg


def test_without_matplotlib_there_are_no_charts_and_the_report_says_so(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    report = cluster_run()
    assert charts.render_charts(report) == []
    note = charts.unavailable_note(report)
    assert "matplotlib is not installed" in note and "preflight[charts]" in note
    page = html.render(report)
    assert str(markupsafe.escape(note)) in page and "<svg" not in page


def test_many_nodes_are_capped_to_the_worst():
    report = only(cluster_run(), "dataloader.throughput")
    template = report.results[1]  # gpu02, the one that falls short
    report.results = []
    for k in range(charts.MAX_GROUPS + 4):
        result = copy.deepcopy(template)
        result.node = f"node{k:02d}"
        result.measurements[-1].value = 50.0 + k
        report.results.append(result)
    (chart,) = charts.render_charts(report)
    assert f"The {charts.MAX_GROUPS} nodes with the least headroom of {charts.MAX_GROUPS + 4}" in chart.caption
    assert "node00" in chart.svg and f"node{charts.MAX_GROUPS + 3:02d}" not in chart.svg


def test_output_is_the_same_in_another_process(every_chart):
    import hashlib
    import os
    import subprocess

    script = ("import hashlib, json; from preflight.model import RunReport; from preflight.reporters import charts; "
              f"d = json.load(open({str(DATA / 'reports' / 'cluster_run.json')!r})); d.pop('_source'); "
              "print(hashlib.sha256(''.join(c.svg for c in charts.render_charts(RunReport.from_dict(d))).encode())"
              ".hexdigest())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.stdout.strip() == hashlib.sha256("".join(c.svg for c in every_chart).encode()).hexdigest()


def test_charts_stay_small(every_chart):
    # Text is kept as text, not paths: a report with five charts stays light enough to mail around.
    assert all(len(c.svg) < 60_000 for c in every_chart), [len(c.svg) for c in every_chart]


def test_a_chart_that_cannot_be_drawn_costs_only_itself(monkeypatch):
    def broken(data):
        raise ValueError("no such colour")

    monkeypatch.setattr(charts, "_draw_loader", broken)
    drawn = charts.render_charts(cluster_run())
    assert [c.title for c in drawn] == list(CHART_OF_CHECK.values())
    (failed,) = [c for c in drawn if not c.svg]
    assert failed.title == "Data loader supply against GPU demand"
    assert "could not be drawn (ValueError: no such colour)" in failed.caption
    page = html.render(cluster_run())
    assert page.count("<svg ") == 4 and "could not be drawn (ValueError: no such colour)" in page


@pytest.mark.parametrize("check_id, facts", [
    ("net.bandwidth", {"nodes": ["a", "b"], "matrix_gbps": {"a": [1, 2], "b": None}}),
    ("net.bandwidth", {"matrix_gbps": "broken"}),
    ("scaling.multi_gpu", {"table": [{"devices": "8", "samples_per_s": 1.0}, None, 3], "tensorflow": "x"}),
    ("dataloader.throughput", {"torch": {"samples_per_s": "fast"}, "demand": 5}),
    ("collectives.local", {"runs": [{"ok": True, "result": {"sizes": {"bytes": 1}}}, "x"]}),
])
def test_odd_facts_draw_nothing_rather_than_fail(check_id, facts):
    report = make_report([make_result(check_id, "n1", facts=facts)])
    assert charts.render_charts(report) == [] and not charts.has_chart_data(report)
    html.render(report)
