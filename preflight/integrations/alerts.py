"""`preflight alerts`: Prometheus alerting rules for the go-live alarms.

    preflight alerts --out rules.yml
    preflight alerts --from preflight-report/results.json --out rules.yml
    preflight alerts --format prometheus-operator --namespace monitoring --out preflight-rules.yaml

Four alerts, all severity "warning" (new alarms start as warnings until a team trusts them):

- PreflightGpuUtilizationLow: dcgm-exporter's DCGM_FI_DEV_GPU_UTIL averaged over a window is
  below a floor: GPUs idle while they wait for data, the host or a straggler.
- PreflightGpuXidError: DCGM_FI_DEV_XID_ERRORS (the last XID error the driver reported) is not zero.
- PreflightCommLatencyHigh: the p99 of preflight_allreduce_latency_seconds (the histogram of
  preflight.integrations.monitor.instrument_ddp) is above a ceiling.
- PreflightGpuTelemetryMissing: a node that sent GPU telemetry within the look-back window no longer
  does (its exporter is down or no longer scraped: Prometheus marks the series stale), or there is
  no GPU telemetry at all.

No expression names a scrape job: rules keep working whatever the job is called.

Defaults are stated in `Thresholds`; `--from results.json` derives them from a run's figures that
checks declare as alarm figures (`alarm_figures` in the report; the training canary's): the floor at
70% of the utilisation measured on the least busy node, the ceiling at 3x the p99 bucket latency
measured on the slowest node.

The output is YAML written here by hand (no YAML library is a dependency of preflight): every
string is a JSON string, which is a valid YAML double-quoted scalar, so nothing needs YAML escaping.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from preflight.core.model import ALARM_COMM_LATENCY_P99, ALARM_GPU_UTILIZATION

UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
LATENCY_METRIC = "preflight_allreduce_latency_seconds"
GROUP = "preflight-go-live"
# --from: alarm at this share of the measured utilisation, and at this multiple of the measured p99.
UTIL_FLOOR_SHARE = 0.70
LATENCY_CEILING_FACTOR = 3.0
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


@dataclass
class Thresholds:
    # Training keeps a healthy GPU busy most of the time; averaged over 10 minutes, below 50% a job
    # wastes half its GPU time (or the GPU sits idle between jobs, which is worth knowing too).
    gpu_util_floor_pct: float = 50.0
    util_window: str = "10m"
    util_for: str = "15m"
    xid_window: str = "5m"
    xid_for: str = "0m"
    # A gradient bucket (25 MiB by default in DDP) all-reduces in milliseconds on a healthy fabric;
    # a p99 of a quarter second means a straggler, a congested link or a fallback transport.
    comm_latency_ceiling_s: float = 0.25
    latency_window: str = "5m"
    latency_for: str = "10m"
    telemetry_lookback: str = "30m"
    telemetry_for: str = "5m"
    severity: str = "warning"

    def with_for(self, duration: str) -> Thresholds:
        """The same thresholds with every alert's `for:` set to one duration (tests use seconds)."""
        return replace(self, util_for=duration, xid_for=duration, latency_for=duration, telemetry_for=duration)


def check_duration(value: str) -> str:
    if not DURATION.match(value):
        raise ValueError(f"{value!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)")
    return value


def thresholds_from_results(report: dict[str, Any], base: Thresholds) -> tuple[Thresholds, list[str]]:
    """Floors and ceilings from the alarm figures of a run (results.json): the measurements its checks
    declare (`alarm_figures`: check id -> alarm -> measurement name); notes say what was used."""
    utils, latencies = [], []
    declared = report.get("alarm_figures") or {}
    for result in report.get("results", []):
        names = declared.get(result.get("check_id")) or {}
        for m in result.get("measurements", []):
            value = m.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue  # a NaN or infinite figure sets no floor (it would make every alert fire, or none)
            if m.get("name") == names.get(ALARM_GPU_UTILIZATION) and m.get("unit") == "%":
                utils.append((value, result.get("node")))
            elif m.get("name") == names.get(ALARM_COMM_LATENCY_P99) and m.get("unit") in SECONDS_PER_UNIT:
                latencies.append((value * SECONDS_PER_UNIT[m["unit"]], result.get("node")))
    notes = []
    thresholds = base
    if utils:
        value, node = min(utils)
        floor = round(UTIL_FLOOR_SHARE * value, 1)
        thresholds = replace(thresholds, gpu_util_floor_pct=floor)
        notes.append(f"GPU utilisation floor {floor:g}%: {UTIL_FLOOR_SHARE:.0%} of the {value:g}% the canary "
                     f"measured on {node}")
    else:
        notes.append(f"GPU utilisation floor {base.gpu_util_floor_pct:g}% (default): the run has no canary "
                     "utilisation figure (no GPU, or the training canary did not run)")
    if latencies:
        value, node = max(latencies)
        ceiling = float(f"{LATENCY_CEILING_FACTOR * value:.3g}")
        thresholds = replace(thresholds, comm_latency_ceiling_s=ceiling)
        notes.append(f"all-reduce p99 ceiling {ceiling:g} s: {LATENCY_CEILING_FACTOR:g}x the {value:g} s the "
                     f"canary measured on {node}")
    else:
        notes.append(f"all-reduce p99 ceiling {base.comm_latency_ceiling_s:g} s (default): the run has no "
                     "canary latency figure")
    return thresholds, notes


