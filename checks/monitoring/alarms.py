"""monitoring.alarms: are the go-live alarms in place in the team's Prometheus?

Given `prometheus_url`, asks that Prometheus through its HTTP API:
- /api/v1/rules?type=alert: is an alerting rule loaded that watches GPU utilisation
  (DCGM_FI_DEV_GPU_UTIL compared against a floor) and one that watches communication latency
  (preflight_allreduce_latency_seconds, the histogram of preflight.integrations.monitor.instrument_ddp)?
  And do those rules work: Prometheus says each rule's `health` ("ok", "err" with its `lastError`,
  "unknown" before its first evaluation) and its `lastEvaluation`. A rule that is loaded but fails to
  evaluate is FAIL with Prometheus' error; one not evaluated for three of its group's intervals (at
  least a minute) is FAIL too; one never evaluated yet is WARN;
- /api/v1/query of each utilisation rule's expression without its threshold: a rule whose query no
  longer returns a series for a node that sends GPU telemetry (a renamed job or label) watches nothing
  there, and that node has no alarm: FAIL naming the node and the rules;
- /api/v1/query: does GPU telemetry arrive from every node of this run? A node counts as covered when
  a DCGM_FI_DEV_GPU_UTIL series names it in its instance (host part), Hostname, hostname, node,
  kubernetes_node or nodename label, by its name or its address.
- /api/v1/targets: targets that are down, reported alongside (no rule depends on a job's name, and
  neither does this check).

PASS when all of it is there and working, FAIL naming what is missing or broken, SKIP without a URL,
ERROR when the server cannot be reached or does not answer as Prometheus does. `preflight alerts`
writes rules that pass.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from preflight.core.check import CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.core.finite import dumps
from preflight.core.redact import basic_auth, redact_url
from preflight.engine.context import ClusterContext
from preflight.core.model import Finding, Scope, Status
from preflight_checks.monitoring.promql import UTIL_METRIC, watched_expression

LATENCY_METRIC = "preflight_allreduce_latency_seconds"
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "nodename")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
# A rule is stale when its last evaluation is older than this many of its group's intervals, and
# at least STALE_MIN_S: the rule manager stopped evaluating it (a stuck group, a paused server).
STALE_INTERVALS = 3
STALE_MIN_S = 60.0
# Utilisation rules whose expression is asked for its series; a Prometheus with more is told in a note.
MAX_RULE_QUERIES = 10
FIX_RULE = ("fix the rule's expression (Prometheus' error says what fails), run `promtool check rules` on the file, "
            "then reload Prometheus; `preflight alerts` writes rules that evaluate")
FIX_STALE = ("look at Prometheus' rule manager: /rules shows each group's last evaluation, and the server log its "
             "errors (a group whose evaluation takes longer than its interval is skipped)")
FIX_BLIND = ("the rule's selector no longer matches this node's GPU series (a renamed job, instance or label): "
             "write the rule against DCGM_FI_DEV_GPU_UTIL without a job selector, as `preflight alerts` does")
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
    # Rule files (or PrometheusRule manifests) judged before Prometheus loads them.
    rule_files: list[str] = param(kind="list", factory=list,
                                  help="rule files or PrometheusRule manifests to judge as written, before Prometheus "
                                       "loads them")


class QueryFailed(Exception):
    """Prometheus answered, but not with data (status "error")."""


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
        "rule-error": FIX_RULE,
        "rule-not-evaluated": "run the check again after the rule's first evaluation",
        "rule-stale": FIX_STALE,
        "rule-blind": FIX_BLIND,
        "rule-not-loaded": ("add the file to rule_files in prometheus.yml (or apply the PrometheusRule where the "
                            "operator's ruleSelector finds it), then reload Prometheus"),
    }
    Params = Params
    alarm_rules = "rule_files"
    timeout_s = 60.0
    levels = {"quick": {"timeout": 15, "request_timeout_s": 5.0}}

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        nodes = [{"name": n["name"], "address": n.get("address") or "", "kind": n.get("kind", "")} for n in ctx.nodes]
        facts: dict[str, Any] = {"url": redact_url(params.prometheus_url) if params.prometheus_url else None,
                                 "nodes": nodes}
        if params.rule_files:
            from preflight_checks.monitoring.rule_files import RuleFileError, read_rule_files

            try:
                facts["file_rules"] = read_rule_files(list(params.rule_files))
            except RuleFileError as exc:
                raise CannotMeasure(str(exc)) from None
            facts["rule_files"] = list(params.rule_files)
        if not params.prometheus_url:
            return facts
        real_base, headers = basic_auth(params.prometheus_url)
        base = redact_url(real_base)  # what messages and evidence name: no token in its query either

        def get(path: str, **query: str) -> Any:
            real = api_url(real_base, path, query)
            url = redact_url(real)
            try:
                with urllib.request.urlopen(urllib.request.Request(real, headers=headers),
                                            timeout=params.request_timeout_s) as response:
                    body = json.loads(response.read().decode())
            except urllib.error.HTTPError as exc:  # Prometheus answers a query it cannot run with 4xx/5xx JSON
                try:
                    body = json.loads(exc.read().decode())
                except (OSError, ValueError):
                    body = {"status": "error", "error": str(exc)}
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = redact_url(getattr(exc, "reason", exc))
                ctx.record(["GET", url], None, str(reason))
                raise CannotMeasure(f"Prometheus at {base} cannot be asked ({path}): {reason}") from exc
            ctx.record(["GET", url], 0, dumps(body)[-2000:])
            if body.get("status") != "success":
                raise QueryFailed(f"Prometheus at {base} answered {path} with {body.get('error') or body}")
            return body["data"]

        try:
            return self._ask(facts, get)
        except QueryFailed as exc:
            raise CannotMeasure(str(exc)) from None

    def _ask(self, facts: dict[str, Any], get: Any) -> dict[str, Any]:
        facts["rules"] = rules_from_answer(get("/api/v1/rules", type="alert"))
        facts["server_time"] = scalar_value(get("/api/v1/query", query="time()"))
        asked = [r for r in facts["rules"] if covers_utilisation(r["query"]) and r.get("watches")
                 and r.get("health") == "ok"]
        if len(asked) > MAX_RULE_QUERIES:
            facts["rules_not_asked"] = [r["name"] for r in asked[MAX_RULE_QUERIES:]]
        for rule in asked[:MAX_RULE_QUERIES]:
            try:
                answer = get("/api/v1/query", query=rule["watches"])
            except QueryFailed as exc:  # its own expression fails: the rule's health says it too
                rule["series_error"] = str(exc)
                continue
            rule["series"] = series_labels(answer)
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
        if not facts.get("url") and "file_rules" in facts:
            return self._judge_files(facts)
        if not facts.get("url"):
            return outcome_from_findings([self.finding("no-url", Status.SKIP,
                                                       "no Prometheus to ask: set monitoring.alarms.prometheus_url")],
                                         passed="")
        server_time = facts.get("server_time")
        rules = facts.get("rules", [])
        util_all = [r for r in rules if covers_utilisation(r["query"])]
        latency_all = [r for r in rules if LATENCY_METRIC in r["query"]]
        findings = self._unloaded(facts)
        for rule in util_all + [r for r in latency_all if r not in util_all]:
            findings += judge_rule_health(self, rule, server_time)
        util_working = [r for r in util_all if rule_works(r, server_time)]
        util_rules = [r["name"] for r in util_working]
        latency_rules = [r["name"] for r in latency_all if rule_works(r, server_time)]
        findings += self._rules_missing(util_all, latency_all)
        telemetry, missing = self._telemetry(facts, util_working)
        findings += telemetry
        measurements = [
            measure("alerting rules on GPU utilisation", len(util_rules), "", at_least=1),
            measure("alerting rules on all-reduce latency", len(latency_rules), "", at_least=1),
            measure("nodes without GPU telemetry", len(missing), "", at_most=0),
            measure("scrape targets down", len(facts.get("targets_down", [])), ""),
        ]
        details = [f"rules: {', '.join(util_rules + latency_rules) or 'none of ours'}"]
        if facts.get("rules_not_asked"):
            details.append(f"not asked for their series (more than {MAX_RULE_QUERIES} utilisation rules): "
                           f"{', '.join(facts['rules_not_asked'])}")
        details += [f"target down: {t['scrape_url']}: {t['error']}" for t in facts.get("targets_down", [])]
        nodes = len(facts.get("nodes", []))
        passed = (f"{facts['url']} has alarms on GPU utilisation ({', '.join(util_rules)}) and all-reduce latency "
                  f"({', '.join(latency_rules)}), and GPU telemetry from all {nodes} node{'s' * (nodes != 1)}")
        return outcome_from_findings(findings, measurements, passed=passed, details=details)

    def _unloaded(self, facts: dict[str, Any]) -> list[Finding]:
        """Rules written in the rule files that the Prometheus asked has not loaded."""
        loaded = {r["name"] for r in facts.get("rules", [])}
        unloaded = [r["name"] for r in facts.get("file_rules", []) if r["name"] not in loaded]
        if not unloaded:
            return []
        return [self.finding("rule-not-loaded", Status.WARN,
                             f"{', '.join(dict.fromkeys(unloaded))} of {', '.join(facts['rule_files'])} "
                             f"not loaded in {facts['url']}")]

    def _rules_missing(self, util_all: list[dict[str, Any]], latency_all: list[dict[str, Any]]) -> list[Finding]:
        findings: list[Finding] = []
        if not util_all:
            findings.append(self.finding("no-utilization-rule", Status.FAIL,
                                         f"no alerting rule watches GPU utilisation ({UTIL_METRIC} below a floor)"))
        if not latency_all:
            findings.append(self.finding("no-latency-rule", Status.FAIL,
                                         f"no alerting rule watches all-reduce latency ({LATENCY_METRIC})"))
        return findings

    def _telemetry(self, facts: dict[str, Any], util_working: list[dict[str, Any]]) -> tuple[list[Finding], list[str]]:
        """Nodes no working utilisation rule sees although their telemetry arrives, and nodes without
        telemetry: (findings, the names of the nodes without telemetry)."""
        findings: list[Finding] = []
        series = facts.get("gpu_series", [])
        with_telemetry = [n for n in facts.get("nodes", []) if any(names_node(s["labels"], n) for s in series)]
        blind = blind_nodes(util_working, with_telemetry)
        if blind:
            names = ", ".join(r["name"] for r in util_working)
            findings.append(self.finding("rule-blind", Status.FAIL,
                                         f"no GPU utilisation alarm watches {', '.join(blind)}: the query of {names} "
                                         f"returns no series for {'it' if len(blind) == 1 else 'them'}, although "
                                         f"{UTIL_METRIC} arrives"))
        missing = [n["name"] for n in facts.get("nodes", []) if not any(names_node(s["labels"], n) for s in series)]
        if missing:
            findings.append(self.finding("telemetry-missing", Status.FAIL,
                                         f"no GPU telemetry ({UTIL_METRIC}) from {', '.join(missing)}"))
        return findings, missing

    def _judge_files(self, facts: dict[str, Any]) -> Outcome:
        """The rules as written in rule files, before any Prometheus loaded them: is there an alarm on
        GPU utilisation and one on all-reduce latency? (Health and series need a running Prometheus.)"""
        rules, files = facts["file_rules"], ", ".join(facts["rule_files"])
        util = [r["name"] for r in rules if covers_utilisation(r["query"])]
        latency = [r["name"] for r in rules if LATENCY_METRIC in r["query"]]
        findings: list[Finding] = []
        if not util:
            findings.append(self.finding("no-utilization-rule", Status.FAIL, f"no alerting rule in {files} watches "
                                         f"GPU utilisation ({UTIL_METRIC} below a floor)"))
        if not latency:
            findings.append(self.finding("no-latency-rule", Status.FAIL, f"no alerting rule in {files} watches "
                                         f"all-reduce latency ({LATENCY_METRIC})"))
        measurements = [measure("alerting rules on GPU utilisation", len(util), "", at_least=1),
                        measure("alerting rules on all-reduce latency", len(latency), "", at_least=1)]
        details = [f"{len(rules)} alerting rules in {files}"]
        return outcome_from_findings(findings, measurements, details=details,
                                     passed=f"{files} hold alarms on GPU utilisation ({', '.join(util)}) and "
                                            f"all-reduce latency ({', '.join(latency)}), not yet loaded anywhere")


_FLOOR = re.compile(r"<|(?<![=!<>])==\s*0(?![\d.])")


def covers_utilisation(query: str) -> bool:
    """A rule that compares GPU utilisation against a floor, `< 40` or an idle GPU's `== 0` (not one
    that only tests its absence, nor one that watches it run high)."""
    return UTIL_METRIC in query and _FLOOR.search(query) is not None


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


# -------------------------------------------------------------------------------- the API's answers

def parse_time(value: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as Prometheus writes it (nanoseconds, "Z");
    None for its zero time (never) or anything else."""
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip()).replace("Z", "+00:00")
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def api_url(base: str, path: str, query: dict[str, str]) -> str:
    """An API path under the base URL's own path, the base's query kept and the request's added: a
    Prometheus behind a proxy at `https://host/prom?token=T` is asked `https://host/prom/api/v1/query?token=T&query=up`."""
    parts = urllib.parse.urlsplit(base)
    both = "&".join(q for q in (parts.query, urllib.parse.urlencode(query)) if q)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, query=both, fragment=""))


