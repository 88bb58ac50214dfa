"""preflight.prom: the run's statuses and figures as metrics, in node_exporter's textfile format.

    preflight run --textfile-dir /var/lib/node_exporter/textfile_collector

`--textfile-dir` writes preflight.prom (always that name) into node_exporter's
--collector.textfile.directory atomically, so node_exporter never reads half a file, and the run's
outcome lands in Prometheus beside the GPU telemetry (`--format prometheus` also writes it into the
run's own directory):

    preflight_check_status{check, node, status}      1 for the status the check had, 0 for the others
    preflight_check_duration_seconds{check, node}    how long the check took
    preflight_figure{check, node, name, unit}        one gauge per numeric figure
    preflight_figure_threshold{check, node, name, unit}  the threshold it was judged against, if any
    preflight_verdict{verdict}                       1 for GO, NO-GO or INCOMPLETE, 0 for the others
    preflight_silenced_findings                      findings [silence] accepted (a GO they did not block)
    preflight_exit_code                              the exit code of the run (130 when it was interrupted)
    preflight_subset_nodes, preflight_subset_excluded_nodes  with run --shape: the nodes the job can
                                                     start on, and those to leave out
    preflight_run_finished_timestamp_seconds         when the run ended (Unix time)

Label values never hold a path or a timestamp (each would start a new series every run): those
parts read `<path>` and `<time>`. Figures that are not numbers ("not measured: no GPU") are left out, and so are the points of a
per-step chart (figure "step": their median and p95 are figures of their own); a figure a cluster check files
under a node or link is labelled with that node. The text is made by prometheus_client, which escapes
label values as the format requires.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Iterator

from preflight.core.model import FIGURE_STEP, RunReport, Status
from preflight.core.verdict import Verdict, decide

FILENAME = "preflight.prom"  # what this reporter writes in the output directory


# Label values name a series for good: a path (a run directory) or a time in one would start a new
# series every run. Both are replaced by a placeholder; figures that then share a name are numbered.
_PATH = re.compile(r"(?<![\w.])(?:~|\.{1,2})?/[^\s,;()\[\]]+")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}[:-]\d{2}(?:[:-]\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


def stable_label(text: str) -> str:
    """A label value without paths or timestamps: 'free disk at /x/2026-12-01T09-00-00Z' -> 'free disk at <path>'."""
    return _PATH.sub("<path>", _TIME.sub("<time>", text))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class _RunCollector:
    def __init__(self, report: RunReport) -> None:
        self.report = report

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        status = GaugeMetricFamily("preflight_check_status", "Status of a check on a node: 1 for the status it "
                                   "had (PASS, WARN, FAIL, SKIP, ERROR), 0 for the others",
                                   labels=["check", "node", "status"])
        duration = GaugeMetricFamily("preflight_check_duration_seconds", "How long the check took on the node",
                                     labels=["check", "node"])
        figure = GaugeMetricFamily("preflight_figure", "A figure a check measured, in the unit of its label",
                                   labels=["check", "node", "name", "unit"])
        threshold = GaugeMetricFamily("preflight_figure_threshold", "The threshold a figure was judged against",
                                      labels=["check", "node", "name", "unit"])
        seen: set[tuple[str, ...]] = set()
        for result in self.report.results:
            for s in Status:
                status.add_metric([result.check_id, result.node, s.value], 1.0 if result.status is s else 0.0)
            duration.add_metric([result.check_id, result.node], float(result.duration_s or 0.0))
            for m in result.measurements:
                value = _number(m.value)
                if value is None or m.figure == FIGURE_STEP:
                    continue
                name = stable_label(m.name)
                key = (result.check_id, stable_label(m.node or result.node), name, m.unit or "")
                n = 1
                while key in seen:  # two figures whose names differed only in a path
                    n += 1
                    key = (key[0], key[1], f"{name} ({n})", key[3])
                seen.add(key)
                figure.add_metric(list(key), value)
                limit = _number(m.threshold)
                if limit is not None:
                    threshold.add_metric(list(key), limit)
        verdict = GaugeMetricFamily("preflight_verdict", "The run's verdict: 1 for the one it reached",
                                    labels=["verdict"])
        decision = decide(self.report)
        for v in Verdict:
            verdict.add_metric([v.value], 1.0 if v is decision.verdict else 0.0)
        code = GaugeMetricFamily("preflight_exit_code", "The exit code of the run: 0 GO, 1 NO-GO, 3 INCOMPLETE, "
                                 "4 GO on a subset (--shape), 130 interrupted", value=float(decision.exit_code))
        silenced = GaugeMetricFamily("preflight_silenced_findings", "Findings accepted by [silence] in the config: "
                                     "they did not block the verdict", value=float(len(decision.acknowledged_findings)))
        yield from (status, duration, figure, threshold, verdict, silenced, code)
        subset = self.report.subset
        if subset is not None:  # run --shape: how many nodes the job can start on, and how many to leave out
            yield GaugeMetricFamily("preflight_subset_nodes", "Nodes of the largest healthy subset in the job's "
                                    "shape (0 when none is offered)", value=float(len(subset.get("nodes") or [])
                                                                                   if subset.get("offered") else 0))
            yield GaugeMetricFamily("preflight_subset_excluded_nodes", "Nodes that subset leaves out",
                                    value=float(len(subset.get("exclude") or []) if subset.get("offered") else 0))
        finished = _timestamp(self.report.finished_at or self.report.started_at)
        if finished is not None:
            yield GaugeMetricFamily("preflight_run_finished_timestamp_seconds", "When the run ended, Unix time",
                                    value=finished)


def _timestamp(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


_LEGACY_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def exposition(families: Iterator[Any]) -> str:
    """The text exposition format (0.0.4) of gauge families, as prometheus_client's generate_latest
    writes it (the same bytes): written here because its per-sample checks cost a second per
    120,000 samples of a 1,000-node run. Names and label names are preflight's own, all legacy-valid."""
    from prometheus_client.utils import floatToGoString

    out: list[str] = []
    for family in families:
        if family.type != "gauge" or not _LEGACY_NAME.match(family.name):
            raise ValueError(f"{family.name}: only gauges with plain names are written here")
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {family.name} {doc}\n")
        out.append(f"# TYPE {family.name} gauge\n")
        for sample in family.samples:
            labels = ",".join([f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items())])
            stamp = f" {int(float(sample.timestamp) * 1000):d}" if sample.timestamp is not None else ""
            out.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}{stamp}\n" if labels
                       else f"{sample.name} {floatToGoString(sample.value)}{stamp}\n")
    return "".join(out)


def render(report: RunReport) -> str:
    return exposition(_RunCollector(report).collect())
