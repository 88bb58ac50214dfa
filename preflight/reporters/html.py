"""report.html: one self-contained file (inline CSS, no scripts or external URLs) for stakeholders."""

from __future__ import annotations

from preflight.model import RunReport
from preflight.reporters.templating import environment
from preflight.reporters.view import build_view


def render(report: RunReport) -> str:
    return environment(autoescape=True).get_template("report.html.j2").render(v=build_view(report))
