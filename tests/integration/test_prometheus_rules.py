"""The generated rules against Prometheus' own tools: `promtool check rules` and `promtool test rules`
(each alert firing on unhealthy series and quiet on healthy ones, with the annotations it renders)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from preflight.integrations import alerts

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
LABELS = {"severity": "warning", "source": "preflight"}


def description(name: str) -> str:
    return next(r for r in alerts.rules(alerts.Thresholds())["groups"][0]["rules"] if r["alert"] == name)["annotations"]["description"]


def expected(name: str, labels: dict, summary: str) -> dict:
    return {"exp_labels": {**LABELS, **labels}, "exp_annotations": {"summary": summary, "description": description(name)}}


def series(name: str, labels: dict, values: str) -> dict:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def write_rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(alerts.build())
    return path


def test_generated_rules_pass_promtool_check(tmp_path):
    proc = promtool("check", "rules", str(write_rules(tmp_path)), cwd=tmp_path)
    assert proc.returncode == 0 and "4 rules found" in proc.stdout, proc.stdout + proc.stderr


def test_each_alert_fires_on_unhealthy_series_and_stays_quiet_on_healthy_ones(tmp_path):
    write_rules(tmp_path)
    n1 = {"instance": "n1:9400", "job": "anything"}
    inputs = [
        series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", **n1}, "20x60"),  # idle GPU: fires
        series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", **n1}, "95x60"),  # busy GPU: quiet
        series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "instance": "n2:9400", "job": "other"}, "90x20 stale"),  # stops
        series("DCGM_FI_DEV_XID_ERRORS", {"gpu": "0", **n1}, "0x60"),  # no XID: quiet
        series("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "instance": "n3:9400"}, "0x10 79x50"),  # XID 79: fires
        # rank 0 all-reduces in under 100 ms; rank 1 between 100 and 500 ms (p99 interpolates to 496 ms)
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "0", "le": "0.1"}, "0+60x60"),
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "0", "le": "0.5"}, "0+60x60"),
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "0", "le": "+Inf"}, "0+60x60"),
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "1", "le": "0.1"}, "0x60"),
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "1", "le": "0.5"}, "0+60x60"),
        series("preflight_allreduce_latency_seconds_bucket", {"instance": "t:8000", "rank": "1", "le": "+Inf"}, "0+60x60"),
    ]
    at = "40m"
    checks = [
        {"eval_time": at, "alertname": "PreflightGpuUtilizationLow", "exp_alerts": [expected(
            "PreflightGpuUtilizationLow", {"gpu": "0", **n1}, "GPU 0 on n1:9400 busy 20% on average over 10m (floor 50%)")]},
        {"eval_time": at, "alertname": "PreflightGpuXidError", "exp_alerts": [expected(
            "PreflightGpuXidError", {"gpu": "3", "instance": "n3:9400"}, "GPU 3 on n3:9400 reported XID 79")]},
        {"eval_time": at, "alertname": "PreflightCommLatencyHigh", "exp_alerts": [expected(
            "PreflightCommLatencyHigh", {"instance": "t:8000", "rank": "1"},
            "All-reduce p99 496ms on rank 1 (t:8000), above 0.25 s")]},
        {"eval_time": at, "alertname": "PreflightGpuTelemetryMissing", "exp_alerts": [expected(
            "PreflightGpuTelemetryMissing", {"instance": "n2:9400"}, "No GPU telemetry from n2:9400")]},
        # before n2 stopped, nothing is missing
        {"eval_time": "15m", "alertname": "PreflightGpuTelemetryMissing", "exp_alerts": []},
    ]
    nothing = [{"eval_time": "10m", "alertname": "PreflightGpuTelemetryMissing", "exp_alerts": [
        expected("PreflightGpuTelemetryMissing", {}, "No GPU telemetry from any node")]}]
    spec = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": inputs, "alert_rule_test": checks},
        {"interval": "1m", "input_series": [series("up", {"instance": "x:1"}, "1x20")], "alert_rule_test": nothing},
    ]}
    # JSON is YAML: promtool reads this test file as it is.
    (tmp_path / "tests.yml").write_text(json.dumps(spec, indent=1))
    proc = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
