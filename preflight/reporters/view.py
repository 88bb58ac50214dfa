"""What every human-facing report shows, computed once from the RunReport.

The terminal, Markdown and HTML reporters render this view; none of them judges anything.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from preflight.model import CLUSTER_NODE, CheckResult, Measurement, RunReport, Status
from preflight.verdict import Decision, Verdict, decide

HEADLINES = {
    Verdict.GO: "Ready to train.",
    Verdict.NO_GO: "Not ready to train.",
    Verdict.INCOMPLETE: "No verdict: the run did not finish.",
}


@dataclass
class Finding:
    """One blocking or warning result, phrased for a reader who will act on it."""

    check_id: str
    title: str
    node: str
    status: str
    summary: str
    remediation: list[str]
    expected_skip: bool = False


@dataclass
class CheckSection:
    check_id: str
    title: str
    why: str
    status: str  # worst over nodes
    results: list[CheckResult] = field(default_factory=list)


@dataclass
class ReportView:
    report: RunReport
    decision: Decision
    verdict: str
    headline: str
    reason: str
    exit_code: int
    blocking: list[Finding]
    warnings: list[Finding]
    skipped: list[Finding]
    nodes: list[str]
    unreachable: list[tuple[str, str]]
    matrix_checks: list[tuple[str, str]]  # (id, title) of node-scope checks, in plan order
    matrix: dict[str, dict[str, str]]  # node -> check id -> status
    cluster_results: list[CheckResult]
    sections: list[CheckSection]
    at_a_glance: list[tuple[str, str]]
    counts: dict[str, int]
    duration: str


def finding(result: CheckResult, expected_skip: bool = False) -> Finding:
    summary = result.summary
    if expected_skip:
        summary = f"skipped, but the configuration expects it to run: {result.summary}"
    return Finding(result.check_id, result.title or result.check_id, result.node, result.status.value, summary,
                   list(result.remediation), expected_skip)


def build_view(report: RunReport) -> ReportView:
    decision = decide(report)
    expected_skips = {id(r) for r in decision.skipped_expected}
    cluster_ids = set(report.cluster_checks) | {r.check_id for r in report.results if r.node == CLUSTER_NODE}
    node_check_ids = [c for c in report.check_ids if c not in cluster_ids]
    titles = {r.check_id: r.title or r.check_id for r in report.results}
    nodes = report.node_names
    matrix = {node: {cid: "" for cid in node_check_ids} for node in nodes}
    for result in report.results:
        if result.check_id in node_check_ids and result.node in matrix:
            matrix[result.node][result.check_id] = result.status.value
    sections = []
    for cid in report.check_ids:
        results = report.results_for(cid)
        if not results:
            continue
        worst = max((r.status for r in results), key=lambda s: s.severity)
        sections.append(CheckSection(cid, titles.get(cid, cid), results[0].why, worst.value, results))
    counts = {s.value: sum(1 for r in report.results if r.status is s) for s in Status}
    return ReportView(
        report=report,
        decision=decision,
        verdict=decision.verdict.value,
        headline=HEADLINES[decision.verdict],
        reason=decision.reason,
        exit_code=decision.exit_code,
        blocking=[finding(r, id(r) in expected_skips) for r in decision.blocking],
        warnings=[finding(r) for r in decision.warnings],
        skipped=[finding(r) for r in decision.skipped if id(r) not in expected_skips],
        nodes=nodes,
        unreachable=[(n.name, n.error) for n in report.nodes if n.reachable is False],
        matrix_checks=[(cid, titles.get(cid, cid)) for cid in node_check_ids],
        matrix=matrix,
        cluster_results=[r for r in report.results if r.check_id in cluster_ids],
        sections=sections,
        at_a_glance=_at_a_glance(report),
        counts=counts,
        duration=_duration(report.started_at, report.finished_at),
    )


def _duration(start: str, end: str) -> str:
    try:
        seconds = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _at_a_glance(report: RunReport) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    nodes = report.node_names
    rows.append(("Nodes", f"{len(nodes)}: {', '.join(nodes[:8])}{' ...' if len(nodes) > 8 else ''}"))
    gpu_models: dict[str, int] = {}
    for result in report.results_for("gpu.visibility"):
        for gpu in result.facts.get("gpus", []) or []:
            name = gpu.get("name") or "unknown GPU"
            gpu_models[name] = gpu_models.get(name, 0) + 1
    if gpu_models:
        rows.append(("GPUs", ", ".join(f"{count} x {name}" for name, count in sorted(gpu_models.items()))))
    elif report.results_for("gpu.visibility"):
        rows.append(("GPUs", "none found"))
    stacks = [r.facts.get("stack") for r in report.results_for("versions.pinned") if r.facts.get("stack")]
    if stacks:
        stack: dict[str, Any] = stacks[0]
        parts = []
        for key in ("python", "torch", "tensorflow", "numpy", "cuda", "nccl", "driver"):
            value = stack.get(key)
            if isinstance(value, dict):
                value = value.get("version")
            if value:
                parts.append(f"{key} {value}")
        if parts:
            rows.append(("Software", ", ".join(parts)))
    rows.append(("Started", report.started_at))
    duration = _duration(report.started_at, report.finished_at)
    if duration:
        rows.append(("Took", duration))
    if report.config_path:
        rows.append(("Config", report.config_path))
    return rows


def format_value(m: Measurement) -> str:
    value = m.value
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    else:
        text = "—" if value is None else str(value)
    return f"{text} {m.unit}".strip()


def format_threshold(m: Measurement) -> str:
    if m.threshold is None or m.comparison is None:
        return ""
    threshold = f"{m.threshold:g}" if isinstance(m.threshold, float) else str(m.threshold)
    return f"{m.comparison} {threshold} {m.unit}".strip()


def format_spread(m: Measurement) -> str:
    spread = m.spread
    if spread is None:
        return ""
    return f"±{spread * 50:.0f}% over {len(m.samples)} runs"
