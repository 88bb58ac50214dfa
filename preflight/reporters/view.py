"""What every human-facing report shows, computed once from the RunReport.

The terminal, Markdown and HTML reporters render this view; none of them judges anything. The
plain-language key findings are built from the figures the checks declared (figures.py), the
advice from the findings that fired, and nothing here names a check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from preflight.core.compare import BASELINE_CHECK_ID, Diff, baseline_of
from preflight.core.findings import UNREACHABLE_FIX, Found, findings_of  # noqa: F401 - UNREACHABLE_FIX: part of the view's API
from preflight.core.model import CAVEAT, CLUSTER_NODE, FIGURE_STEP, CheckResult, Measurement, RunReport, Scope, Status
from preflight.reporters import figures
from preflight.reporters.fleet_history import HistoryView, build as build_history
from preflight.reporters.baseline import headline as baseline_headline
from preflight.reporters.finding_rows import FindingRow, LevelSkips, finding_lists, rows
from preflight.reporters.folding import MatrixRow, ResultGroup, matrix_rows, result_groups
from preflight.reporters.glance import at_a_glance, run_duration, when  # noqa: F401 - when: part of the view's API
from preflight.reporters.numbers import count, percent, quantity, spread
from preflight.reporters.origins import by_check as threshold_origins, threshold_origin
from preflight.core.verdict import Decision, Verdict, check_counts, decide

HEADLINES = {
    Verdict.GO: "Ready to train.",
    Verdict.NO_GO: "Not ready to train.",
    Verdict.INCOMPLETE: "No verdict.",  # the decision's reason says why (not finished, missing, nothing measured)
}

# A figure whose samples spread more than this, (max - min) / median, is flagged as noisy: it is
# judged on the median like any other, but a reader should not trust a narrow pass or fail on it.
NOISY_SPREAD = 0.20
# A result's own table of figures stops here; the rest are in results.json.
MAX_TABLE_ROWS = 40


def where(node: str, cluster: bool = False) -> str:
    """'on gpu01', or 'across the cluster' for the one result of a cluster-scope check (told by its
    scope: a host may be called "cluster" too)."""
    return "across the cluster" if cluster else f"on {node}"


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
    cluster: bool = False  # a cluster check's own figure


@dataclass
class CheckSection:
    check_id: str
    title: str
    why: str
    status: str  # worst over nodes
    results: list[CheckResult] = field(default_factory=list)
    groups: list[ResultGroup] = field(default_factory=list)  # the results, identical ones folded with their nodes

    @property
    def lead(self) -> list[str]:
        """The sentences the section leads with (CheckResult.lead), from its first result that has them."""
        return next((r.lead for r in self.results if r.lead), [])


@dataclass
class ReportView:
    report: RunReport
    decision: Decision
    verdict: str
    headline: str
    reason: str
    exit_code: int
    blocking: list[FindingRow]  # what blocks the verdict, each with its own fix
    warnings: list[FindingRow]  # WARN findings that do not block, also those inside a failing check
    skipped: list[FindingRow]  # what was not measured, and why (the run level's SKIPs apart)
    nodes: list[str]
    unreachable: list[tuple[str, str]]
    matrix_checks: list[tuple[str, str]]  # (id, title) of node-scope checks, in plan order
    matrix: dict[str, dict[str, str]]  # node -> check id -> status
    matrix_rows: list[MatrixRow]  # nodes with the same status in every check share a row
    cluster_results: list[CheckResult]
    sections: list[CheckSection]
    at_a_glance: list[tuple[str, str]]
    counts: dict[str, int]  # results by status (the JSON summary's)
    duration: str
    check_counts: dict[str, int] = field(default_factory=dict)  # checks by how they ended (core.verdict.check_counts)
    key_findings: list[KeyFinding] = field(default_factory=list)
    noisy: list[NoisyFigure] = field(default_factory=list)
    noisy_spread: float = NOISY_SPREAD
    baseline: Diff | None = None  # when the run was compared with a baseline (run --baseline)
    baseline_headline: str = ""
    unreachable_names: frozenset[str] = frozenset()
    level_skips: LevelSkips | None = None  # the checks the run level left out, in one line
    acknowledged: list[FindingRow] = field(default_factory=list)  # silenced in [silence]: noted, never blocking
    history: HistoryView | None = None  # against fleet history, when the run read it (RunReport.history)
    caveats: list[FindingRow] = field(default_factory=list)  # what qualifies the figures (core.model.CAVEAT)
    origins: dict[str, dict[str, str]] = field(default_factory=dict)  # check id -> parameter -> its origin
    figure_groups: list[figures.FigureGroup] = field(default_factory=list)  # the key findings' and the charts'

    @property
    def leads(self) -> list[CheckSection]:
        """The sections that lead with sentences for a reader who reads nothing else (CheckResult.lead)."""
        return [s for s in self.sections if s.lead]

    def threshold_text(self, result: CheckResult, m: Measurement) -> str:
        """A figure's threshold, with where it came from when the run set it (--set, a profile, a file)."""
        text = format_threshold(m)
        origin = threshold_origin(self.origins, result.check_id, m) if text and self.origins else ""
        return f"{text} ({origin})" if origin else text
    subset: dict | None = None  # the job's shape answered (run --shape): RunReport.subset
    subset_text: str = ""  # that answer in one sentence

    def is_noisy(self, m: Measurement) -> bool:
        return is_noisy(m, self.noisy_spread)

    def table_rows(self, result: CheckResult, limit: int = MAX_TABLE_ROWS) -> tuple[list[Measurement], str]:
        """The figures a result's table lists, and a note on those it leaves out: per-step figures are
        drawn in their chart, not listed; past `limit` rows the ones that miss or are noisy come first."""
        steps = [m for m in result.measurements if m.figure == FIGURE_STEP]
        rows = [m for m in result.measurements if m.figure != FIGURE_STEP]
        left_out = 0
        if len(rows) > limit:
            notable = {id(m) for m in rows if m.ok is False or self.is_noisy(m)}
            keep = {id(m) for m in ([m for m in rows if id(m) in notable] + [m for m in rows if id(m) not in notable])[:limit]}
            left_out = len(rows) - len(keep)
            rows = [m for m in rows if id(m) in keep]
        notes = []
        if steps:
            notes.append(f"{count(len(steps), 'per-step figure')} {'is' if len(steps) == 1 else 'are'} drawn in "
                         "the chart above")
        if left_out:
            notes.append(f"{count(left_out, 'more figure')} {'is' if left_out == 1 else 'are'} in results.json "
                         "(the ones that miss their threshold or are noisy are listed first)")
        return rows, "; ".join(notes)

    def fixes(self, result: CheckResult) -> list[str]:
        return fixes(result, self.unreachable_names)

    def mark(self, result: CheckResult, m: Measurement) -> str:
        """The status a figure that misses its threshold is marked with: its check's, never worse."""
        if m.ok is not False:
            return ""
        return result.status.value if result.status in (Status.WARN, Status.FAIL, Status.ERROR) else "WARN"

    @property
    def counts_text(self) -> str:
        """'15 checks: 0 passed, 6 with warnings, 0 failed, 0 errors, 9 skipped': checks, as the
        headline counts them (preflight.core.verdict.check_counts); warnings are counted once, as findings."""
        c = self.check_counts
        return (f"{count(self.decision.total, 'check')}: {c['PASS']} passed, {c['WARN']} with warnings, "
                f"{c['FAIL']} failed, {count(c['ERROR'], 'error')}, {c['SKIP']} skipped")


