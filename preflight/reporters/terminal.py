"""What preflight prints: one line per result as it arrives, and a closing summary.

On a terminal the lines are coloured with rich; elsewhere (CI logs) they are plain text with no
control codes.
"""

from __future__ import annotations

from preflight.model import CheckResult, RunReport
from preflight.reporters.view import build_view

STYLES = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "ERROR": "bold magenta", "SKIP": "dim",
          "GO": "bold white on green", "NO-GO": "bold white on red", "INCOMPLETE": "bold black on yellow"}


def result_line(result: CheckResult) -> str:
    return f"{result.status.value:<5} {result.check_id:<24} {result.node:<16} {result.summary}"


def render(report: RunReport) -> str:
    """The closing summary as plain text."""
    view = build_view(report)
    lines = [f"preflight: {view.verdict} - {view.headline} {view.reason}."]
    counts = view.counts
    lines.append(f"  {counts['PASS']} passed, {counts['WARN']} warnings, {counts['FAIL']} failed, "
                 f"{counts['ERROR']} errors, {counts['SKIP']} skipped" + (f" in {view.duration}" if view.duration else ""))
    if view.report.incomplete:
        lines.append(f"  incomplete: {view.report.incomplete_reason}")
    for name, error in view.unreachable:
        lines.append(f"  unreachable: {name}: {error}")
    if view.blocking:
        lines.append("Blocking:")
        for f in view.blocking:
            lines.append(f"  {f.status:<5} {f.check_id} on {f.node}: {f.summary}")
            for hint in f.remediation[:2]:
                lines.append(f"        fix: {hint}")
    if view.warnings:
        lines.append("Warnings:")
        for f in view.warnings:
            lines.append(f"  WARN  {f.check_id} on {f.node}: {f.summary}")
    if view.skipped:
        lines.append("Skipped:")
        for f in view.skipped:
            lines.append(f"  SKIP  {f.check_id} on {f.node}: {f.summary}")
    for error in view.report.load_errors:
        lines.append(f"  plugin failed to load: {error['entry_point']} ({error['distribution']}): {error['error']}")
    return "\n".join(lines) + "\n"
