"""The go-live alarms end to end in a real Prometheus (Debian's package), on loopback.

Stand-in exporters (tiny HTTP servers in this test) serve dcgm-exporter's metric names for three
nodes: one busy, one idle, one that stops answering. Prometheus scrapes them every second with the
rules `preflight alerts` writes (short window and `for:` so that the test takes seconds):
PreflightGpuUtilizationLow fires for the idle node and stays quiet for the busy one,
PreflightGpuTelemetryMissing fires for the node that went away. monitoring.alarms is PASS against
this Prometheus and FAIL against one without the rules; ERROR when nothing answers.
Every process the test starts is stopped by its PID, also when the test fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from preflight.integrations import alerts
from preflight.core.check import Expect
from preflight.engine.context import ClusterContext
from preflight.engine.execute import execute
from preflight.launch.ranks import free_port
from preflight.core.model import Status
from preflight_checks.monitoring.alarms import MonitoringAlarms, Params

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus (Debian package prometheus) is not installed")
WAIT_S = 60.0


class Exporter:
    """Serves DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_XID_ERRORS for one node on 127.0.0.1."""

    def __init__(self, hostname: str, util: float) -> None:
        self.hostname, self.util = hostname, util
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                labels = f'gpu="0",UUID="GPU-{exporter.hostname}",Hostname="{exporter.hostname}"'
                body = (f"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{{{labels}}} {exporter.util}\n"
                        f"# TYPE DCGM_FI_DEV_XID_ERRORS gauge\nDCGM_FI_DEV_XID_ERRORS{{{labels}}} 0\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode())


def wait_for(what: str, predicate: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")


def start_prometheus(tmp_path: Path, name: str, targets: list[str], rule_file: Path | None) -> tuple[subprocess.Popen, str]:
    home = tmp_path / name
    home.mkdir()
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "stand-in-dcgm", "static_configs": [{"targets": targets}]}]}
    if rule_file:
        config["rule_files"] = [str(rule_file)]
    (home / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=(home / "log").open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, (home / "log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for("prometheus ready", ready)
    except BaseException:
        stop(proc)
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def exporters() -> Iterator[dict[str, Exporter]]:
    made = {"busy-node": Exporter("busy-node", 97), "idle-node": Exporter("idle-node", 3),
            "vanishing-node": Exporter("vanishing-node", 90)}
    try:
        yield made
    finally:
        for exporter in made.values():
            exporter.stop()


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for proc in started:
            stop(proc)


def firing(url: str, name: str) -> list[dict[str, Any]]:
    return [a for a in get(f"{url}/api/v1/alerts")["data"]["alerts"]
            if a["labels"].get("alertname") == name and a["state"] == "firing"]


def alarms_check(url: str | None, node_names: list[str], tmp_path: Path):
    ctx = ClusterContext(nodes=[{"kind": "ssh", "name": n, "address": n} for n in node_names], output_dir=tmp_path,
                         scratch_dir=tmp_path, expect=Expect(), timeout_s=60)
    return execute(MonitoringAlarms(), ctx, replace(Params(), prometheus_url=url, request_timeout_s=5), Expect(),
                   node="cluster")


def test_alerts_fire_for_unhealthy_telemetry_only_and_monitoring_alarms_sees_them(tmp_path, exporters, servers):
    rule_file = tmp_path / "rules.yml"
    rule_file.write_text(alerts.build(window="5s", for_="1s"))
    targets = [e.address for e in exporters.values()]
    proc, url = start_prometheus(tmp_path, "with-rules", targets, rule_file)
    servers.append(proc)

    low = wait_for("PreflightGpuUtilizationLow firing", lambda: firing(url, "PreflightGpuUtilizationLow"))
    assert {a["labels"]["Hostname"] for a in low} == {"idle-node"}
    assert low[0]["labels"]["severity"] == "warning" and "busy 3%" in low[0]["annotations"]["summary"]
    assert not firing(url, "PreflightGpuTelemetryMissing")

    result = alarms_check(url, ["busy-node", "idle-node", "vanishing-node"], tmp_path)
    assert result.status is Status.PASS, (result.summary, result.details)

    exporters["vanishing-node"].stop()
    gone = wait_for("PreflightGpuTelemetryMissing firing", lambda: firing(url, "PreflightGpuTelemetryMissing"))
    assert {a["labels"]["instance"] for a in gone} == {exporters["vanishing-node"].address}
    # still quiet for the busy node, after every evaluation so far
    assert {a["labels"]["Hostname"] for a in firing(url, "PreflightGpuUtilizationLow")} == {"idle-node"}

    result = alarms_check(url, ["busy-node", "vanishing-node"], tmp_path)
    assert result.status is Status.FAIL
    assert {f.id for f in result.findings} == {"monitoring.alarms.telemetry-missing"}
    assert "vanishing-node" in result.summary and "busy-node" not in result.summary


def test_monitoring_alarms_fails_without_rules_and_errors_without_a_server(tmp_path, exporters, servers):
    proc, url = start_prometheus(tmp_path, "no-rules", [exporters["busy-node"].address], None)
    servers.append(proc)
    wait_for("a GPU series scraped", lambda: get(f"{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL")["data"]["result"])
    result = alarms_check(url, ["busy-node"], tmp_path)
    assert result.status is Status.FAIL
    assert {f.id for f in result.findings} == {"monitoring.alarms.no-utilization-rule", "monitoring.alarms.no-latency-rule"}

    closed = f"http://127.0.0.1:{free_port()}"
    result = alarms_check(closed, ["busy-node"], tmp_path)
    assert result.status is Status.ERROR and closed in result.summary
    assert alarms_check(None, ["busy-node"], tmp_path).status is Status.SKIP


def test_a_prometheus_url_with_a_query_string_reaches_the_api_and_its_token_is_masked(tmp_path, exporters, servers):
    """A Prometheus behind a proxy that wants `?token=...`: the API path goes before the query (Prometheus
    ignores the extra parameter), and the token is in no text of the result."""
    proc, url = start_prometheus(tmp_path, "query-url", [exporters["busy-node"].address], None)
    servers.append(proc)
    wait_for("a GPU series scraped", lambda: get(f"{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL")["data"]["result"])
    token = "Pl4ntedT0ken"
    for base in (f"{url}?token={token}", f"{url}/?Access_Token={token}&x=1"):
        result = alarms_check(base, ["busy-node"], tmp_path)
        assert result.status is Status.FAIL, (base, result.summary)
        assert {f.id for f in result.findings} == {"monitoring.alarms.no-utilization-rule",
                                                   "monitoring.alarms.no-latency-rule"}
        assert token not in json.dumps(result.to_dict())


OUR_UTIL_EXPR = '"avg_over_time(DCGM_FI_DEV_GPU_UTIL[5s]) < 50"'


def rules_with_utilisation(tmp_path: Path, expression: str) -> Path:
    """The rules `preflight alerts` writes, with the utilisation alarm's expression replaced."""
    text = alerts.build(window="5s", for_="1s")
    assert OUR_UTIL_EXPR in text
    rule_file = tmp_path / f"rules-{abs(hash(expression))}.yml"
    rule_file.write_text(text.replace(OUR_UTIL_EXPR, json.dumps(expression)))
    return rule_file


