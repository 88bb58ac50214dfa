"""After a run: an ordered list of small named steps, each a function of (report, Finishing).

    baseline -> fleet outliers -> history context -> shape -> reports -> actions -> history record

A step reads what it needs from the Finishing (the request, the configuration, the output
directory) and tells the one who asked through `say`; a report that cannot be written is recorded
in `problems` and becomes exit 2 naming it once every step has run (the drain still happens). A
command adds a step of its own with `with_step` (the command line prints its summary after
"reports" that way).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.core.model import RunReport
from preflight.run.request import HISTORY_AUTO, HISTORY_ON, RunProblem, RunRequest

Say = Callable[[str, str], None]
WARNING, ACTION, ACTION_FAILED = "warning", "action", "action-failed"


@dataclass
class Finishing:
    request: RunRequest
    config: Any
    out: Path
    say: Say
    baseline: RunReport | None = None
    nodes: list[Any] = field(default_factory=list)  # the run's NodeTargets (their topology: the shape's groups)
    shape: Any = None  # the shape answered (None: the request's, without the job's plan)
    keep: Path | None = None  # a file never written over (the results `preflight report` reads)
    write_error: str = ""  # results.jsonl could not be written during the run
    step_summary: bool = True  # the markdown report appended to GITHUB_STEP_SUMMARY (the kind says)
    written: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verdict: str | None = None  # the reports' verdict (GO, NO-GO, ...), once they are written
    headline: str | None = None  # and its headline
    groups: dict[str, str] = field(default_factory=dict)  # node -> topology group, for the blast radius


Step = Callable[[RunReport, Finishing], None]


def baseline(report: RunReport, run: Finishing) -> None:
    """With --baseline: what got worse against the known-good run, in every report."""
    if run.baseline is None:
        return
    from preflight.core.compare import attach

    request = run.request
    attach(report, run.baseline, request.baseline_tolerance, label=str(request.baseline_file),
           fail_on_regression=request.fail_on_regression)


def fleet_outliers(report: RunReport, run: Finishing) -> None:
    """A node that lags its identical peers, though it passes."""
    if len(report.nodes) > 1:
        from preflight.history import outlier_result

        fleet = outlier_result(report.to_dict())
        if fleet is not None:
            report.add(fleet)  # masked as it joins, as every result


def keeps_history(run: Finishing) -> bool:
    mode = run.request.history
    return mode == HISTORY_ON or (mode == HISTORY_AUTO and bool(run.config.history_enabled))


def history_context(report: RunReport, run: Finishing) -> None:
    """This run among the earlier ones, for its reports (read before this run is recorded)."""
    if run.request.history == HISTORY_AUTO and keeps_history(run):
        from preflight.run.history_context import attach_context

        attach_context(report, run.config, lambda text: run.say(WARNING, text))


def shape(report: RunReport, run: Finishing) -> None:
    """With --shape: the largest healthy subset in the job's shape, answered before the reports, which
    show it; its node lists written beside them (preflight.run.shape)."""
    from preflight.run.shape import apply

    # Without a shape too: an earlier run's subset files in the same --out go (preflight.run.shape.clear).
    apply(report, run.shape if run.shape is not None else run.request.shape, run.nodes, run.out)


def reports(report: RunReport, run: Finishing) -> None:
    """Each report format asked for, through a temporary file and a rename (never through a link
    planted at its name); --textfile-dir; GITHUB_STEP_SUMMARY. results.jsonl is never touched here."""
    from preflight.core.files import FileWriteError, write_atomic
    from preflight.core.redact import scrub_report
    from preflight.reporters import filename, view
    from preflight.run.rendering import rendered

    scrub_report(report)  # no URL password or token reaches a report file: the results are masked already
    # The report is complete: keep the garbage collector from walking its objects (a million at
    # 1,000 nodes) again on every collection that the reporters' allocations trigger.
    gc.freeze()
    try:
        with view.shared():  # one view of the report for every reporter that draws one
            decision = view.build_view(report).decision
            run.verdict, run.headline = decision.verdict.value, decision.reason  # what history records, judged once
            # The input itself is never written over: it already holds this run.
            keep = run.keep.resolve() if run.keep is not None else None
            formats = [fmt for fmt in run.request.formats if (run.out / filename(fmt)).resolve() != keep]
            written: dict[str, Path] = {}
            for fmt, text in rendered(report, formats):  # the HTML report last where a child renders it
                try:
                    write_atomic(run.out / filename(fmt), text)
                    written[fmt] = run.out / filename(fmt)
                except FileWriteError as exc:
                    run.problems.append(str(exc))
            run.written.extend(written[fmt] for fmt in formats if fmt in written)
            if run.step_summary:
                _step_summary(report, run)
    finally:
        gc.unfreeze()
    if run.problems and (run.out / "results.jsonl").is_file():
        run.problems[-1] += f" (the results so far are in {run.out / 'results.jsonl'})"
    _textfile(report, run)
    if run.write_error and not run.problems:
        run.problems.append(f"{run.write_error}; the reports hold every result")


def _step_summary(report: RunReport, run: Finishing) -> None:
    from preflight.reporters import renderer

    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(renderer("md")(report) + "\n")
        except OSError as exc:
            run.say(WARNING, f"cannot append to GITHUB_STEP_SUMMARY: {exc}")


def _textfile(report: RunReport, run: Finishing) -> None:
    if not run.request.textfile_dir:
        return
    from preflight.core.files import FileWriteError, write_atomic
    from preflight.reporters import renderer

    path = Path(run.request.textfile_dir) / "preflight.prom"
    try:
        write_atomic(path, renderer("prometheus")(report))
    except (FileWriteError, OSError) as exc:
        run.problems.append(f"cannot write {path}: {exc.strerror or exc}")


def actions(report: RunReport, run: Finishing) -> None:
    """--drain / --resume in Slurm, --cordon / --uncordon in Kubernetes, from the report just written."""
    request = run.request
    if request.drain or request.resume:
        from preflight.integrations.slurm import apply

        for action in apply(report, request.drain, request.resume, radius=run.config.blast_radius, groups=run.groups):
            run.say(ACTION_FAILED if action.error else ACTION, f"slurm: {action.describe()}")
    k8s = request.k8s
    if k8s is None or not (k8s.cordon or k8s.uncordon):
        return
    from preflight.integrations.kubernetes import cordon
    from preflight.integrations.kubernetes.api import KubernetesError, core_api

    try:
        api = core_api(k8s.context)
    except KubernetesError as exc:
        run.say(ACTION_FAILED, f"kubernetes: {exc}")
        return
    for node_action in cordon.apply(api, report, k8s.cordon, k8s.uncordon, run.config.blast_radius, run.groups):
        run.say(ACTION_FAILED if node_action.error else ACTION, f"kubernetes: {node_action.describe()}")


def history_record(report: RunReport, run: Finishing) -> None:
    """The run recorded in fleet history ([history] url, $PREFLIGHT_HISTORY_URL, or the default file)."""
    if keeps_history(run):
        from preflight.run.history_context import record

        written = [p for p in run.written if p.name == "results.json"]
        record(report, run.config, lambda text: run.say(WARNING, text), verdict=run.verdict, headline=run.headline,
               source=str(written[0].resolve()) if written else "")


RUN_STEPS: tuple[tuple[str, Step], ...] = (
    ("baseline", baseline),
    ("fleet outliers", fleet_outliers),
    ("history context", history_context),
    ("shape", shape),
    ("reports", reports),
    ("actions", actions),
    ("history record", history_record),
)

# A scheduler hook's run: no baseline, no fleet, no context; results.json only with --out.
HOOK_STEPS: tuple[tuple[str, Step], ...] = (
    ("reports", reports),
    ("actions", actions),
    ("history record", history_record),
)


def with_step(steps: Sequence[tuple[str, Step]], after: str, name: str, step: Step) -> tuple[tuple[str, Step], ...]:
    """`steps` with (name, step) inserted after the step called `after`."""
    names = [n for n, _ in steps]
    if after not in names:
        raise ValueError(f"no step {after!r} among {', '.join(names)}")
    at = names.index(after) + 1
    return (*steps[:at], (name, step), *steps[at:])


def without(steps: Sequence[tuple[str, Step]], *names: str) -> tuple[tuple[str, Step], ...]:
    return tuple((n, s) for n, s in steps if n not in names)


def finish(report: RunReport, run: Finishing, steps: Sequence[tuple[str, Step]] = RUN_STEPS) -> Finishing:
    """Every step in order; then RunProblem (exit 2) naming what could not be written, if anything."""
    for _name, step in steps:
        step(report, run)
    if run.problems:
        raise RunProblem("; ".join(run.problems))
    return run
