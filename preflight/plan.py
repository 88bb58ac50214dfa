"""The run plan: which checks run, what each needs, and the header line results.jsonl starts with.

The header makes a results.jsonl self-describing: `preflight report results.jsonl` of a run that was
killed knows what was planned, and says what is missing instead of judging the results that made it.
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass, field
from typing import IO, Any

from preflight.check import Check
from preflight.model import CheckResult, RunReport, Scope
from preflight.verdict import ENVIRONMENT_CHECK, NEEDS_FRAMEWORK, NEEDS_GPU

HEADER_KEY = "preflight_plan"
# Tags that say a check needs a GPU, or a framework, to measure anything.
GPU_TAGS = ("gpu",)
FRAMEWORK_TAGS = ("torch", "tensorflow")


class PlanError(ValueError):
    """A selection that cannot be run as asked (exit 2, nothing run)."""


def needs_of(check: type[Check]) -> list[str]:
    """"gpu" and/or "framework": from the check's `needs` when it declares one, else from its tags."""
    declared = getattr(check, "needs", None)
    if declared is not None:
        return [n for n in (NEEDS_GPU, NEEDS_FRAMEWORK) if n in declared]
    tags = set(check.tags)
    needs = []
    if tags & set(GPU_TAGS):
        needs.append(NEEDS_GPU)
    if tags & set(FRAMEWORK_TAGS):
        needs.append(NEEDS_FRAMEWORK)
    return needs


@dataclass
class Selection:
    ids: list[str]  # what runs, before ordering
    added: dict[str, str] = field(default_factory=dict)  # id pulled in -> the check that reads it


def select(checks: dict[str, type[Check]], wanted: list[str], skipped: set[str], explicit: bool) -> Selection:
    """The checks to run: `wanted` without `skipped`, plus what they read.

    A check's run_after dependencies are pulled in (versions.consistency compares what versions.pinned
    records on each node), and node.environment whenever a check needs a GPU or a framework: its facts
    say whether the node has NVIDIA GPUs, which decides whether a SKIP there blocks. A dependency the
    user skipped on purpose, of a check the user asked for by name, is a contradiction (PlanError);
    of a check that was only there by default, the dependent is dropped too.
    """
    chosen = [c for c in wanted if c not in skipped]
    selection = Selection(list(chosen))
    pending = list(chosen)
    while pending:
        check_id = pending.pop(0)
        if check_id not in selection.ids:
            continue
        check = checks[check_id]
        deps = list(check.run_after)
        if needs_of(check) and ENVIRONMENT_CHECK in checks:
            deps.append(ENVIRONMENT_CHECK)
        for dep in deps:
            if dep in selection.ids or dep not in checks:
                continue
            if dep in skipped:
                if dep == ENVIRONMENT_CHECK and dep not in check.run_after:
                    continue  # only the inference is lost: the check still measures
                if explicit:
                    raise PlanError(f"--skip {dep} removes what {check_id} reads; drop {dep} from --skip "
                                    f"or {check_id} from --checks")
                selection.ids.remove(check_id)
                break
            selection.ids.append(dep)
            selection.added[dep] = check_id
            pending.append(dep)
    return selection


def complete_report(report: RunReport, checks: list[type[Check]], expect: dict[str, Any],
                    pulled_in: dict[str, str] | None = None) -> None:
    """What the verdict needs beyond the results: what each check needs, the expectations, and
    which checks ran only because another reads them."""
    report.needs = {c.id: needs_of(c) for c in checks if needs_of(c)}
    report.expect = dict(expect)
    report.pulled_in = dict(pulled_in or {})


def plan_header(report: RunReport) -> dict[str, Any]:
    """The first line of results.jsonl: the run report as planned, without results."""
    data = report.to_dict()
    for key in ("results", "finished_at", "baseline", "incomplete", "incomplete_reason", "interrupted"):
        data.pop(key, None)
    return {HEADER_KEY: data}


def write_header(stream: IO[str], report: RunReport, plan: Any) -> None:
    """Called by the runner where results.jsonl is opened, before any result."""
    complete_report(report, plan.checks, plan.config.expect.to_dict(), plan.config.pulled_in)
    stream.write(json.dumps(plan_header(report), sort_keys=True, default=str) + "\n")
    stream.flush()


class ResultsFileError(ValueError):
    """A results file that cannot be read (exit 2)."""


def read_results_jsonl(text: str, path: str, version: str) -> tuple[RunReport, list[str]]:
    """A RunReport from results.jsonl (its header's plan and the results that arrived), and notes.

    A last line cut short (the run was killed while writing it) is dropped with a note, and the rest
    is used; a bad line anywhere else is an error naming it. Without a header (an older preflight),
    the plan is rebuilt from the results, so missing results cannot be named.
    """
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    header: dict[str, Any] | None = None
    results: list[CheckResult] = []
    notes: list[str] = []
    for index, (number, line) in enumerate(lines):
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if HEADER_KEY in data:
                if index != 0:
                    raise ValueError("a run-plan header after the first line")
                header = data[HEADER_KEY]
                continue
            results.append(CheckResult.from_dict(data))
        except (ValueError, KeyError, TypeError) as exc:
            if index == len(lines) - 1 and index > 0:
                notes.append(f"dropped line {number} of {path}: it was cut short (the run was stopped while "
                             "writing it)")
                break
            raise ResultsFileError(f"{path}:{number}: not a preflight result: {exc}") from None
    if header is not None:
        try:
            report = RunReport.from_dict({**header, "results": []})
        except (ValueError, KeyError, TypeError) as exc:
            raise ResultsFileError(f"{path}:1: not a preflight run plan: {exc}") from None
        report.results = results
    else:
        report = RunReport(started_at=results[0].started_at if results else "", results=results,
                           planned=list(dict.fromkeys(r.check_id for r in results)),
                           cluster_checks=list(dict.fromkeys(r.check_id for r in results if r.scope is Scope.CLUSTER)),
                           preflight_version=version)
        notes.append(f"{path} has no run-plan header (written by an older preflight): missing results cannot be named")
    report.finished_at = results[-1].started_at if results else ""
    if header is None and any("cut short" in n for n in notes):
        # Without a plan, a torn line is the only sign that results are missing.
        report.incomplete, report.incomplete_reason = True, notes[0]
    return report, notes


def prepare_params(ids: list[str], checks: dict[str, type[Check]], config: Any, cwd: Path | None = None) -> None:
    """Let each check read, on the coordinator, what its nodes need (a lock file, say) into its params.

    A check may define `prepare_on_coordinator(overrides, cwd) -> overrides`; a ValueError it raises
    is the user's mistake (a configured file that does not exist) and stops the run before it starts.
    """
    where = cwd or Path.cwd()
    for check_id in ids:
        hook = getattr(checks[check_id], "prepare_on_coordinator", None)
        if hook is None:
            continue
        try:
            config.params[check_id] = hook(dict(config.params.get(check_id, {})), where)
        except ValueError as exc:
            raise PlanError(f"{check_id}: {exc}") from None
