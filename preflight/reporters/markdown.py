"""report.md: fits a pull-request comment or GitHub's step summary; verdict and blockers first."""

from __future__ import annotations

from preflight.model import RunReport
from preflight.reporters.templating import environment
from preflight.reporters.view import build_view

STATUS_ICONS = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "ERROR": "💥", "SKIP": "⏭️", "": "·"}


def render(report: RunReport) -> str:
    return environment(autoescape=False).get_template("report.md.j2").render(
        v=build_view(report), icons=STATUS_ICONS)
