"""Charts: drawn only from the figures the checks declare, as inline SVG that is well-formed,
self-contained and reproducible. No chart depends on a check's id."""

from __future__ import annotations

import copy
import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from preflight.core.check import measure
from preflight.core.model import FIGURE_LINK, FIGURE_RATE, FIGURE_SCALING, FIGURE_SIZE, FIGURE_STEP, RunReport, Status
from preflight.reporters import charts, figures, html
from tests.conftest import DATA, make_report, make_result
from tests.conftest import ROOT

pytest.importorskip("matplotlib")

# The charts of the synthesised cluster run, in report order: each check's title.
CHART_OF_CHECK = {
    "scaling.multi_gpu": "Data-parallel scaling across the node's devices",
    "dataloader.throughput": "Data loading: can storage and the input pipeline feed the GPUs",
    "checkpoint.roundtrip": "Checkpoints: exact round trip, write/read speed, resume after a kill",
    "collectives.local": "All-reduce among the node's devices (NCCL, gloo)",
    "net.bandwidth": "TCP bandwidth between nodes (iperf3)",
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


def declared(kind: str, points: list[tuple], unit: str = "GB/s", check_id: str = "acme.thing",
             title: str = "Acme thing", node: str = "n1", **kwargs) -> RunReport:
    """A report with one result from a check no reporter knows, declaring figures of one kind."""
    measurements = [measure(name, value, unit, figure=kind, series=series, at=at, **kwargs)
                    for name, value, series, at in points]
    return make_report([make_result(check_id, node, Status.PASS, title=title, measurements=measurements)])


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


def test_no_declared_figures_no_charts(sample_report):
    # The sample declares one link: a heatmap needs two.
    assert charts.render_charts(sample_report) == []
    assert 'id="charts"' not in html.render(sample_report)


def test_undeclared_figures_draw_nothing_whatever_their_names():
    report = cluster_run()
    for result in report.results:
        for m in result.measurements:
            m.figure = None
    assert charts.render_charts(report) == [] and not charts.has_chart_data(report)


@pytest.mark.parametrize("kind, points, words", [
    (FIGURE_LINK, [("a to b", 9.0, None, "a -> b"), ("b to a", 3.0, None, "b -> a")], ["receiver", "sender"]),
    (FIGURE_SCALING, [("rate 1", 100.0, "ddp", 1), ("rate 2", 190.0, "ddp", 2), ("rate 4", 300.0, "ddp", 4)],
     ["devices", "ideal (dashed)", "75%"]),
    (FIGURE_SIZE, [("bw 1k", 1.0, "tcp", 1024), ("bw 1m", 40.0, "tcp", 1 << 20), ("bw 1m", 9.0, "udp", 1 << 20),
                   ("bw 1k", 0.5, "udp", 1024)], ["message size", "1 MiB", "tcp", "udp"]),
    (FIGURE_RATE, [("in", 5.0, "write", "fmt-a"), ("out", 7.0, "read", "fmt-a"), ("in", 2.0, "write", "fmt-b")],
     ["fmt-a", "fmt-b", "write", "read"]),
    (FIGURE_STEP, [("t", 0.5, "step time", 1), ("t", 0.4, "step time", 2), ("t", 0.45, "step time", 3)],
     ["step"]),
])
def test_each_kind_of_figure_draws_its_chart_from_the_declaration_alone(kind, points, words):
    (chart,) = charts.render_charts(declared(kind, points))
    assert chart.title == "Acme thing" and chart.svg.startswith("<svg ")
    ET.fromstring(chart.svg)
    for word in words:
        assert word in chart.svg, word


def test_scaling_ideal_line_is_n_times_the_smallest_count():
    report = declared(FIGURE_SCALING, [("r", 300.0, "ddp", 2), ("r", 500.0, "ddp", 4), ("r", 800.0, "ddp", 8)],
                      unit="samples/s")
    (group,) = figures.figure_groups(report)
    (line,) = figures.lines(group)
    assert figures.efficiency(line) == [(2, 300.0, 1.0), (4, 600.0, pytest.approx(500 / 600)),
                                        (8, 1200.0, pytest.approx(800 / 1200))]


def test_heatmap_outlines_exactly_the_links_below_the_threshold():
    report = only(cluster_run(), "net.bandwidth")
    (group,) = figures.figure_groups(report)
    grid = figures.link_grid(group)
    assert grid is not None and grid.threshold == 10.0 and group.unit == "Gbit/s"
    below = [(src, dst) for src, dst, p in grid.points if p.value < grid.threshold]
    assert below == [("gpu02", "gpu03")]
    (chart,) = charts.render_charts(report)
    assert chart.svg.count("stroke: #82071e") == len(below)

    # Every link fast: no outline at all.
    for m in report.results[0].measurements:
        m.value = 93.0
    (chart,) = charts.render_charts(report)
    assert "#82071e" not in chart.svg


def test_rate_groups_pair_the_series_of_one_label():
    report = cluster_run()
    (group,) = [g for g in figures.figure_groups(report) if g.check_id == "dataloader.throughput"]
    by_node = {g.node: g for g in figures.rate_groups(group)}
    assert by_node["gpu02"].bars["supply"].value == pytest.approx(14336.0)
    paired = declared(FIGURE_RATE, [("s", 14336.0, "supply", "torch DataLoader"),
                                    ("d", 20480.0, "demand", "torch DataLoader")], unit="samples/s")
    (group,) = figures.figure_groups(paired)
    (pair,) = figures.rate_groups(group)
    assert sorted(pair.bars) == ["demand", "supply"] and pair.bars["demand"].value == 20480.0
    (checkpoint,) = [g for g in figures.figure_groups(report) if g.check_id == "checkpoint.roundtrip"]
    on_gpu03 = [g for g in figures.rate_groups(checkpoint) if g.node == "gpu03"]
    assert len(on_gpu03) == 2 and "gpu03 torch.save" in {g.label for g in on_gpu03}  # torch.save and DCP
    assert all(sorted(g.bars) == ["read", "write"] for g in on_gpu03)


def test_text_from_the_machine_is_escaped_inside_the_svg():
    hostile = '<script>alert("x")</script>&'
    report = declared(FIGURE_LINK, [("x", 1.0, None, f"{hostile} -> b"), ("y", 2.0, None, f"b -> {hostile}")])
    (chart,) = charts.render_charts(report)
    ET.fromstring(chart.svg)
    assert "<script" not in chart.svg and "&lt;script&gt;" in chart.svg


def test_charts_need_no_extra_install():
    # matplotlib is a dependency of preflight itself: no report asks for an extra.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("matplotlib") for d in project["dependencies"])
    assert not hasattr(charts, "INSTALL_HINT")
    assert "preflight[charts]" not in html.render(cluster_run())


def test_many_nodes_are_capped_to_the_worst():
    points = []
    for k in range(charts.MAX_GROUPS + 4):
        points.append(("supply", 50.0 + k, "supply", f"node{k:02d}"))
    report = declared(FIGURE_RATE, points, unit="samples/s", at_least=100.0)
    (chart,) = charts.render_charts(report)
    assert f"The {charts.MAX_GROUPS} worst of {charts.MAX_GROUPS + 4} groups" in chart.caption
    assert "node00" in chart.svg and f"node{charts.MAX_GROUPS + 3:02d}" not in chart.svg


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


def test_output_is_the_same_in_another_process(every_chart):
    import hashlib
    import os
    import subprocess

    script = ("import hashlib, json; from preflight.core.model import RunReport; from preflight.reporters import charts; "
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
    def broken(group, name, title):
        raise ValueError("no such colour")

    monkeypatch.setitem(charts.DRAWERS, FIGURE_RATE, broken)
    drawn = charts.render_charts(cluster_run())
    assert [c.title for c in drawn] == list(CHART_OF_CHECK.values())
    failed = [c for c in drawn if not c.svg]
    assert len(failed) == 2  # the two rate charts: loader and checkpoints
    assert all("could not be drawn (ValueError: no such colour)" in c.caption for c in failed)
    page = html.render(cluster_run())
    assert page.count("<svg ") == 3 and "could not be drawn (ValueError: no such colour)" in page


@pytest.mark.parametrize("value, at", [("fast", 1), (float("nan"), 2), (None, 3), (1.0, "x -> "), (2.0, None)])
def test_odd_declarations_draw_nothing_rather_than_fail(value, at):
    m = measure("odd", None, "GB/s", figure=FIGURE_LINK, at=at)
    m.value = value
    report = make_report([make_result("acme.thing", "n1", measurements=[m])])
    assert charts.render_charts(report) == [] and not charts.has_chart_data(report)
    html.render(report)


def test_reporters_name_no_check():
    import subprocess

    root = ROOT
    pattern = r'"(net\.bandwidth|scaling\.|collectives\.|checkpoint\.|dataloader\.|gpu\.|versions\.|storage\.|node\.)'
    found = subprocess.run(["git", "grep", "-nE", pattern, "--", "preflight/reporters", "templates"], cwd=root,
                           capture_output=True, text=True)
    assert found.returncode == 1 and found.stdout == "", found.stdout


def test_the_example_plugin_gets_its_chart_without_any_reporter_change():
    checks = pytest.importorskip("preflight_example.checks", reason="install tests/plugins/preflight-example")
    from preflight.core.check import Expect
    from preflight.engine.execute import result_from_outcome

    echo = checks.Echo()
    facts = echo.collect(type("Ctx", (), {"record": lambda *a: None})(), checks.EchoParams())
    result = result_from_outcome(checks.Echo, echo.evaluate(facts, checks.EchoParams(), Expect()), node="n1",
                                 facts=facts)
    page = html.render(make_report([result]))
    assert page.count('<figure class="chart">') == 1 and "Example: echo a status" in page
    assert "sha256" in page and "1 MiB" in page


def test_the_chart_fixture_is_what_the_checks_evaluate_today():
    # cluster_run.json is not frozen: it must be what the real evaluate() functions make of its facts
    # now, so renaming or re-declaring a figure in a check shows up here rather than in a stale file.
    # Regenerate with `python tests/data/reports/build_cluster_run.py` after changing a check.
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_cluster_run", DATA / "reports" / "build_cluster_run.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    stored = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    stored.pop("_source")
    assert json.loads(json.dumps(builder.build().to_dict(), sort_keys=True)) == stored


def drawn_axes(monkeypatch, report: RunReport) -> list:
    """The axes each chart of `report` draws, laid out as the SVG is."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    found = []

    def draw_only(name, title, inches, draw):
        with matplotlib.rc_context(charts._style(name)):
            fig = charts.laid_out(inches, draw)
            canvas = FigureCanvasAgg(fig)
            canvas.draw()
            found.append((title, fig, canvas.get_renderer()))
        return "<svg/>"

    monkeypatch.setattr(charts, "_svg", draw_only)
    charts.render_charts(report)
    return found


def three_nodes_of_rates(formats: tuple[str, ...]) -> RunReport:
    """What checkpoint.roundtrip declares on three nodes named by address: a bar group per node and format."""
    results = []
    for node in ("198.18.60.11", "198.18.60.12", "198.18.60.13"):
        ms = [measure(f"{fmt} {way}", value, "GB/s", figure=FIGURE_RATE, series=way, at=fmt, at_least=1.0)
              for fmt in formats for way, value in (("write", 0.16), ("read", 0.2))]
        results.append(make_result("acme.ckpt", node, Status.WARN, title="Checkpoints", measurements=ms))
    return make_report(results)


@pytest.mark.parametrize("formats", [("torch.save", "DCP", "TensorFlow"), ("torch.distributed.checkpoint",),
                                     ("DCP",)])
def test_tick_labels_of_three_nodes_never_overlap(monkeypatch, formats):
    ((title, fig, renderer),) = drawn_axes(monkeypatch, three_nodes_of_rates(formats))
    import math

    (ax,) = [a for a in fig.axes if a.get_xticklabels()]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) == 3 * len(formats)
    xs = [ax.transData.transform((t.get_position()[0], 0))[0] for t in labels]
    angle = math.radians(labels[0].get_rotation())
    height = max(t.get_window_extent(renderer).height for t in labels) if angle == 0 else \
        max(t.get_fontsize() for t in labels) * fig.dpi / 72 * 1.2
    if angle == 0:  # level: each label's box clear of the next one's
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not [(a, b) for a, b in zip(boxes, boxes[1:]) if a.overlaps(b)]
    else:  # parallel slanted lines of text: apart by more than a line's height
        assert all((b - a) * math.sin(angle) > height for a, b in zip(xs, xs[1:])), (xs, height)


@pytest.mark.parametrize("kind, points", [
    (FIGURE_SIZE, [("bw 1m", 0.126, "gloo", 1 << 20), ("bw 16m", 0.218, "gloo", 16 << 20)]),
    (FIGURE_SCALING, [("rate 1", 2051.0, "torch", 1), ("rate 3", 3652.0, "torch", 3)]),
    (FIGURE_STEP, [("t", 0.5, "step time", 1), ("t", 0.9, "step time", 2)]),
])
def test_the_value_axis_ends_above_the_highest_point_with_room(monkeypatch, kind, points):
    ((title, fig, _),) = drawn_axes(monkeypatch, declared(kind, points))
    low, high = fig.axes[0].get_ylim()
    assert low == 0 and high >= max(v for _, v, _, _ in points) * 1.1  # not at the frame: 10% above it