def is_noisy(m: Measurement, threshold: float = NOISY_SPREAD) -> bool:
    spread = m.spread
    return spread is not None and spread > threshold


# A GO where the inventory found no GPU: what was shown ready is training on CPUs.
CPU_GO = "Ready for CPU training: no GPU found"


def headline(decision: Decision, skipped: int, first: FindingRow | None = None) -> str:
    """The verdict in words. A GO says what it covers: CPU training when no GPU was found, the checks
    skipped (`skipped` of the decision's total: nothing skipped was shown to be ready), or else how
    many checks measured. A NO-GO says what is wrong and what to do, in one sentence: the `first`
    blocking finding, where, and the first sentence of its fix."""
    text = HEADLINES[decision.verdict]
    if decision.subset_go:
        return "Ready to train on a subset of the nodes only."
    if decision.verdict is Verdict.NO_GO and first is not None:
        fix = first_sentence(first.fix)
        if fix[1:2].islower():  # "Reseat ...", not "NCCL_..."
            fix = fix[0].lower() + fix[1:]
        return f"Not ready to train: {first.message} ({first.where})" + (f"; {fix}" if fix else ".")
    if decision.verdict is not Verdict.GO:
        return text
    ready = CPU_GO if decision.no_gpu else "Ready to train"
    sep = ";" if decision.no_gpu else ","
    if skipped:
        return f"{ready}{sep} as far as was measured: {skipped} of {count(decision.total, 'check')} skipped."
    return f"{ready}{sep} as far as was measured: {count(decision.measured, 'check')}."