def rule_state(url: str, name: str) -> dict[str, Any] | None:
    for group in get(f"{url}/api/v1/rules?type=alert")["data"]["groups"]:
        for rule in group["rules"]:
            if rule["name"] == name:
                return rule
    return None


def test_a_loaded_rule_that_fails_to_evaluate_is_fail_with_its_error(tmp_path, exporters, servers):
    # Matches the rule's text (the metric, a floor) but every evaluation fails: dropping the metric name
    # leaves two series with the same labels.
    broken = 'abs({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_XID_ERRORS"}) < 50'
    proc, url = start_prometheus(tmp_path, "broken-rule", [exporters["busy-node"].address],
                                 rules_with_utilisation(tmp_path, broken))
    servers.append(proc)
    state = wait_for("the broken rule evaluated", lambda: (rule_state(url, "PreflightGpuUtilizationLow") or {})
                     .get("health") == "err" and rule_state(url, "PreflightGpuUtilizationLow"))
    result = alarms_check(url, ["busy-node"], tmp_path)
    assert result.status is Status.FAIL
    assert {f.id for f in result.findings} == {"monitoring.alarms.rule-error"}
    assert state["lastError"] and state["lastError"] in result.summary


def test_a_rule_blind_to_a_node_with_gpus_is_fail_naming_the_node(tmp_path, exporters, servers):
    # Healthy, but selecting a job name the exporters are no longer scraped under.
    blind = 'avg_over_time(DCGM_FI_DEV_GPU_UTIL{job="old-dcgm"}[5s]) < 50'
    proc, url = start_prometheus(tmp_path, "blind-rule", [e.address for e in exporters.values()],
                                 rules_with_utilisation(tmp_path, blind))
    servers.append(proc)
    wait_for("GPU series scraped", lambda: len(get(f"{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL")["data"]["result"]) == 3)
    wait_for("the rule evaluated", lambda: (rule_state(url, "PreflightGpuUtilizationLow") or {}).get("health") == "ok")
    result = alarms_check(url, ["busy-node", "idle-node"], tmp_path)
    assert result.status is Status.FAIL
    assert {f.id for f in result.findings} == {"monitoring.alarms.rule-blind"}
    assert "busy-node" in result.summary and "idle-node" in result.summary
