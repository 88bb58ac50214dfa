"""report.md: fits a pull-request comment or GitHub's step summary; verdict and blockers first."""

from __future__ import annotations

from preflight.core.model import FIGURE_STEP, CheckResult, Measurement, RunReport
from preflight.reporters.baseline import render_markdown as render_baseline
from preflight.core.nodeset import fold as fold_label
from preflight.reporters.templating import environment
from preflight.reporters.view import NOISY_SPREAD, ReportView, build_view

FILENAME = "report.md"  # what this reporter writes in the output directory

STATUS_ICONS = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "ERROR": "💥", "SKIP": "⏭️", "": "·"}

# A pull-request comment holds 65,536 characters; past this many figures the table lists the ones
# that failed or are noisy first and points to report.html and results.json for the rest.
MAX_MEASUREMENT_ROWS = 250


def measurement_rows(view: ReportView, limit: int = MAX_MEASUREMENT_ROWS
                     ) -> tuple[list[tuple[CheckResult, Measurement, str]], int]:
    """The rows of the measurements table (result, figure, the nodes it stands for), and how many were
    left out. Results that say the same on several nodes are one row per figure, with their node set."""
    # Per-step figures (a training run's step times) are a chart in report.html, not 60 rows here.
    rows = [(g.result, m, fold_label(g.nodes)) for s in view.sections for g in s.groups
            for m in g.result.measurements if m.figure != FIGURE_STEP]
    if len(rows) <= limit:
        return rows, 0
    notable = [row for row in rows if row[1].ok is False or view.is_noisy(row[1])]
    picked = {id(row[1]) for row in notable}
    shown = {id(row[1]) for row in (notable + [row for row in rows if id(row[1]) not in picked])[:limit]}
    return [row for row in rows if id(row[1]) in shown], len(rows) - len(shown)


def render(report: RunReport, noisy_spread: float = NOISY_SPREAD) -> str:
    view = build_view(report, noisy_spread)
    rows, left_out = measurement_rows(view)
    return environment(autoescape=False).get_template("report.md.j2").render(
        v=view, icons=STATUS_ICONS, rows=rows, rows_left_out=left_out,
        baseline_md=render_baseline(view.baseline) if view.baseline else "")
