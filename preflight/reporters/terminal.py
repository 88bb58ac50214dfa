"""What preflight prints: one line per result as it arrives, and a closing summary.

On a terminal the lines are coloured with rich; elsewhere (CI logs) they are plain text with no
control codes.
"""

from __future__ import annotations

from preflight.core.levels import level_text
from preflight.reporters.baseline import describe
from preflight.reporters.safe_text import single_line
from preflight.core.model import CheckResult, RunReport
from preflight.reporters.view import build_view

STYLES = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "ERROR": "bold magenta", "SKIP": "dim",
          "GO": "bold white on green", "NO-GO": "bold white on red", "INCOMPLETE": "bold black on yellow"}


def result_line(result: CheckResult) -> str:
    return single_line(f"{result.status.value:<5} {result.check_id:<24} {result.node:<16} {result.summary}")


def render(report: RunReport) -> str:
    """The closing summary as plain text."""
    view = build_view(report)
    reason = view.reason[:1].upper() + view.reason[1:]
    lines = [f"preflight: {view.verdict} - {view.headline} {reason}."]
    lines.append(f"  {view.counts_text}" + (f" in {view.duration}" if view.duration else ""))
    if view.report.incomplete:
        lines.append(f"  incomplete: {view.report.incomplete_reason}")
    lines.append(f"  level {level_text(view.report)}")
    if view.key_findings:
        lines.append("Findings:")
        for k in view.key_findings:
            lines.append(f"  {'BLOCKS' if k.blocking else k.status:<6} {k.text}")
    for name, error in view.unreachable:
        lines.append(f"  unreachable: {name}: {error}")
    if view.blocking:
        lines.append("Blocking:")
        for f in view.blocking:
            lines.append(f"  {f.status:<5} {f.check_id} {f.where}: {f.summary}")
            for hint in f.remediation:  # the fix of each finding that fired, once
                lines.append(f"        fix: {hint}")
    if view.warnings:
        lines.append("Warnings:")
        for f in view.warnings:
            lines.append(f"  WARN  {f.check_id} {f.where}: {f.summary}")
    if view.skipped:
        lines.append("Skipped:")
        for f in view.skipped:
            lines.append(f"  SKIP  {f.check_id} {f.where}: {f.summary}")
    if view.baseline is not None:
        lines.append("Baseline:")
        lines.append(f"  {view.baseline_headline}")
        for change in view.baseline.regressions[:10]:
            lines.append(f"  regression: {describe(change)}")
        if len(view.baseline.regressions) > 10:
            lines.append(f"  ... and {len(view.baseline.regressions) - 10} more (preflight diff shows them all)")
    for error in view.report.load_errors:
        lines.append(f"  plugin failed to load: {error['entry_point']} ({error['distribution']}): {error['error']}")
    # Every line is built from machine text (summaries, errors, plugin messages): none may start a
    # line of its own or carry a terminal escape (preflight.reporters.safe_text).
    return "\n".join(single_line(line) for line in lines) + "\n"