def first_sentence(text: str) -> str:
    """The first sentence of a fix ("Check its NIC." of a longer one), its full stop kept."""
    match = re.search(r"(?<=[a-z0-9)`'\"])\.(?=\s+[A-Z`(])", text)
    return text[:match.end()] if match else text


def fixes(result: CheckResult, unreachable: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The advice the check's own section shows for one result: the fixes of its findings that fired
    (preflight.core.findings: a result stating none gets one that fits how it went wrong)."""
    return list(dict.fromkeys(f.fix for f in findings_of(result, result.node in unreachable) if f.fix))


# While `shared()` is active: (id(report), noisy_spread) -> (report, its view), for reporters run one after another.
_SHARED: dict[tuple[int, float], tuple[RunReport, ReportView]] | None = None


@contextmanager
def shared() -> Iterator[None]:
    """Within: build_view gives every reporter the same view of the same report object, built once
    (the report must not change meanwhile; `preflight run` writes its reports so)."""
    global _SHARED
    outer, _SHARED = _SHARED, {} if _SHARED is None else _SHARED
    try:
        yield
    finally:
        _SHARED = outer


def decision_of(report: RunReport) -> Decision:
    """The verdict on the report: the shared view's (see `shared`), or decided now."""
    return decide(report) if _SHARED is None else build_view(report).decision


def build_view(report: RunReport, noisy_spread: float = NOISY_SPREAD) -> ReportView:
    cache = _SHARED
    if cache is None:
        return _build_view(report, noisy_spread)
    hit = cache.get((id(report), noisy_spread))
    if hit is None or hit[0] is not report:
        hit = cache[(id(report), noisy_spread)] = (report, _build_view(report, noisy_spread))
    return hit[1]


def _build_view(report: RunReport, noisy_spread: float) -> ReportView:
    decision = decide(report)
    lists = finding_lists(decision, report.level, report.silenced)
    cluster_ids = set(report.cluster_checks) | {r.check_id for r in report.results if r.scope is Scope.CLUSTER}
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
        sections.append(CheckSection(cid, titles.get(cid, cid), results[0].why, worst.value, results,
                                     result_groups(results)))
    counts = {s.value: sum(1 for r in report.results if r.status is s) for s in Status}
    checks = check_counts(report)
    noisy = noisy_figures(report, noisy_spread)
    groups = figures.figure_groups(report)
    baseline = baseline_of(report)  # None as well when written by another version: the JSON still carries it
    unreachable = frozenset(n.name for n in report.nodes if n.reachable is False)
    return ReportView(
        report=report,
        decision=decision,
        verdict=decision.verdict.value,
        headline=headline(decision, checks["SKIP"], lists.blocking[0] if lists.blocking else None),
        reason=decision.reason,
        exit_code=decision.exit_code,
        blocking=lists.blocking,
        warnings=lists.warnings,
        skipped=lists.not_measured,
        nodes=nodes,
        unreachable=[(n.name, n.error) for n in report.nodes if n.reachable is False],
        matrix_checks=[(cid, titles.get(cid, cid)) for cid in node_check_ids],
        matrix=matrix,
        matrix_rows=matrix_rows(nodes, matrix, node_check_ids),
        cluster_results=[r for r in report.results if r.check_id in cluster_ids],
        sections=sections,
        at_a_glance=at_a_glance(report),
        counts=counts,
        check_counts=checks,
        duration=run_duration(report.started_at, report.finished_at),
        key_findings=key_findings(report, decision, noisy, noisy_spread, baseline, groups),
        noisy=noisy,
        noisy_spread=noisy_spread,
        baseline=baseline,
        baseline_headline=_capital(baseline_headline(baseline)) if baseline else "",
        unreachable_names=unreachable,
        level_skips=lists.level_skips,
        acknowledged=lists.acknowledged,
        history=build_history(report.history),
        caveats=caveat_rows(report),
        origins=threshold_origins(report),
        figure_groups=groups,
        subset=report.subset,
        subset_text=decision.subset_text,
    )


def caveat_rows(report: RunReport) -> list[FindingRow]:
    """The caveats the checks stated (PASS findings whose id ends in CAVEAT), one row per caveat and its nodes."""
    return rows([Found(r, f) for r in report.results for f in r.findings
                 if f.level is Status.PASS and f.id.endswith(CAVEAT)])


# ---------------------------------------------------------------------------------------------------
# Key findings: one sentence per group of declared figures, blocking ones first.
# ---------------------------------------------------------------------------------------------------

def sentence_noisy(found: list[NoisyFigure], threshold: float, several_nodes: bool = True) -> str:
    def name(f: NoisyFigure) -> str:
        return f.name if f.name == f.node or not several_nodes else f"{f.name} {where(f.node, f.cluster)}"

    listed = ", ".join(f"{name(f)} ({spread(f.spread, f.runs)})" for f in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    many = len(found) != 1
    return (f"{count(len(found), 'figure')} varied across repeats by more than {percent(threshold)} of "
            f"{'their' if many else 'its'} median and {'are' if many else 'is'} flagged as noisy: {listed}{more}")


# Names that keep their own spelling at the start of a sentence.
_PROPER_NAMES = {"tensorflow": "TensorFlow", "tf.data": "tf.data", "torch": "torch", "torch.save": "torch.save",
                 "nccl": "NCCL", "gloo": "gloo"}


def _capital(text: str) -> str:
    first, _, rest = text.partition(" ")
    if first.lower() in _PROPER_NAMES:
        return " ".join(filter(None, [_PROPER_NAMES[first.lower()], rest]))
    if first[:1].islower() and any(ch in first for ch in "._0123456789"):
        return text  # an identifier (torch.save, nccl_ops) keeps its spelling
    return text[:1].upper() + text[1:]


def _prefix(node: str, total: int) -> str:
    """'On gpu03, the worst of 3 nodes, ' for a node-scope figure on a cluster; nothing on one node."""
    if total <= 1 or not node or node == CLUSTER_NODE:
        return ""
    return f"on {node}, the worst of {total} nodes, "


def noisy_figures(report: RunReport, threshold: float = NOISY_SPREAD) -> list[NoisyFigure]:
    found = []
    for result in report.results:
        for m in result.measurements:
            if len(m.samples) > 1 and is_noisy(m, threshold):  # fewer samples have no spread
                found.append(NoisyFigure(result.check_id, m.node or result.node, m.name, m.spread or 0.0,
                                         len(m.samples), cluster=not m.node and result.scope is Scope.CLUSTER))
    found.sort(key=lambda f: -f.spread)
    return found


def key_findings(report: RunReport, decision: Decision | None = None, noisy: list[NoisyFigure] | None = None,
                 noisy_spread: float = NOISY_SPREAD, baseline: Diff | None = None,
                 groups: list[figures.FigureGroup] | None = None) -> list[KeyFinding]:
    """One sentence per group of figures the checks declared (its worst figure), then the baseline and
    the noisy figures; the ones that block the verdict first."""
    decision = decision or decide(report)
    blocking = {r.key for r in decision.blocking}
    found: list[KeyFinding] = []

    for group in figures.figure_groups(report) if groups is None else groups:
        said = figures.sentence(group)
        if said is None:
            continue
        result = said.point.result
        status, blocks = result.status.value, result.key in blocking
        if said.short_of_need is False:
            # The figure itself is fine: whatever else its check found is not this sentence's doing.
            status, blocks = "PASS", False
        elif said.short_of_need is None:
            # Judged against nothing ("reported, not judged"): it blocks nothing, whatever its check found.
            blocks = False
            if result.status in (Status.FAIL, Status.ERROR):
                status = "WARN"
        text = _prefix(said.node, said.nodes) + said.text
        found.append(KeyFinding(_capital(text), status, blocks, result.check_id, result.node))

    if baseline is not None:
        found.append(KeyFinding(_capital(baseline_headline(baseline)), "WARN" if baseline.regressions else "PASS",
                                any(r.check_id == BASELINE_CHECK_ID for r in decision.blocking)))

    if noisy:
        found.append(KeyFinding(_capital(sentence_noisy(noisy, noisy_spread, len(report.node_names) > 1)), "WARN",
                                False))

    severity = {s.value: s.severity for s in Status}
    found.sort(key=lambda f: (not f.blocking, -severity.get(f.status, 0)))
    return found


# ---------------------------------------------------------------------------------------------------
# Figures as text: one way everywhere (numbers.py)
# ---------------------------------------------------------------------------------------------------

def format_value(m: Measurement) -> str:
    return quantity(m.value, m.unit)


def format_threshold(m: Measurement) -> str:
    if m.threshold is None or m.comparison is None:
        return ""
    return f"{m.comparison} {quantity(m.threshold, m.unit)}"


def format_spread(m: Measurement) -> str:
    return spread(m.spread, len(m.samples))
