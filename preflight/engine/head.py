"""The head of results.jsonl: what the checks of a run declare (needs, roles, headline findings, alarm
figures) recorded in its report, and the plan line written before any result, so that a killed run's
file says what is missing (preflight.core.results_file reads it back)."""

from __future__ import annotations

from typing import IO, Any

from preflight.core.check import NEEDS_FRAMEWORK, NEEDS_GPU, Check
from preflight.core.model import RunReport
from preflight.core.results_file import header_line

# Tags that say a check needs a GPU, or a framework, to measure anything.
GPU_TAGS = ("gpu",)
FRAMEWORK_TAGS = ("torch", "tensorflow")


def needs_of(check: type[Check]) -> list[str]:
    """"gpu" and/or "framework": from the check's `needs` when it declares one, else from its tags."""
    declared = check.needs
    if declared is not None:
        return [n for n in (NEEDS_GPU, NEEDS_FRAMEWORK) if n in declared]
    tags = set(check.tags)
    needs = []
    if tags & set(GPU_TAGS):
        needs.append(NEEDS_GPU)
    if tags & set(FRAMEWORK_TAGS):
        needs.append(NEEDS_FRAMEWORK)
    return needs


def record_declarations(report: RunReport, checks: list[type[Check]]) -> None:
    """What the checks declare that the verdict, the reports and the integrations read, recorded in
    the report so that none of them has to know a check by its id: needs, roles, headline findings,
    the figures alarms are set from."""
    report.needs = {c.id: needs_of(c) for c in checks if needs_of(c)}
    report.roles = {c.id: c.role for c in checks if c.role}
    report.headlines = [f"{c.id}.{kind}" for c in checks for kind in c.headlines]
    report.alarm_figures = {c.id: dict(c.alarm_figures) for c in checks if c.alarm_figures}


def fill_declarations(report: RunReport, checks: dict[str, type[Check]]) -> None:
    """A report written before roles, headlines and alarm figures were recorded gets them from the
    installed checks of the same ids; a report that records any of them is left as it is."""
    if report.roles or report.headlines or report.alarm_figures:
        return
    known = [checks[cid] for cid in report.check_ids if cid in checks]
    needs = dict(report.needs)
    record_declarations(report, known)
    report.needs = needs


def complete_report(report: RunReport, checks: list[type[Check]], expect: dict[str, Any],
                    pulled_in: dict[str, str] | None = None) -> None:
    """What the verdict needs beyond the results: what each check declares, the expectations, and
    which checks ran only because another reads them."""
    record_declarations(report, checks)
    report.expect = dict(expect)
    report.pulled_in = dict(pulled_in or {})


def write_header(stream: IO[str], report: RunReport, plan: Any) -> None:
    """Called by the runner where results.jsonl is opened, before any result."""
    complete_report(report, plan.checks, plan.config.expect.to_dict(), plan.config.pulled_in)
    stream.write(header_line(report) + "\n")
    stream.flush()
