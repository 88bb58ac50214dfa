"""What every human-facing report shows, computed once from the RunReport.

The terminal, Markdown and HTML reporters render this view; none of them judges anything. The
plain-language key findings ("8 GPUs deliver the throughput of 6.9 (86% efficiency)") are built
here by small pure functions from the figures the checks recorded.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from preflight.diff import BASELINE_CHECK_ID, Diff
from preflight.model import CLUSTER_NODE, CheckResult, Measurement, RunReport, Status
from preflight.reporters import charts
from preflight.verdict import Decision, Verdict, decide

HEADLINES = {
    Verdict.GO: "Ready to train.",
    Verdict.NO_GO: "Not ready to train.",
    Verdict.INCOMPLETE: "No verdict.",  # the decision's reason says why (not finished, missing, nothing measured)
}

# A figure whose samples spread more than this, (max - min) / median, is flagged as noisy: it is
# judged on the median like any other, but a reader should not trust a narrow pass or fail on it.
NOISY_SPREAD = 0.20


def where(node: str) -> str:
    """'on gpu01', or 'across the cluster' for the one result of a cluster-scope check."""
    return "across the cluster" if node == CLUSTER_NODE else f"on {node}"


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

    @property
    def where(self) -> str:
        return where(self.node)


@dataclass
class KeyFinding:
    """One plain-language sentence about a figure that matters, for the first screen."""

    text: str
    status: str  # of the result it comes from
    blocking: bool
    check_id: str = ""
    node: str = ""


@dataclass
class NoisyFigure:
    check_id: str
    node: str
    name: str
    spread: float
    runs: int


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
    key_findings: list[KeyFinding] = field(default_factory=list)
    noisy: list[NoisyFigure] = field(default_factory=list)
    noisy_spread: float = NOISY_SPREAD
    baseline: Diff | None = None  # when the run was compared with a baseline (run --baseline)
    baseline_headline: str = ""

    def is_noisy(self, m: Measurement) -> bool:
        return is_noisy(m, self.noisy_spread)


def is_noisy(m: Measurement, threshold: float = NOISY_SPREAD) -> bool:
    spread = m.spread
    return spread is not None and spread > threshold


def headline(decision: Decision, total: int) -> str:
    """The verdict in words. A GO with skipped checks says so: nothing skipped was shown to be ready."""
    text = HEADLINES[decision.verdict]
    skipped = len(decision.skipped)
    if decision.verdict is Verdict.GO and skipped:
        text = (f"Ready to train, as far as was measured: {skipped} of {total} "
                f"check{'s' if total != 1 else ''} skipped.")
    return text


def finding(result: CheckResult, expected_skip: bool = False) -> Finding:
    summary = result.summary
    if expected_skip:
        summary = f"skipped, but the configuration expects it to run: {result.summary}"
    return Finding(result.check_id, result.title or result.check_id, result.node, result.status.value, summary,
                   list(result.remediation), expected_skip)


def build_view(report: RunReport, noisy_spread: float = NOISY_SPREAD) -> ReportView:
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
    noisy = noisy_figures(report, noisy_spread)
    baseline = None
    if report.baseline:
        try:
            baseline = Diff.from_dict(report.baseline)
        except (KeyError, TypeError, ValueError):
            baseline = None  # written by another version: the JSON still carries it
    return ReportView(
        report=report,
        decision=decision,
        verdict=decision.verdict.value,
        headline=headline(decision, len(report.results)),
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
        key_findings=key_findings(report, decision, noisy, noisy_spread, baseline),
        noisy=noisy,
        noisy_spread=noisy_spread,
        baseline=baseline,
        baseline_headline=_capital(baseline.headline()) if baseline else "",
    )


# ---------------------------------------------------------------------------------------------------
# Key findings: one sentence per figure that matters, blocking ones first.
# ---------------------------------------------------------------------------------------------------

def short(value: float) -> str:
    """A figure as a person would say it: 4.2, 0.42, 182, 6,900."""
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.3g}"
    if size >= 1:
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.2g}"


def sentence_scaling(devices: int, effective: float, efficiency: float, noun: str = "GPUs") -> str:
    return f"{devices} {noun} deliver the throughput of {effective:.1f} ({efficiency:.0%} efficiency)"


def sentence_slowest_link(src: str, dst: str, value: float, unit: str, need: float | None) -> str:
    text = f"the slowest link, {src} -> {dst}, carries {short(value)} {unit}"
    if need is not None:
        relation = "below" if value < need else "at least"
        text += f", {relation} the {short(need)} {unit} the cluster needs"
    return text


def sentence_loader(percent: float) -> str:
    return f"the data loader can feed {percent:.0f}% of what the GPUs consume"


def sentence_checkpoint(fmt: str, figures: dict[str, float], needs: dict[str, float]) -> str:
    fine, slow = [], []
    for op in ("write", "read"):
        if op in figures:
            below = op in needs and figures[op] < needs[op]
            (slow if below else fine).append(f"{op} at {short(figures[op])} GB/s")
    text = f"{fmt} checkpoints " + " and ".join(fine)
    if slow:
        limits = sorted({short(needs[op]) for op in ("write", "read") if op in figures and op in needs
                         and figures[op] < needs[op]})
        text += (" but " if fine else "") + " and ".join(slow) + f", below the {' and '.join(limits)} GB/s needed"
    return text


def sentence_busbw(label: str, value: float, size: str, need: float | None) -> str:
    text = f"all-reduce over {label} reaches {short(value)} GB/s bus bandwidth at {size}"
    if need is not None and value < need:
        text += f", below the {short(need)} GB/s required"
    return text


def sentence_noisy(figures: list[NoisyFigure], threshold: float, several_nodes: bool = True) -> str:
    def name(f: NoisyFigure) -> str:
        return f.name if f.name == f.node or not several_nodes else f"{f.name} {where(f.node)}"

    listed = ", ".join(f"{name(f)} (spread {f.spread:.0%})" for f in figures[:3])
    more = f" and {len(figures) - 3} more" if len(figures) > 3 else ""
    many = len(figures) != 1
    return (f"{len(figures)} figure{'s' if many else ''} varied across repeats by more than {threshold:.0%} of "
            f"{'their' if many else 'its'} median and {'are' if many else 'is'} flagged as noisy: {listed}{more}")


# Names that keep their own spelling at the start of a sentence.
_PROPER_NAMES = {"tensorflow": "TensorFlow", "tf.data": "tf.data", "torch": "torch", "torch.save": "torch.save"}


def _capital(text: str) -> str:
    first, _, rest = text.partition(" ")
    if first.lower() in _PROPER_NAMES:
        return " ".join(filter(None, [_PROPER_NAMES[first.lower()], rest]))
    return text[:1].upper() + text[1:]


def _prefix(node: str, total: int, worst: str) -> str:
    """'On gpu03, the lowest of 3 nodes, ' for a node-scope figure on a cluster; nothing on one node."""
    if total <= 1:
        return ""
    return f"on {node}, the {worst} of {total} nodes, "


def noisy_figures(report: RunReport, threshold: float = NOISY_SPREAD) -> list[NoisyFigure]:
    found = []
    for result in report.results:
        for m in result.measurements:
            if is_noisy(m, threshold):
                found.append(NoisyFigure(result.check_id, m.node or result.node, m.name, m.spread or 0.0,
                                         len(m.samples)))
    found.sort(key=lambda f: -f.spread)
    return found


def key_findings(report: RunReport, decision: Decision | None = None, noisy: list[NoisyFigure] | None = None,
                 noisy_spread: float = NOISY_SPREAD, baseline: Diff | None = None) -> list[KeyFinding]:
    decision = decision or decide(report)
    blocking = {r.key for r in decision.blocking}
    found: list[KeyFinding] = []

    def add(text: str, result: CheckResult | None, status: str | None = None, blocks: bool | None = None,
            short_of_need: bool | None = None) -> None:
        key = result.key if result else ("", "")
        if short_of_need is False:
            # The figure itself is fine: whatever else its check found is not this sentence's doing.
            status, blocks = "PASS", False
        found.append(KeyFinding(_capital(text), status or (result.status.value if result else "PASS"),
                                key in blocking if blocks is None else blocks, key[0], key[1]))

    scaling = charts.scaling_data(report)
    if scaling:
        torch_series = [s for s in scaling.series if s.framework == "torch DDP"] or scaling.series
        scored = [s for s in torch_series if s.top[2] is not None]
        if scored:
            worst = min(scored, key=lambda s: (s.top[2], s.node))
            n, _, eff = worst.top
            assert eff is not None
            text = sentence_scaling(n, n * eff, eff, worst.noun)
            if worst.framework != "torch DDP":
                text = f"with {worst.framework}, {text}"
            add(_prefix(worst.node, len({s.node for s in scored}), "least efficient") + text,
                report.result_for("scaling.multi_gpu", worst.node),
                short_of_need=None if scaling.min_efficiency is None else eff < scaling.min_efficiency)

    link = charts.slowest_link(report)
    if link:
        add(sentence_slowest_link(link.src, link.dst, link.value, link.unit, link.threshold),
            report.result_for("net.bandwidth", CLUSTER_NODE),
            short_of_need=None if link.threshold is None else link.value < link.threshold)

    loaders = [d for d in charts.loader_data(report) if d.percent is not None]
    if loaders:
        worst_loader = min(loaders, key=lambda d: (d.percent, d.node))
        percent = worst_loader.percent or 0.0
        add(_prefix(worst_loader.node, len(loaders), "lowest") + sentence_loader(percent),
            report.result_for("dataloader.throughput", worst_loader.node),
            short_of_need=None if worst_loader.margin is None else percent < worst_loader.margin * 100)

    checkpoints = charts.checkpoint_data(report)
    if checkpoints:
        node, fmt, figures, needs = min(
            ((d.node, fmt, figs, d.thresholds) for d in checkpoints for fmt, figs in d.formats.items()),
            key=lambda c: (min(c[2].values()), c[0], c[1]))
        add(_prefix(node, len(checkpoints), "slowest") + sentence_checkpoint(fmt, figures, needs),
            report.result_for("checkpoint.roundtrip", node),
            short_of_need=any(op in needs and value < needs[op] for op, value in figures.items()) if needs else None)

    busbw = charts.collectives_data(report)
    if busbw:
        # The backend the check judges (NCCL on GPU nodes), at its largest message, on the slowest node.
        judged = [s for s in busbw.series if s.primary] or busbw.series
        series = min(judged, key=lambda s: (s.points[-1][1], s.node))
        size, value = series.points[-1]
        add(_prefix(series.node, len({s.node for s in judged}), "slowest")
            + sentence_busbw(series.backend, value, charts.human_bytes(size), busbw.threshold),
            report.result_for("collectives.local", series.node),
            short_of_need=None if busbw.threshold is None else value < busbw.threshold)

    if baseline is not None:
        text = baseline.headline()
        add(text, report.result_for(BASELINE_CHECK_ID, CLUSTER_NODE),
            status="WARN" if baseline.regressions else "PASS")

    if noisy:
        add(sentence_noisy(noisy, noisy_spread, len(report.node_names) > 1), None, status="WARN", blocks=False)

    severity = {s.value: s.severity for s in Status}
    found.sort(key=lambda f: (not f.blocking, -severity.get(f.status, 0)))
    return found


# ---------------------------------------------------------------------------------------------------
# The cluster at a glance
# ---------------------------------------------------------------------------------------------------

def _duration(start: str, end: str) -> str:
    try:
        seconds = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return ""
    if seconds < 0:
        return ""  # clocks that disagree say nothing worth printing
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def when(timestamp: str) -> str:
    """'2026-11-29 10:00:00 UTC' from an ISO 8601 time; the text as it is when it does not parse."""
    try:
        moment = dt.datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return timestamp
    if moment.tzinfo is not None and moment.utcoffset() == dt.timedelta(0):
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.replace(microsecond=0).isoformat(sep=" ")


def _gpu_names(result: CheckResult) -> list[str]:
    facts = result.facts or {}
    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), dict) else {}
    gpus = (nvml or {}).get("gpus") or facts.get("gpus") or []
    names = [g.get("name") or "unknown GPU" for g in gpus if isinstance(g, dict)]
    if not names and isinstance(facts.get("torch"), dict):
        names = [d.get("name") or "unknown GPU" for d in facts["torch"].get("devices") or [] if isinstance(d, dict)]
    return names


def _stack_text(stack: dict[str, Any]) -> tuple[str, str]:
    """(frameworks, other software) from versions.pinned's stack facts."""
    frameworks = []
    if stack.get("torch"):
        extras = [f"{label} {stack[key]}" for key, label in (("torch_cuda", "CUDA"), ("cudnn", "cuDNN"),
                                                             ("nccl", "NCCL")) if stack.get(key)]
        frameworks.append(f"torch {stack['torch']}" + (f" ({', '.join(extras)})" if extras else ""))
    if stack.get("tensorflow"):
        built = f" (CUDA {stack['tensorflow_cuda']})" if stack.get("tensorflow_cuda") else ""
        frameworks.append(f"tensorflow {stack['tensorflow']}{built}")
    if stack.get("jax"):
        frameworks.append(f"jax {stack['jax']}")
    software = [f"{label} {stack[key]}" for key, label in (("python", "Python"), ("numpy", "numpy"),
                                                           ("driver", "NVIDIA driver")) if stack.get(key)]
    software += [str(stack[key]) for key in ("os",) if stack.get(key)]
    software += [f"kernel {stack['kernel']}"] if stack.get("kernel") else []
    return ", ".join(frameworks), ", ".join(software)


