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


def test_label_values_hold_no_paths_or_timestamps():
    from preflight.reporters.prometheus import stable_label

    run_dir = "/work/preflight-report/2026-12-01T09-07-59Z/scratch"
    report = make_report([make_result("node.environment", "n1", Status.PASS, measurements=[
        measure(f"free disk at {run_dir}", 120.0, "GiB", at_least=50.0),
        measure("free disk at /datasets", 900.0, "GiB", at_least=50.0),
        measure("checkpoint written 2026-12-01T09:07:59+00:00", 1.0, "GB/s")])])
    labels = [dict(s.labels) for family in text_string_to_metric_families(renderer("prometheus")(report))
              for s in family.samples if family.name == "preflight_figure"]
    names = sorted(label["name"] for label in labels)
    assert names == ["checkpoint written <time>", "free disk at <path>", "free disk at <path> (2)"]
    assert not any("/" in v or "2026" in v for label in labels for k, v in label.items() if k != "unit")
    assert stable_label("gpu01 -> gpu02") == "gpu01 -> gpu02"  # a link is no path


def test_textfile_dir_gets_preflight_prom_atomically(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from preflight.cli.main import cli

    monkeypatch.chdir(tmp_path)
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    done = CliRunner().invoke(cli, ["run", "--checks", "node.environment", "--out", "out", "--format", "json",
                                    "--textfile-dir", str(textfiles)])
    assert done.exit_code in (0, 1), done.output
    assert sorted(p.name for p in textfiles.iterdir()) == ["preflight.prom"]  # no temporary file left beside it
    assert any(k[0] == "preflight_verdict" for k in samples((textfiles / "preflight.prom").read_text()))
    bad = CliRunner().invoke(cli, ["run", "--checks", "node.environment", "--out", "out2",
                                   "--textfile-dir", str(tmp_path / "missing")])
    assert bad.exit_code == 2 and "--textfile-dir" in bad.output


def test_the_text_is_byte_for_byte_what_prometheus_client_writes(sample_report):
    from prometheus_client import CollectorRegistry, generate_latest

    from preflight.reporters.prometheus import _RunCollector

    odd = make_result("node.environment", 'n"1\\x', Status.FAIL, "line one\nline two")  # every escape at once
    sample_report.add(odd)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RunCollector(sample_report))
    assert renderer("prometheus")(sample_report) == generate_latest(registry).decode()