def rules(t: Thresholds) -> dict[str, Any]:
    """The rule file as data: {"groups": [{"name", "rules": [...]}]}."""
    labels = {"severity": t.severity, "source": "preflight"}
    util = {
        "alert": "PreflightGpuUtilizationLow",
        "expr": f"avg_over_time({UTIL_METRIC}[{t.util_window}]) < {t.gpu_util_floor_pct:g}",
        "for": t.util_for,
        "labels": labels,
        "annotations": {
            "summary": "GPU {{ $labels.gpu }} on {{ $labels.instance }} busy {{ $value | printf \"%.0f\" }}% "
                       f"on average over {t.util_window} (floor {t.gpu_util_floor_pct:g}%)",
            "description": (
                f"The GPU's utilisation averaged over {t.util_window} is below {t.gpu_util_floor_pct:g}%. "
                "During training this means the GPU waits: for the next batch (a slow input pipeline or "
                "storage), for the host (a sync per step, host-device copies) or for a straggler rank. "
                "Runbook: 1) is a job meant to run on this GPU? Idle between jobs also fires this. "
                "2) Run `preflight run --checks canary.training,dataloader.throughput` on the node: a high "
                "data-wait share points at the loader. 3) Profile one step with torch.profiler. "
                "4) Compare with other nodes of the job: one slow node idles all the others."),
        },
    }
    xid = {
        "alert": "PreflightGpuXidError",
        "expr": f"max_over_time({XID_METRIC}[{t.xid_window}]) != 0",
        "for": t.xid_for,
        "labels": labels,
        "annotations": {
            "summary": "GPU {{ $labels.gpu }} on {{ $labels.instance }} reported XID {{ $value }}",
            "description": (
                "The NVIDIA driver reported an XID error on this GPU (the value is the XID code). Some are "
                "application faults (13, 31, 43), others mean the GPU or its link is failing (48 double-bit "
                "ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92-95 ECC). Runbook: read "
                "`dmesg | grep -i xid` on the node, look the code up in NVIDIA's XID catalogue, drain the "
                "node if it is a hardware XID and run `dcgmi diag -r 3` before it trains again."),
        },
    }
    latency = {
        "alert": "PreflightCommLatencyHigh",
        "expr": (f"histogram_quantile(0.99, sum by (instance, rank, le) "
                 f"(rate({LATENCY_METRIC}_bucket[{t.latency_window}]))) > {t.comm_latency_ceiling_s:g}"),
        "for": t.latency_for,
        "labels": labels,
        "annotations": {
            "summary": "All-reduce p99 {{ $value | humanizeDuration }} on rank {{ $labels.rank }} "
                       f"({{{{ $labels.instance }}}}), above {t.comm_latency_ceiling_s:g} s",
            "description": (
                f"The 99th percentile of one gradient bucket's all-reduce over {t.latency_window} is above "
                f"{t.comm_latency_ceiling_s:g} s (measured by preflight.integrations.monitor.instrument_ddp in the training "
                "job). Communication is taking over the step: added nodes may now cost more than they bring. "
                "Runbook: 1) one rank high and the others not: that node is the straggler (clocks, thermals, "
                "a noisy neighbour). 2) every rank high: the fabric (a degraded NIC or switch port, "
                "NCCL falling back to TCP: NCCL_DEBUG=INFO shows the transport). 3) Run "
                "`preflight run --nodes hosts.txt --checks net.bandwidth,collectives.cluster`."),
        },
    }
    telemetry = {
        "alert": "PreflightGpuTelemetryMissing",
        "expr": (f"(max by (instance) (max_over_time({UTIL_METRIC}[{t.telemetry_lookback}])) "
                 f"unless max by (instance) ({UTIL_METRIC})) or absent({UTIL_METRIC})"),
        "for": t.telemetry_for,
        "labels": labels,
        "annotations": {
            "summary": "No GPU telemetry from {{ if $labels.instance }}{{ $labels.instance }}{{ else }}any node{{ end }}",
            "description": (
                f"A node sent {UTIL_METRIC} within the last {t.telemetry_lookback} and no longer does (the "
                "instance label names it), or no GPU telemetry reaches Prometheus at all. Without "
                "it the utilisation and XID alarms are blind. Runbook: check that dcgm-exporter runs on the "
                "node (`curl NODE:9400/metrics`), that Prometheus still scrapes it (Status > Targets), and "
                "that the node itself is up."),
        },
    }
    return {"groups": [{"name": GROUP, "rules": [util, xid, latency, telemetry]}]}