def _framework_versions(report: RunReport) -> dict[str, str]:
    """Framework versions other checks happened to record, for runs without versions.pinned."""
    found: dict[str, str] = {}
    for result in report.results:
        facts = result.facts or {}
        named = facts.get("frameworks") if isinstance(facts.get("frameworks"), dict) else {}
        for name in ("torch", "tensorflow"):
            version = facts.get(f"{name}_version") or (named or {}).get(name)
            if isinstance(version, str) and version and name not in found:
                found[name] = version
    return found


def _at_a_glance(report: RunReport) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    nodes = report.node_names
    unreachable = [n.name for n in report.nodes if n.reachable is False]
    text = f"{len(nodes)}: {', '.join(nodes[:8])}{' ...' if len(nodes) > 8 else ''}"
    if unreachable:
        text += f" ({len(unreachable)} unreachable)"
    rows.append(("Nodes", text))

    per_node = {r.node: _gpu_names(r) for r in report.results_for("gpu.visibility")}
    models: dict[str, int] = {}
    for names in per_node.values():
        for name in names:
            models[name] = models.get(name, 0) + 1
    if models:
        text = ", ".join(f"{count} x {name}" for name, count in sorted(models.items()))
        counts = {len(names) for names in per_node.values()}
        if len(per_node) > 1 and len(counts) == 1:
            text += f" ({counts.pop()} per node)"
        elif len(per_node) > 1:
            text += " (" + ", ".join(f"{node}: {len(names)}" for node, names in per_node.items()) + ")"
        rows.append(("GPUs", text))
    elif per_node:
        rows.append(("GPUs", "none found"))

    stacks = {r.node: r.facts.get("stack") for r in report.results_for("versions.pinned")
              if isinstance(r.facts.get("stack"), dict)}
    if stacks:
        texts = {node: _stack_text(stack) for node, stack in stacks.items()}
        frameworks, software = next(iter(texts.values()))
        differs = len({t for t in texts.values()}) > 1
        if frameworks:
            rows.append(("Frameworks", frameworks + (" (differs across nodes; see versions.consistency)"
                                                     if differs else "")))
        if software:
            rows.append(("Software", software))
    else:
        found = _framework_versions(report)
        if found:
            rows.append(("Frameworks", ", ".join(f"{name} {version}" for name, version in found.items())))
    profile = getattr(report, "profile", "")
    if profile:
        rows.append(("Thresholds", f"profile {profile}"))
    started = when(report.started_at)
    duration = _duration(report.started_at, report.finished_at)
    rows.append(("When", started + (f", took {duration}" if duration else "")))
    if report.config_path:
        rows.append(("Config", report.config_path))
    return rows


# ---------------------------------------------------------------------------------------------------
# Figures as text
# ---------------------------------------------------------------------------------------------------

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
