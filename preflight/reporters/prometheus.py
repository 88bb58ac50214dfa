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
from operator import itemgetter
from typing import Any, Iterator, NamedTuple

from preflight.core.model import FIGURE_STEP, RunReport, Status
from preflight.core.verdict import Verdict
from preflight.reporters.view import decision_of

FILENAME = "preflight.prom"  # what this reporter writes in the output directory


# Label values name a series for good: a path (a run directory) or a time in one would start a new
# series every run. Both are replaced by a placeholder; figures that then share a name are numbered.
_PATH = re.compile(r"(?<![\w.])(?:~|\.{1,2})?/[^\s,;()\[\]]+")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}[:-]\d{2}(?:[:-]\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


def stable_label(text: str) -> str:
    """A label value without paths or timestamps: 'free disk at /x/2026-12-01T09-00-00Z' -> 'free disk at <path>'."""
    return _PATH.sub("<path>", _TIME.sub("<time>", text))


def _number(value: Any) -> float | None:
    if type(value) is float:  # most figures: the rest of the test is for the others
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class _Family(NamedTuple):
    """One gauge family as the exposition writes it: its samples' label values in the order of `labels`."""
    name: str
    doc: str
    labels: tuple[str, ...]
    rows: list[tuple[tuple[str, ...], float]]


def _one(name: str, doc: str, value: float) -> _Family:
    return _Family(name, doc, (), [((), value)])


def _result_families(report: RunReport) -> list[_Family]:
    status = _Family("preflight_check_status", "Status of a check on a node: 1 for the status it had (PASS, WARN, "
                     "FAIL, SKIP, ERROR), 0 for the others", ("check", "node", "status"), [])
    duration = _Family("preflight_check_duration_seconds", "How long the check took on the node", ("check", "node"), [])
    figure = _Family("preflight_figure", "A figure a check measured, in the unit of its label",
                     ("check", "node", "name", "unit"), [])
    threshold = _Family("preflight_figure_threshold", "The threshold a figure was judged against",
                        ("check", "node", "name", "unit"), [])
    statuses = [(s, s.value) for s in Status]
    stable: dict[str, str] = {}  # a 1,000-node run names the same figures and nodes again and again
    seen: set[tuple[str, ...]] = set()
    for result in report.results:
        check, node = result.check_id, result.node
        status.rows.extend(((check, node, value), 1.0 if result.status is s else 0.0) for s, value in statuses)
        duration.rows.append(((check, node), float(result.duration_s or 0.0)))
        for m in result.measurements:
            value = _number(m.value)
            if value is None or m.figure == FIGURE_STEP:
                continue
            name = stable.get(m.name) or stable.setdefault(m.name, stable_label(m.name))
            where = m.node or node
            key = (check, stable.get(where) or stable.setdefault(where, stable_label(where)), name, m.unit or "")
            n = 1
            while key in seen:  # two figures whose names differed only in a path
                n += 1
                key = (key[0], key[1], f"{name} ({n})", key[3])
            seen.add(key)
            figure.rows.append((key, value))
            limit = _number(m.threshold)
            if limit is not None:
                threshold.rows.append((key, limit))
    return [status, duration, figure, threshold]


def _families(report: RunReport) -> list[_Family]:
    decision = decision_of(report)
    families = _result_families(report)
    families.append(_Family("preflight_verdict", "The run's verdict: 1 for the one it reached", ("verdict",),
                            [((v.value,), 1.0 if v is decision.verdict else 0.0) for v in Verdict]))
    families.append(_one("preflight_silenced_findings", "Findings accepted by [silence] in the config: they did "
                         "not block the verdict", float(len(decision.acknowledged_findings))))
    families.append(_one("preflight_exit_code", "The exit code of the run: 0 GO, 1 NO-GO, 3 INCOMPLETE, 4 GO on a "
                         "subset (--shape), 130 interrupted", float(decision.exit_code)))
    subset = report.subset
    if subset is not None:  # run --shape: how many nodes the job can start on, and how many to leave out
        offered = bool(subset.get("offered"))
        families.append(_one("preflight_subset_nodes", "Nodes of the largest healthy subset in the job's shape (0 "
                             "when none is offered)", float(len(subset.get("nodes") or []) if offered else 0)))
        families.append(_one("preflight_subset_excluded_nodes", "Nodes that subset leaves out",
                             float(len(subset.get("exclude") or []) if offered else 0)))
    finished = _timestamp(report.finished_at or report.started_at)
    if finished is not None:
        families.append(_one("preflight_run_finished_timestamp_seconds", "When the run ended, Unix time", finished))
    return families


class _RunCollector:
    """The same families as prometheus_client's collector, for a registry."""

    def __init__(self, report: RunReport) -> None:
        self.report = report

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        for family in _families(self.report):
            gauge = GaugeMetricFamily(family.name, family.doc, labels=list(family.labels))
            for values, value in family.rows:
                gauge.add_metric(list(values), value)
            yield gauge


def _timestamp(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


_LEGACY_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class _Escaped(dict):
    """Label values as the format writes them, each escaped once."""

    def __missing__(self, value: str) -> str:
        self[value] = text = _escape(value)
        return text


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def exposition(families: list[_Family]) -> str:
    """The text exposition format (0.0.4) of gauge families, as prometheus_client's generate_latest
    writes it (the same bytes): written here because its per-sample checks cost a second per
    120,000 samples of a 1,000-node run. Names and label names are preflight's own, all legacy-valid."""
    from prometheus_client.utils import floatToGoString

    out: list[str] = []
    escaped = _Escaped()
    shown: dict[float, str] = {}
    for family in families:
        if not _LEGACY_NAME.match(family.name):
            raise ValueError(f"{family.name}: only plain names are written here")
        doc = family.doc.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {family.name} {doc}\n# TYPE {family.name} gauge\n")
        order = sorted(range(len(family.labels)), key=lambda i: family.labels[i])  # as the format sorts them
        if not order:
            for _, value in family.rows:
                out.append(f"{family.name} {shown.get(value) or shown.setdefault(value, floatToGoString(value))}\n")
            continue
        line = family.name + "{" + ",".join(f'{family.labels[i]}="%s"' for i in order) + "} %s\n"
        pick = itemgetter(*order) if len(order) > 1 else (lambda values, i=order[0]: (values[i],))
        for values, value in family.rows:
            number = shown.get(value) or shown.setdefault(value, floatToGoString(value))
            out.append(line % (*map(escaped.__getitem__, pick(values)), number))
    return "".join(out)


def render(report: RunReport) -> str:
    return exposition(_families(report))
