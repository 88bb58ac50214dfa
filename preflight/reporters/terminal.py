"""What preflight prints: one line per result as it arrives, and a closing summary.

On a terminal the lines are coloured with rich; elsewhere (CI logs) they are plain text with no
control codes.
"""

from __future__ import annotations

from preflight.core.levels import level_text
from preflight.reporters.baseline import describe
from preflight.reporters.safe_text import single_line
from preflight.core.findings import node_label
from preflight.core.model import CheckResult, RunReport
from preflight.core.nodeset import fold
from preflight.reporters.view import ReportView, build_view

STYLES = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "ERROR": "bold magenta", "SKIP": "dim",
          "GO": "bold white on green", "NO-GO": "bold white on red", "INCOMPLETE": "bold black on yellow"}


def result_line(result: CheckResult) -> str:
    return single_line(f"{result.status.value:<5} {result.check_id:<24} {result.node:<16} {result.summary}")


def wrap(line: str, width: int | None) -> str:
    """One line wrapped at word boundaries to `width` (a terminal's), its continuation lines indented
    under the text they continue; a word longer than the line is left whole, never cut."""
    if not width or len(line) <= width:
        return line
    import textwrap

    indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
    return "\n".join(textwrap.wrap(line, width=max(width, 20), subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False))


def render(report: RunReport, width: int | None = None) -> str:
    """The closing summary as plain text: the verdict, then what blocks it with each finding's own fix,
    then warnings, then what was not measured, then the key figures. With `width` (a terminal's), every
    line is wrapped between words to fit it, so the terminal never breaks one mid-word."""
    view = build_view(report)
    lines = [*_head_lines(view), *_finding_lines(view), *_skipped_lines(view), *_figure_lines(view)]
    for error in view.report.load_errors:
        lines.append(f"  plugin failed to load: {error['entry_point']} ({error['distribution']}): {error['error']}")
    # Every line is built from machine text (summaries, errors, plugin messages): none may start a
    # line of its own or carry a terminal escape (preflight.reporters.safe_text).
    return "\n".join(wrap(single_line(line), width) for line in lines) + "\n"


def _head_lines(view: ReportView) -> list[str]:
    """The verdict and what frames it: counts, level, plugins not loaded, the shape's answer, unreachable nodes."""
    reason = view.reason[:1].upper() + view.reason[1:]
    if view.verdict == "NO-GO" and view.blocking:  # the plain sentence first, what the verdict weighed below
        lines = [f"preflight: {view.verdict} - {view.headline}", f"  {reason}."]
    else:
        lines = [f"preflight: {view.verdict} - {view.headline} {reason}."]
    lines.append(f"  {view.counts_text}" + (f" in {view.duration}" if view.duration else ""))
    if view.report.incomplete:
        lines.append(f"  incomplete: {view.report.incomplete_reason}")
    lines.append(f"  level {level_text(view.report)}")
    for error in view.report.load_errors:
        lines.append(f"  plugin failed to load: {error['entry_point']} ({error['distribution']}): {error['error']}")
    if view.subset is not None:
        lines.append(f"  shape: {view.subset_text}")
        if view.decision.subset_go:
            lines.append(f"  sbatch --exclude={fold(view.subset.get('exclude') or [])}  (hosts file and Kubernetes "
                         "node list: subset-hosts.txt, subset-k8s-affinity.yaml)")
    for name, error in view.unreachable:
        lines.append(f"  {node_label(error)}: {name}: {error}")
    return lines


def _finding_lines(view: ReportView) -> list[str]:
    """The blocking findings, the warnings, the caveats and the silenced findings, each with its fix."""
    lines = []
    for heading, found in (("Blocking", view.blocking), ("Warnings", view.warnings)):
        if found:
            lines.append(f"{heading} ({len(found)}):")
            for f in found:
                lines.append(f"  {f.level:<5} {f.check_id} {f.where}: {f.message}")
                if f.fix:
                    lines.append(f"        fix: {f.fix}")
    if view.caveats:
        lines.append(f"Caveats ({len(view.caveats)}):")
        for f in view.caveats:
            lines.append(f"  NOTE  {f.check_id} {f.where}: {f.message}")
            if f.fix:
                lines.append(f"        fix: {f.fix}")
    if view.acknowledged:
        lines.append(f"Acknowledged ({len(view.acknowledged)}, silenced in preflight.toml, not blocking):")
        for f in view.acknowledged:
            lines.append(f"  {f.level:<5} {f.check_id} {f.where}: {f.message} (silenced {f.silenced})")
    return lines


def _skipped_lines(view: ReportView) -> list[str]:
    """What was not measured: each SKIP, and the checks the run's level leaves out."""
    if not (view.skipped or view.level_skips):
        return []
    lines = [f"Not measured ({len(view.skipped) + len(view.level_skips.check_ids if view.level_skips else [])}):"]
    for f in view.skipped:
        lines.append(f"  SKIP  {f.check_id} {f.where}: {f.message}")
    if view.level_skips:
        lines.append(f"  SKIP  at --level {view.level_skips.level}: {', '.join(view.level_skips.check_ids)}"
                     + (f" ({view.level_skips.fix})" if view.level_skips.fix else ""))
    return lines


def _figure_lines(view: ReportView) -> list[str]:
    """The key figures, and the regressions against the baseline run (the first ten)."""
    lines = []
    if view.key_findings:
        lines.append("Key figures:")
        for k in view.key_findings:
            lines.append(f"  {'BLOCKS' if k.blocking else k.status:<6} {k.text}")
    if view.baseline is not None:
        lines.append("Baseline:")
        lines.append(f"  {view.baseline_headline}")
        for change in view.baseline.regressions[:10]:
            lines.append(f"  regression: {describe(change)}")
        if len(view.baseline.regressions) > 10:
            lines.append(f"  ... and {len(view.baseline.regressions) - 10} more (preflight diff shows them all)")
    return lines