def prometheus_rule(doc: dict[str, Any], name: str = "preflight-go-live", namespace: str | None = None,
                    labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule custom resource; `labels` are added to its
    metadata, so that a Prometheus whose ruleSelector wants them (kube-prometheus-stack: `release=NAME`)
    loads it."""
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "preflight", "role": "alert-rules",
                                                         **(labels or {})}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": metadata, "spec": doc}


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for dicts, lists, strings, numbers and booleans. Strings are JSON-quoted."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return pad + "{}\n"
        out = []
        for key, item in value.items():
            head = f"{pad}{_key(key)}:"
            if isinstance(item, (dict, list)) and item:
                out.append(head + "\n" + to_yaml(item, indent + 2))
            else:
                out.append(f"{head} {_scalar(item)}\n")
        return "".join(out)
    if isinstance(value, list):
        if not value:
            return pad + "[]\n"
        out = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                body = to_yaml(item, indent + 2)
                out.append(f"{pad}- {body[indent + 2:]}")
            else:
                out.append(f"{pad}- {_scalar(item)}\n")
        return "".join(out)
    return pad + _scalar(value) + "\n"


def _key(key: Any) -> str:
    text = str(key)
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", text) else json.dumps(text, allow_nan=False)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dict, list)):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(str(value), ensure_ascii=False, allow_nan=False)


def render(fmt: str, thresholds: Thresholds, *, name: str = "preflight-go-live", namespace: str | None = None,
           notes: list[str] | None = None, labels: dict[str, str] | None = None) -> str:
    """The text `preflight alerts` writes: a rule file (fmt "rules") or a PrometheusRule manifest."""
    doc = rules(thresholds)
    if fmt == "prometheus-operator":
        doc = prometheus_rule(doc, name, namespace, labels)
    elif labels:
        raise ValueError("--label applies to --format prometheus-operator (a rule file has no metadata)")
    elif fmt != "rules":
        raise ValueError(f"unknown alerts format {fmt!r}")
    header = "# Prometheus alerting rules for the go-live alarms, written by `preflight alerts`.\n"
    header += "".join(f"# {line}\n" for line in notes or [])
    return header + to_yaml(doc)


def build(fmt: str = "rules", *, report: dict[str, Any] | None = None, floor_pct: float | None = None,
          ceiling_s: float | None = None, window: str | None = None, for_: str | None = None,
          name: str = "preflight-go-live", namespace: str | None = None, labels: list[str] | None = None) -> str:
    """Everything `preflight alerts` does but writing: defaults, then a run's figures, then flags."""
    thresholds, notes = Thresholds(), []
    if report is not None:
        thresholds, notes = thresholds_from_results(report, thresholds)
    if floor_pct is not None:
        if not (math.isfinite(floor_pct) and 0 < floor_pct <= 100):
            raise ValueError("--gpu-util-floor must be a percentage above 0 and at most 100")
        thresholds = replace(thresholds, gpu_util_floor_pct=floor_pct)
    if ceiling_s is not None:
        if not (math.isfinite(ceiling_s) and ceiling_s > 0):
            raise ValueError("--comm-latency-ceiling must be above 0 seconds")
        thresholds = replace(thresholds, comm_latency_ceiling_s=ceiling_s)
    if window is not None:
        check_duration(window)
        thresholds = replace(thresholds, util_window=window, xid_window=window, latency_window=window)
    if for_ is not None:
        thresholds = thresholds.with_for(check_duration(for_))
    return render(fmt, thresholds, name=name, namespace=namespace, notes=notes, labels=parse_labels(labels or []))


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def parse_labels(items: list[str]) -> dict[str, str]:
    """`--label k=v` values as Kubernetes metadata labels; ValueError naming a bad one."""
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ValueError(f"--label {item!r} is not a Kubernetes label KEY=VALUE (e.g. --label release=kube-prometheus-stack)")
        labels[key] = value
    return labels
