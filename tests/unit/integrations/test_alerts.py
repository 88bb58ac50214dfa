"""preflight alerts: the rules as data, thresholds from a run, the hand-written YAML, the command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from preflight.integrations import alerts
from preflight.core.check import measure
from preflight.core.model import ALARM_COMM_LATENCY_P99, ALARM_GPU_UTILIZATION
from preflight.cli.main import cli
from tests.conftest import make_report, make_result

NAMES = ["PreflightGpuUtilizationLow", "PreflightGpuXidError", "PreflightCommLatencyHigh",
         "PreflightGpuTelemetryMissing"]


def all_rules(thresholds=None):
    return alerts.rules(thresholds or alerts.Thresholds())["groups"][0]["rules"]


def test_every_alert_is_a_warning_with_a_summary_and_a_runbook_and_names_no_job():
    found = all_rules()
    assert [r["alert"] for r in found] == NAMES
    for rule in found:
        assert rule["labels"]["severity"] == "warning"
        assert rule["annotations"]["summary"] and "Runbook" in rule["annotations"]["description"]
        assert "job" not in rule["expr"]


def test_stated_defaults_and_overrides_reach_the_expressions():
    util, xid, latency, telemetry = all_rules()
    assert util["expr"] == "avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m]) < 50"
    assert xid["expr"] == "max_over_time(DCGM_FI_DEV_XID_ERRORS[5m]) != 0"
    assert latency["expr"].startswith("histogram_quantile(0.99, ")
    assert "preflight_allreduce_latency_seconds_bucket[5m]" in latency["expr"] and latency["expr"].endswith("> 0.25")
    assert "absent(DCGM_FI_DEV_GPU_UTIL)" in telemetry["expr"]
    text = alerts.build(floor_pct=42, ceiling_s=0.05, window="2m", for_="30s")
    assert "DCGM_FI_DEV_GPU_UTIL[2m]) < 42" in text and "> 0.05" in text
    assert text.count('for: "30s"') == 4


# The figures are found by what the run records its checks declare, not by a check id.
CANARY = "site.canary"
DECLARED = {CANARY: {ALARM_GPU_UTILIZATION: "GPU utilisation (least busy GPU)",
                     ALARM_COMM_LATENCY_P99: "all-reduce latency per bucket p99"}}


def canary_result(node, util_pct=None, p99_ms=None, check_id=CANARY):
    ms = [measure("step time median", 40.0, "ms")]
    if util_pct is not None:
        ms.append(measure("GPU utilisation (least busy GPU)", util_pct, "%"))
    else:
        ms.append(measure("GPU utilisation", "not measured: no GPU"))
    if p99_ms is not None:
        ms.append(measure("all-reduce latency per bucket p99", p99_ms, "ms"))
    return make_result(check_id, node=node, measurements=ms)


def test_from_results_takes_seventy_percent_of_the_least_busy_node_and_three_times_the_slowest_p99():
    report = make_report([canary_result("a", 90.0, 4.0), canary_result("b", 80.0, 10.0)],
                         alarm_figures=DECLARED).to_dict()
    thresholds, notes = alerts.thresholds_from_results(report, alerts.Thresholds())
    assert thresholds.gpu_util_floor_pct == pytest.approx(56.0)
    assert thresholds.comm_latency_ceiling_s == pytest.approx(0.03)
    assert any("measured on b" in n for n in notes)
    # The same figures from a check that declares none are no alarm figures.
    undeclared = make_report([canary_result("a", 90.0, 4.0)]).to_dict()
    assert alerts.thresholds_from_results(undeclared, alerts.Thresholds())[0] == alerts.Thresholds()


def test_from_results_without_gpu_figures_keeps_the_defaults_and_says_so():
    report = make_report([canary_result("cpu-node", None, 20.0)], alarm_figures=DECLARED).to_dict()
    thresholds, notes = alerts.thresholds_from_results(report, alerts.Thresholds())
    assert thresholds.gpu_util_floor_pct == alerts.Thresholds().gpu_util_floor_pct
    assert thresholds.comm_latency_ceiling_s == pytest.approx(0.06)
    assert "(default)" in notes[0]


def test_hand_written_yaml_quotes_strings_as_json_and_nests_lists_of_maps():
    text = alerts.to_yaml({"groups": [{"name": 'a "b"', "rules": [{"for": "5m", "n": 3, "ok": True}]}], "e": []})
    assert text == ('groups:\n'
                    '  - name: "a \\"b\\""\n'
                    '    rules:\n'
                    '      - for: "5m"\n'
                    '        n: 3\n'
                    '        ok: true\n'
                    'e: []\n')


def test_prometheus_operator_manifest_carries_the_same_groups_under_spec():
    manifest = alerts.build("prometheus-operator", namespace="monitoring")
    assert 'kind: "PrometheusRule"' in manifest and 'namespace: "monitoring"' in manifest
    plain = alerts.to_yaml(alerts.rules(alerts.Thresholds()), indent=2)
    assert "spec:\n" + plain in manifest


def test_alerts_command_writes_the_file_and_rejects_bad_input(tmp_path):
    runner = CliRunner()
    out = tmp_path / "rules.yml"
    result = runner.invoke(cli, ["alerts", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().count("- alert: ") == 4
    results = tmp_path / "results.json"
    # A results file that records no declarations (an older run's) gets the installed canary's.
    old = make_report([canary_result("a", 90.0, 5.0, check_id="canary.training")]).to_dict()
    results.write_text(json.dumps({k: v for k, v in old.items() if k != "alarm_figures"}))
    result = runner.invoke(cli, ["alerts", "--from", str(results)])
    assert result.exit_code == 0 and "< 63" in result.output
    assert runner.invoke(cli, ["alerts", "--for", "soon"]).exit_code == 2
    assert runner.invoke(cli, ["alerts", "--gpu-util-floor", "150"]).exit_code == 2
    assert runner.invoke(cli, ["alerts", "--from", str(tmp_path / "missing.json")]).exit_code == 2


def test_labels_reach_the_prometheus_rule_metadata_for_a_rule_selector():
    import yaml

    text = alerts.build("prometheus-operator", labels=["release=kube-prometheus-stack", "team=ml"])
    doc = yaml.safe_load(text)
    assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert doc["metadata"]["labels"]["team"] == "ml" and doc["metadata"]["labels"]["role"] == "alert-rules"
    with pytest.raises(ValueError, match="applies to --format prometheus-operator"):
        alerts.build("rules", labels=["release=x"])
    for bad in ("release", "bad key=1", "release=" + "x" * 64, "-lead=1"):
        with pytest.raises(ValueError, match="is not a Kubernetes label"):
            alerts.build("prometheus-operator", labels=[bad])
    result = CliRunner().invoke(cli, ["alerts", "--format", "prometheus-operator", "--label", "oops"])
    assert result.exit_code == 2 and "--label 'oops'" in result.output


def test_alerts_check_judges_rule_files_before_they_are_loaded(tmp_path):
    runner = CliRunner()
    for fmt in ("rules", "prometheus-operator"):
        out = tmp_path / f"{fmt}.yml"
        assert runner.invoke(cli, ["alerts", "--format", fmt, "--out", str(out)]).exit_code == 0
        done = runner.invoke(cli, ["alerts", "--check", str(out)])
        assert done.exit_code == 0, done.output
        assert "PreflightGpuUtilizationLow" in done.output and "PreflightCommLatencyHigh" in done.output
    other = tmp_path / "other.yml"
    other.write_text("groups:\n- name: node\n  rules:\n  - alert: GpuIdle\n    expr: DCGM_FI_DEV_GPU_UTIL == 0\n"
                     "  - record: gpu:util:avg\n    expr: avg(DCGM_FI_DEV_GPU_UTIL)\n", encoding="utf-8")
    done = runner.invoke(cli, ["alerts", "--check", str(other)])  # utilisation yes (== 0), latency no
    assert done.exit_code == 1 and "all-reduce latency" in done.output and "GPU utilisation (" not in done.output
    for bad, says in (("missing.yml", "cannot be read"), ("bad.yml", "not YAML"), ("empty.yml", "no rule groups")):
        path = tmp_path / bad
        if bad != "missing.yml":
            path.write_text("groups: [" if bad == "bad.yml" else "scrape_configs: []\n", encoding="utf-8")
        done = runner.invoke(cli, ["alerts", "--check", str(path)])
        assert done.exit_code == 2 and str(path) in done.output and says in done.output and "Traceback" not in done.output
