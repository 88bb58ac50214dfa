"""monitoring.alarms judged from built facts (the shapes Prometheus' HTTP API answers with)."""

from __future__ import annotations

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.monitoring.alarms import MonitoringAlarms, Params, covers_utilisation, names_node

CHECK = MonitoringAlarms()
RULES = [{"name": "PreflightGpuUtilizationLow", "query": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m]) < 50",
          "health": "ok", "group": "g"},
         {"name": "PreflightCommLatencyHigh", "health": "ok", "group": "g",
          "query": "histogram_quantile(0.99, sum by (instance, rank, le) "
                   "(rate(preflight_allreduce_latency_seconds_bucket[5m]))) > 0.25"}]


def facts(rules=RULES, series=None, nodes=None):
    nodes = nodes or [{"name": "gpu01", "address": "10.0.0.1", "kind": "ssh"},
                      {"name": "gpu02.example.org", "address": "10.0.0.2", "kind": "ssh"}]
    series = series if series is not None else [{"labels": {"instance": "10.0.0.1:9400"}, "count": 8},
                                                 {"labels": {"Hostname": "gpu02", "instance": "pod:9400"}, "count": 8}]
    return {"url": "http://prom:9090", "nodes": nodes, "rules": rules, "targets": 2, "targets_down": [],
            "gpu_series": series}


def ids(outcome):
    return {f.id for f in outcome.findings}


def test_pass_when_both_rules_are_loaded_and_every_node_sends_telemetry():
    outcome = CHECK.evaluate(facts(), Params(), Expect())
    assert outcome.status is Status.PASS and ids(outcome) == set()


def test_fail_names_the_missing_rule_and_the_silent_node():
    outcome = CHECK.evaluate(facts(rules=RULES[:1], series=[{"labels": {"instance": "10.0.0.1:9400"}, "count": 8}]),
                             Params(), Expect())
    assert outcome.status is Status.FAIL
    assert ids(outcome) == {"monitoring.alarms.no-latency-rule", "monitoring.alarms.telemetry-missing"}
    silent = next(f for f in outcome.findings if f.id == "monitoring.alarms.telemetry-missing")
    assert "gpu02.example.org" in silent.message and "gpu01" not in silent.message  # the silent node, no other


def test_an_absence_rule_alone_does_not_cover_utilisation():
    assert not covers_utilisation("absent(DCGM_FI_DEV_GPU_UTIL)")
    assert covers_utilisation("avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]) < 40")


def test_nodes_match_by_name_address_short_name_and_loopback_for_the_local_node():
    assert names_node({"instance": "gpu01.example.org:9400"}, {"name": "gpu01", "address": ""})
    assert names_node({"kubernetes_node": "gpu01"}, {"name": "gpu01.example.org", "address": ""})
    assert names_node({"instance": "127.0.0.1:9400"}, {"name": "vm", "address": "", "kind": "local"})
    assert not names_node({"instance": "127.0.0.1:9400"}, {"name": "gpu01", "address": "10.0.0.1", "kind": "ssh"})
    assert not names_node({"instance": "gpu011:9400"}, {"name": "gpu01", "address": ""})


def test_skip_without_a_url():
    outcome = CHECK.evaluate({"url": None, "nodes": []}, Params(), Expect())
    assert outcome.status is Status.SKIP and ids(outcome) == {"monitoring.alarms.no-url"}
