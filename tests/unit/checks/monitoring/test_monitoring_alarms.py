"""monitoring.alarms judged from built facts (the shapes Prometheus' HTTP API answers with)."""

from __future__ import annotations

import pytest

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


# -- rule health and blind rules, from Prometheus' recorded answers (tests/data/monitoring/record.py) ----

import copy  # noqa: E402
import urllib.parse  # noqa: E402

from preflight_checks.monitoring.alarms import (  # noqa: E402
    QueryFailed, parse_time, rules_from_answer, watched_expression,
)
from tests.conftest import load_facts  # noqa: E402

RECORDED = load_facts("monitoring/rules_broken_and_blind.json")
RULES_KEY = "/api/v1/rules?type=alert"
TIME_KEY = "/api/v1/query?query=time%28%29"
NODES = [{"name": n, "address": "", "kind": "ssh"} for n in RECORDED["nodes"]]


def replayed(answers=None, nodes=NODES):
    """The facts collect() builds, from the recorded answers instead of a live Prometheus."""
    answers = answers or RECORDED["answers"]

    def get(path, **query):
        body = answers[f"{path}?{urllib.parse.urlencode(query)}"]
        if body.get("status") != "success":
            raise QueryFailed(body.get("error"))
        return body["data"]

    return CHECK._ask({"url": "http://prom:9090", "nodes": nodes}, get)


def answers_with(rules_kept=None, edit_rule=None, server_shift_s=0.0):
    answers = copy.deepcopy(RECORDED["answers"])
    for group in answers[RULES_KEY]["data"]["groups"]:
        if rules_kept is not None:
            group["rules"] = [r for r in group["rules"] if r["name"] in rules_kept]
        for rule in group["rules"]:
            if edit_rule:
                edit_rule(rule)
    now = answers[TIME_KEY]["data"]["result"][0] + server_shift_s
    answers[TIME_KEY]["data"]["result"] = [now, repr(now)]
    return answers


OURS = {"PreflightGpuUtilizationLow", "PreflightGpuXidError", "PreflightCommLatencyHigh", "PreflightGpuTelemetryMissing"}


def test_a_loaded_rule_that_fails_to_evaluate_is_fail_with_prometheus_error():
    outcome = CHECK.evaluate(replayed(), Params(), Expect())
    assert outcome.status is Status.FAIL
    errors = [f for f in outcome.findings if f.id == "monitoring.alarms.rule-error"]
    assert len(errors) == 1 and "BrokenUtilisation" in errors[0].message
    assert "vector cannot contain metrics with the same labelset" in errors[0].message
    # the healthy preflight rule still watches every node: the blind planted rule hides nothing
    assert ids(outcome) == {"monitoring.alarms.rule-error"}


def test_the_rules_preflight_alerts_writes_pass():
    outcome = CHECK.evaluate(replayed(answers_with(rules_kept=OURS)), Params(), Expect())
    assert outcome.status is Status.PASS, (outcome.summary, outcome.details)


def test_a_rule_whose_query_returns_no_series_for_a_gpu_node_is_fail_naming_the_node():
    kept = (OURS - {"PreflightGpuUtilizationLow"}) | {"BlindUtilisation"}
    outcome = CHECK.evaluate(replayed(answers_with(rules_kept=kept)), Params(), Expect())
    assert outcome.status is Status.FAIL and ids(outcome) == {"monitoring.alarms.rule-blind"}
    blind = next(f for f in outcome.findings if f.id == "monitoring.alarms.rule-blind")
    assert "busy-node" in blind.message and "idle-node" in blind.message and "BlindUtilisation" in blind.message


def test_a_rule_no_longer_evaluated_is_fail_and_one_not_yet_evaluated_is_warn():
    stale = CHECK.evaluate(replayed(answers_with(rules_kept=OURS, server_shift_s=3600)), Params(), Expect())
    assert stale.status is Status.FAIL and "monitoring.alarms.rule-stale" in ids(stale)

    def never(rule):
        if rule["name"] == "PreflightCommLatencyHigh":
            rule.update(health="unknown", lastEvaluation="0001-01-01T00:00:00Z", lastError="")

    fresh = CHECK.evaluate(replayed(answers_with(rules_kept=OURS, edit_rule=never)), Params(), Expect())
    assert fresh.status is Status.WARN and ids(fresh) == {"monitoring.alarms.rule-not-evaluated"}


def test_recorded_rules_carry_health_error_and_evaluation_time():
    rules = {r["name"]: r for r in rules_from_answer(RECORDED["answers"][RULES_KEY]["data"])}
    assert rules["BrokenUtilisation"]["health"] == "err" and rules["BrokenUtilisation"]["last_error"]
    assert rules["PreflightGpuUtilizationLow"]["health"] == "ok"
    assert rules["PreflightGpuUtilizationLow"]["last_evaluation_ts"] > 1.7e9
    assert rules["PreflightGpuUtilizationLow"]["watches"] == "avg_over_time(DCGM_FI_DEV_GPU_UTIL[5s])"
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time("2026-12-01T09:25:39.848886673Z") == pytest.approx(1796117139.848886)


@pytest.mark.parametrize("query, watched", [
    ("avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m]) < 50", "avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m])"),
    ('50 > avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{job="a<b"})', 'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{job="a<b"})'),
    ("avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]) < 40 and on(instance) up == 1", "avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m])"),
    ("up == 0 or avg(DCGM_FI_DEV_GPU_UTIL) < bool 40", "avg(DCGM_FI_DEV_GPU_UTIL)"),
    ("absent(DCGM_FI_DEV_GPU_UTIL)", None),
])
def test_the_watched_expression_is_the_compared_side(query, watched):
    assert watched_expression(query) == watched


def test_a_rule_that_alarms_on_an_idle_gpu_with_equals_zero_covers_utilisation():
    assert covers_utilisation("DCGM_FI_DEV_GPU_UTIL == 0")
    assert covers_utilisation("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)==0")
    assert not covers_utilisation("DCGM_FI_DEV_GPU_UTIL == 100")
    assert not covers_utilisation("avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]) > 90")


def test_rule_files_are_judged_without_a_prometheus_and_their_unloaded_alerts_named_with_one(tmp_path):
    from preflight.integrations import alerts
    from preflight_checks.monitoring.rule_files import read_rule_files

    path = tmp_path / "go-live.yml"
    path.write_text(alerts.build("prometheus-operator"), encoding="utf-8")
    files = {"file_rules": read_rule_files([str(path)]), "rule_files": [str(path)]}
    alone = CHECK.evaluate({"url": None, "nodes": [], **files}, Params(rule_files=[str(path)]), Expect())
    assert alone.status is Status.PASS and not ids(alone)
    facts = replayed(answers_with(rules_kept={"PreflightGpuUtilizationLow"}))
    beside = CHECK.evaluate({**facts, **files}, Params(prometheus_url="http://prom:9090"), Expect())
    assert "monitoring.alarms.rule-not-loaded" in ids(beside)
    named = next(f for f in beside.findings if f.id == "monitoring.alarms.rule-not-loaded")
    assert "PreflightCommLatencyHigh" in named.message and "PreflightGpuUtilizationLow," not in named.message
