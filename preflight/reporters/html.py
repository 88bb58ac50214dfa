"""report.html: one self-contained file (inline CSS and SVG, no scripts or external URLs) for stakeholders."""

from __future__ import annotations

from preflight.core.model import RunReport
from preflight.reporters import charts
from preflight.reporters.templating import environment
from preflight.reporters.view import NOISY_SPREAD, build_view

FILENAME = "report.html"  # what this reporter writes in the output directory


def render(report: RunReport, noisy_spread: float = NOISY_SPREAD) -> str:
    view = build_view(report, noisy_spread)
    return environment(autoescape=True).get_template("report.html.j2").render(
        v=view, charts=charts.render_charts(report, view.figure_groups))
