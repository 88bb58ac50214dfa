"""monitoring.alarms: are the go-live alarms in place in the team's Prometheus?

Given `prometheus_url`, asks that Prometheus through its HTTP API:
- /api/v1/rules?type=alert: is an alerting rule loaded that watches GPU utilisation
  (DCGM_FI_DEV_GPU_UTIL compared against a floor) and one that watches communication latency
  (preflight_allreduce_latency_seconds, the histogram of preflight.integrations.monitor.instrument_ddp)?
- /api/v1/query: does GPU telemetry arrive from every node of this run? A node counts as covered when
  a DCGM_FI_DEV_GPU_UTIL series names it in its instance (host part), Hostname, hostname, node,
  kubernetes_node or nodename label, by its name or its address.
- /api/v1/targets: targets that are down, reported alongside (no rule depends on a job's name, and
  neither does this check).

PASS when all of it is there, FAIL naming what is missing, SKIP without a URL, ERROR when the server
cannot be reached or does not answer as Prometheus does. `preflight alerts` writes rules that pass.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from preflight.core.check import CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.run.context import ClusterContext
from preflight.core.model import Finding, Scope, Status

UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
LATENCY_METRIC = "preflight_allreduce_latency_seconds"
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "nodename")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
ADD_RULES = ("write the rules with `preflight alerts --out rules.yml` (or --format prometheus-operator) and "
             "add the file to rule_files in prometheus.yml, then reload Prometheus")


@dataclass
class Params:
    # Base URL of the Prometheus to ask, e.g. http://prometheus.monitoring:9090. None: SKIP.
    prometheus_url: str | None = param(None, kind="text",
                                       help=("base URL of the Prometheus to ask, e.g. http://prometheus:9090 "
                                             "(unset: SKIP)"))
    # Seconds for each HTTP request.
    request_timeout_s: float = param(10.0, kind="duration", help="time allowed for each HTTP request (seconds)")


class MonitoringAlarms(Check):
    id = "monitoring.alarms"
    title = "Go-live alarms: GPU utilisation and communication latency rules loaded, GPU telemetry scraped"
    scope = Scope.CLUSTER
    tags = ("cluster", "monitoring", "prometheus")
    why = (
        "Once training runs, nobody watches the GPUs by hand: an alarm on low GPU utilisation catches GPUs "
        "that wait for data, and one on all-reduce latency catches communication that costs more than the "
        "added machines bring. Those alarms are only as good as their rules being loaded and the GPU "
        "telemetry of every node arriving."
    )
    remediation = (ADD_RULES, "deploy dcgm-exporter on every GPU node and let Prometheus scrape it")
    fixes = {
        "no-url": "set monitoring.alarms.prometheus_url to the Prometheus that watches the training nodes",
        "no-utilization-rule": ADD_RULES,
        "no-latency-rule": (ADD_RULES + "; export the histogram from training with "
                            "preflight.integrations.monitor.instrument_ddp"),
        "telemetry-missing": ("run dcgm-exporter on those nodes and add them to Prometheus' scrape configuration (or "
                              "service discovery)"),
    }
    Params = Params
    timeout_s = 60.0
    levels = {"quick": {"timeout": 15, "request_timeout_s": 5.0}}

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        nodes = [{"name": n["name"], "address": n.get("address") or "", "kind": n.get("kind", "")} for n in ctx.nodes]
        facts: dict[str, Any] = {"url": params.prometheus_url, "nodes": nodes}
        if not params.prometheus_url:
            return facts
        base = params.prometheus_url.rstrip("/")

        def get(path: str, **query: str) -> Any:
            url = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
            try:
                with urllib.request.urlopen(url, timeout=params.request_timeout_s) as response:
                    body = json.loads(response.read().decode())
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                ctx.record(["GET", url], None, str(reason))
                raise CannotMeasure(f"Prometheus at {base} cannot be asked ({path}): {reason}") from exc
            ctx.record(["GET", url], 0, json.dumps(body)[-2000:])
            if body.get("status") != "success":
                raise CannotMeasure(f"Prometheus at {base} answered {path} with {body.get('error') or body}")
            return body["data"]

        facts["rules"] = [{"name": r.get("name"), "query": r.get("query", ""), "health": r.get("health"),
                           "group": g.get("name")}
                          for g in get("/api/v1/rules", type="alert").get("groups", []) for r in g.get("rules", [])]
        targets = get("/api/v1/targets", state="active").get("activeTargets", [])
        facts["targets_down"] = [{"scrape_url": t.get("scrapeUrl"), "error": t.get("lastError"),
                                  "labels": t.get("labels", {})} for t in targets if t.get("health") == "down"]
        facts["targets"] = len(targets)
        by = ", ".join(("instance",) + NODE_LABELS)
        result = get("/api/v1/query", query=f"count by ({by}) ({UTIL_METRIC})")
        facts["gpu_series"] = [{"labels": s.get("metric", {}), "count": float(s["value"][1])}
                               for s in result.get("result", [])]
        return facts

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if not facts.get("url"):
            return outcome_from_findings([self.finding("no-url", Status.SKIP,
                                                       "no Prometheus to ask: set monitoring.alarms.prometheus_url")],
                                         passed="")
        findings: list[Finding] = []
        rules = facts.get("rules", [])
        util_rules = [r["name"] for r in rules if covers_utilisation(r["query"])]
        latency_rules = [r["name"] for r in rules if LATENCY_METRIC in r["query"]]
        if not util_rules:
            findings.append(self.finding("no-utilization-rule", Status.FAIL,
                                         f"no alerting rule watches GPU utilisation ({UTIL_METRIC} below a floor)"))
        if not latency_rules:
            findings.append(self.finding("no-latency-rule", Status.FAIL,
                                         f"no alerting rule watches all-reduce latency ({LATENCY_METRIC})"))
        series = facts.get("gpu_series", [])
        missing = [n["name"] for n in facts.get("nodes", []) if not any(names_node(s["labels"], n) for s in series)]
        if missing:
            findings.append(self.finding("telemetry-missing", Status.FAIL,
                                         f"no GPU telemetry ({UTIL_METRIC}) from {', '.join(missing)}"))
        measurements = [
            measure("alerting rules on GPU utilisation", len(util_rules), "", at_least=1),
            measure("alerting rules on all-reduce latency", len(latency_rules), "", at_least=1),
            measure("nodes without GPU telemetry", len(missing), "", at_most=0),
            measure("scrape targets down", len(facts.get("targets_down", [])), ""),
        ]
        details = [f"rules: {', '.join(util_rules + latency_rules) or 'none of ours'}"]
        details += [f"target down: {t['scrape_url']}: {t['error']}" for t in facts.get("targets_down", [])]
        nodes = len(facts.get("nodes", []))
        passed = (f"{facts['url']} has alarms on GPU utilisation ({', '.join(util_rules)}) and all-reduce latency "
                  f"({', '.join(latency_rules)}), and GPU telemetry from all {nodes} node{'s' * (nodes != 1)}")
        return outcome_from_findings(findings, measurements, passed=passed, details=details)


def covers_utilisation(query: str) -> bool:
    """A rule that compares GPU utilisation against a floor (not one that only tests its absence)."""
    return UTIL_METRIC in query and "<" in query


def names_node(labels: dict[str, str], node: dict[str, Any]) -> bool:
    """Whether a series' labels name this node, by name or address, short or fully qualified."""
    wanted = {v.lower() for v in (node.get("name"), node.get("address")) if v}
    wanted |= {_short(v) for v in wanted}
    if node.get("kind") == "local" or node.get("address") in LOCAL_HOSTS:
        wanted |= LOCAL_HOSTS
    values = [labels.get(k, "") for k in NODE_LABELS]
    instance = labels.get("instance", "")
    if instance:
        host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 or instance.startswith("[") else instance
        values.append(host)
    values = [v.lower() for v in values if v]
    return any(v in wanted or _short(v) in wanted for v in values)


def _short(host: str) -> str:
    """gpu01 for gpu01.example.org; an IP address stays whole."""
    return host if host.replace(".", "").isdigit() or ":" in host else host.split(".")[0]
