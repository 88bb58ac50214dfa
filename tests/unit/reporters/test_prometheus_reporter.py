"""--format prometheus: statuses and figures in node_exporter's textfile format."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from preflight.core.check import measure
from preflight.core.model import FIGURE_STEP, Status
from preflight.reporters import filename, renderer
from tests.conftest import make_report, make_result


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def key(metric: str, **labels: str) -> tuple:
    return (metric, tuple(sorted(labels.items())))


def test_prometheus_is_a_known_format_written_to_a_prom_file():
    assert filename("prometheus").endswith(".prom")


def test_every_status_is_one_hot_per_check_and_node(sample_report):
    got = samples(renderer("prometheus")(sample_report))
    for result in sample_report.results:
        for status in Status:
            value = got[key("preflight_check_status", check=result.check_id, node=result.node, status=status.value)]
            assert value == (1.0 if result.status is status else 0.0)
    verdicts = {k[1][0][1]: v for k, v in got.items() if k[0] == "preflight_verdict"}
    assert sorted(verdicts.values()) == [0.0, 0.0, 1.0] and verdicts["NO-GO"] == 1.0


def test_numeric_figures_become_gauges_with_their_thresholds_and_the_rest_is_left_out():
    result = make_result("canary.training", "gpu01", Status.WARN, "slow", measurements=[
        measure("data wait share of step time", 12.5, "%", at_most=10.0),
        measure("GPU utilisation", "not measured: no GPU"),
        measure("step time at step 0", 40.0, "ms", figure=FIGURE_STEP, series="step time", at=0),
        measure('odd "name"\\', 1.0, "x", node="gpu02 -> gpu03"),
    ], duration_s=12.0)
    text = renderer("prometheus")(make_report([result]))
    got = samples(text)
    labels = {"check": "canary.training", "node": "gpu01", "name": "data wait share of step time", "unit": "%"}
    assert got[key("preflight_figure", **labels)] == 12.5
    assert got[key("preflight_figure_threshold", **labels)] == 10.0
    assert got[key("preflight_check_duration_seconds", check="canary.training", node="gpu01")] == 12.0
    assert got[key("preflight_figure", check="canary.training", node="gpu02 -> gpu03", name='odd "name"\\', unit="x")] == 1.0
    names = {dict(k[1]).get("name") for k in got if k[0] == "preflight_figure"}
    assert "GPU utilisation" not in names and "step time at step 0" not in names