def rules_from_answer(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The alerting rules of /api/v1/rules?type=alert, with their health and last evaluation."""
    rules = []
    for group in data.get("groups", []) or []:
        interval = group.get("interval")
        for rule in group.get("rules", []) or []:
            query = rule.get("query", "") or ""
            rules.append({
                "name": rule.get("name"), "query": query, "group": group.get("name"),
                "health": rule.get("health"), "last_error": rule.get("lastError") or "",
                "last_evaluation": rule.get("lastEvaluation"),
                "last_evaluation_ts": parse_time(rule.get("lastEvaluation")),
                "interval_s": interval if isinstance(interval, (int, float)) and math.isfinite(interval) else None,
                "watches": watched_expression(query),
            })
    return rules


def scalar_value(data: dict[str, Any]) -> float | None:
    """The value of a scalar query's answer (`time()`: the server's clock), or None."""
    try:
        value = float(data["result"][1] if data.get("resultType") == "scalar" else data["result"][0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def series_labels(data: dict[str, Any]) -> list[dict[str, str]] | None:
    """The label sets of an instant vector answer; None for any other kind of answer."""
    if data.get("resultType") != "vector":
        return None
    return [s.get("metric", {}) for s in data.get("result", []) or []]


# -------------------------------------------------------------------------------------- judging

def _age(rule: dict[str, Any], server_time: float | None) -> tuple[float, float] | None:
    """(seconds since the rule's last evaluation, the age past which it is stale), when both are known."""
    last = rule.get("last_evaluation_ts")
    if server_time is None or last is None:
        return None
    interval = rule.get("interval_s") or 0.0
    return server_time - last, max(STALE_INTERVALS * interval, STALE_MIN_S)


def judge_rule_health(check: Any, rule: dict[str, Any], server_time: float | None) -> list[Finding]:
    """What Prometheus says of a rule of ours: failing to evaluate, never evaluated, or no longer evaluated."""
    name, health = rule.get("name"), rule.get("health")
    if health == "err":
        error = rule.get("last_error") or "no error given"
        return [check.finding("rule-error", Status.FAIL, f"alerting rule {name} is loaded but fails to evaluate: {error}")]
    never = "last_evaluation" in rule and rule.get("last_evaluation_ts") is None  # (facts of older runs lack it)
    if health == "unknown" or (health is not None and never):
        return [check.finding("rule-not-evaluated", Status.WARN,
                              f"alerting rule {name} has not been evaluated yet (health {health}): a Prometheus that "
                              "has just started or reloaded")]
    age = _age(rule, server_time)
    if age is not None and age[0] > age[1]:
        every = f", its group runs every {rule['interval_s']:g} s" if rule.get("interval_s") else ""
        return [check.finding("rule-stale", Status.FAIL,
                              f"alerting rule {name} was last evaluated {age[0]:.0f} s ago{every}: it is not being "
                              "evaluated, so it cannot fire")]
    return []


def rule_works(rule: dict[str, Any], server_time: float | None) -> bool:
    """Loaded, evaluating, and evaluated lately (a rule recorded without its health counts as working)."""
    if rule.get("health") not in ("ok", None):
        return False
    age = _age(rule, server_time)
    return age is None or age[0] <= age[1]


def blind_nodes(rules: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[str]:
    """Nodes (that send GPU telemetry) whose series no working utilisation rule's query returns.
    Judged only when every such rule's series were asked for; a series without node labels (an
    aggregate over the cluster) covers every node."""
    if not rules or any(r.get("series") is None for r in rules):
        return []
    node_keys = ("instance",) + NODE_LABELS
    if any(not any(labels.get(k) for k in node_keys) for r in rules for labels in r["series"]):
        return []
    return [n["name"] for n in nodes if not any(names_node(labels, n) for r in rules for labels in r["series"])]
