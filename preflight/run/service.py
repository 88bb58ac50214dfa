"""One run, assembled once for every command that starts one (`preflight run`, `preflight
healthcheck`) and re-judges one (`preflight report --rejudge`):

    prepare(request)   the configuration (every value with its origin), the selection, the checks'
                       parameters, the nodes (nodes_for), the output directory: the plan
    execute(prepared)  the runner, as today; the nodes' transports closed after it
    finish(prepared, report, ..)  the kind's after-run steps, in order (preflight.run.finish); the exit code

What differs between the ordinary run and the healthcheck is the run's kind (preflight.run.kind),
asked where it matters; prepare branches on nothing about it.

The command line turns its options into a RunRequest and prints what comes back; nothing here
prints. A user's mistake is a RunProblem (exit 2) naming the flag, key or file.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from preflight.core import origin
from preflight.core.model import RunReport
from preflight.run import finish as steps
from preflight.run.config_changes import announce
from preflight.run.inputs import formats_known, read_report, split_ids
from preflight.run.kind import RunKind, kind_of
from preflight.run.nodes import new_run_id, nodes_for
from preflight.run.request import K8S, RunProblem, RunRequest
from preflight.engine.runner import NodeTarget, RunPlan

# What the service tells the one who asked (the command line prints it): say(kind, text).
NOTE, WARNING, STATUS, ACTION, ACTION_FAILED = "note", "warning", "status", "action", "action-failed"
Say = Callable[[str, str], None]


@dataclass
class Prepared:
    request: RunRequest
    registry: Any
    config: Any
    plan: RunPlan
    kind: RunKind  # the ordinary run or the healthcheck (preflight.run.kind)
    baseline: RunReport | None = None
    notes: list[str] = field(default_factory=list)  # what the user should know before it starts
    run_id: str = ""  # this run's name among what it leaves in a Kubernetes namespace
    left_out: dict[str, str] = field(default_factory=dict)  # check id -> why the hook's budget left it out
    scratch: bool = False  # the output directory is a temporary one, removed after the run
    selected: list[Any] = field(default_factory=list)  # the checks selected, with those left out
    shape: Any = None  # --shape with what the job's plan fills in (preflight.run.shape.with_plan)

    @property
    def out(self) -> Path:
        return self.plan.output_dir

    @property
    def nodes(self) -> list[NodeTarget]:
        return self.plan.nodes


def configure(request: RunRequest, checks: dict[str, Any], kind: RunKind | None = None) -> Any:
    """The Config the request asks for: profile, config file, the kind's own, --set, then the flags;
    each value with its origin."""
    from preflight.core import config as config_mod

    kind = kind or kind_of(request)
    try:
        config = config_mod.load(request.config_file, checks, profile=request.profile)
        kind.before_settings(config)
        config_mod.apply_cli_settings(config, list(request.settings), checks)
        config_mod.validate(config, checks)
    except config_mod.ConfigError as exc:
        raise RunProblem(str(exc)) from None
    kind.after_settings(config)
    if request.fail_on:
        config.set_run("fail_on", request.fail_on, origin.flag("--fail-on"))
    if request.level:
        config.set_run("level", request.level, origin.flag("--level"))
    if request.blast_radius is not None:  # checked by the option: above 0, at most 1
        config.set_run("blast_radius", request.blast_radius, origin.flag("--blast-radius"))
    if request.timeout_s is not None:
        if request.timeout_s <= 0:
            raise RunProblem("--timeout must be positive")
        config.set_run("timeout", request.timeout_s, origin.flag("--timeout"))
        config.timeouts.clear()
    return config


def baseline_of(request: RunRequest, checks: dict[str, Any]) -> tuple[RunReport | None, list[str]]:
    if request.baseline_file is None:
        if request.fail_on_regression:
            raise RunProblem("--fail-on-regression needs --baseline FILE")
        return None, []
    if not request.baseline_tolerance >= 0:
        raise RunProblem("--baseline-tolerance must be zero or more")
    baseline, notes = read_report(request.baseline_file, checks)
    return baseline, [f"note: {note}" for note in notes]


def run_budget(config: Any, checks: list[Any]) -> Callable[[int], float]:
    """The checks' timeouts on a count of nodes (seconds): what a run's deadline is made of, once the
    nodes are known (a cluster check's isolation pass is given more time on more nodes)."""
    return lambda count: sum(config.timeout_for(check, count) for check in checks)


def prepare(request: RunRequest, registry: Any = None) -> Prepared:
    """Everything a run needs before it starts; RunProblem (exit 2, nothing ran) for a mistake."""
    from preflight.run import plan as plan_mod
    from preflight.transport.plugins import discover
    from preflight.run.judging import record_judging

    formats_known(list(request.formats))
    if request.textfile_dir is not None and not (os.path.isdir(request.textfile_dir)
                                                 and os.access(request.textfile_dir, os.W_OK)):
        raise RunProblem(f"--textfile-dir {request.textfile_dir}: not a directory this user can write to")
    start = time.monotonic()
    kind = kind_of(request)
    # Third-party plugins --skip names are never imported; the kind may bound the imports' time (the
    # healthcheck's count against its budget; preflight.core.registry contains what a plugin does at import).
    # Each third party's plugin is imported in a child first, and here only when the run needs it.
    registry = registry or discover(skip=set(split_ids(request.skip)), need=kind.need(request),
                                    **kind.discover_options())
    baseline, notes = baseline_of(request, registry.checks)
    config = configure(request, registry.checks, kind)
    changed = kind.config_changes(request, config, registry.checks)
    notes = announce(changed) + notes
    wanted, skipped, explicit = kind.select(request, registry)
    try:
        selection = plan_mod.select(registry.checks, wanted, skipped, explicit=explicit)
        plan_mod.prepare_params(selection.ids, registry.checks, config)
    except (plan_mod.PlanError, ValueError) as exc:
        raise RunProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    notes += [f"also running {added}: {reader} reads what it records" for added, reader in selection.added.items()]
    run_id = new_run_id() if kind.node_source(request) == K8S else ""
    nodes = nodes_for(request, run_id, budget_s=run_budget(config, registry.ordered(selection.ids)),
                      notes=notes)
    kinds = {node.transport.kind for node in nodes}
    asked = set(split_ids(request.checks))
    checks = [c for c in registry.ordered(selection.ids) if not c.transports or kinds & set(c.transports)
              or c.id in asked]
    try:
        plan_mod.check_deselection(registry.checks, wanted, skipped, selection, config.expect,
                                   [n.slots for n in nodes], config.profile)
    except plan_mod.PlanError as exc:
        raise RunProblem(str(exc)) from None
    from preflight.run.shape import with_plan

    shape = with_plan(request.shape_values, request.shape, config, registry.checks)
    timeouts, left_out = kind.budget(checks, config, time.monotonic() - start)
    config.timeouts.update(timeouts)
    out, scratch = kind.output(request)
    plan = RunPlan(checks=[c for c in checks if c.id not in left_out], config=config, output_dir=out, nodes=nodes,
                   fanout=request.fanout, command=request.command,
                   load_errors=kind.load_errors(request, registry, skipped), fail_fast=request.fail_fast,
                   slurm_step=request.slurm_step, judged_with=record_judging(config, registry.checks))
    if changed and plan.judged_with is not None:
        plan.judged_with["working_directory"] = changed  # the report's configuration says it too
    return Prepared(request, registry, config, plan, kind, baseline, notes, run_id, left_out, scratch, checks, shape)



def execute(prepared: Prepared, say: Say, on_event: Callable[[Any], None] | None = None) -> tuple[RunReport, str]:
    """(the run's report, the problem writing results.jsonl or ""): the runner, then the transports
    closed and whatever a Kubernetes run left swept; a signal after the last check marks the report."""
    from preflight.core.files import FileWriteError
    from preflight.engine.runner import Runner, mark_interrupted
    from preflight.engine.signals import INTERRUPTS
    from preflight.run import ship

    shipped = ship.Shipped()
    try:
        if prepared.request.ship:
            ship.ship([node.transport for node in prepared.nodes], say, shipped, prepared.request.fanout)
        try:
            runner = Runner(prepared.plan, on_event=on_event)
        except (FileWriteError, OSError) as exc:
            raise RunProblem(str(exc)) from None
        report = runner.run()  # the first signal stops it inside; none escapes from it
    finally:
        ship.remove(shipped, say)  # over the nodes' connections, before they close
        for node in prepared.nodes:
            close = getattr(node.transport, "close", None)
            if close:
                close()
        if prepared.run_id:
            _sweep(prepared, say)
    if INTERRUPTS.received and not report.interrupted:
        mark_interrupted(report)  # a signal after the last check, before the reports: they say so
    prepared.kind.after_execute(report, prepared)
    return report, runner.write_error


def finish(prepared: Prepared, report: RunReport, say: Say, write_error: str = "",
           summary: steps.Step | None = None) -> int:
    """The kind's after-run steps (preflight.run.finish), with the command line's `summary` after the
    reports; the command's exit code. RunProblem (exit 2) naming a report that could not be written."""
    from preflight.run.shape import groups_of

    run = steps.Finishing(prepared.request, prepared.config, prepared.out, say, baseline=prepared.baseline,
                          nodes=prepared.nodes, write_error=write_error, step_summary=prepared.kind.step_summary,
                          shape=prepared.shape, groups=groups_of(prepared.nodes))
    run_steps = prepared.kind.steps
    if summary is not None:
        run_steps = steps.with_step(run_steps, "reports", "summary", summary)
    steps.finish(report, run, run_steps)
    return prepared.kind.exit_code(report, prepared.nodes[0].name if prepared.nodes else "")


def _sweep(prepared: Prepared, say: Say) -> None:
    """Delete whatever this run left in the namespace (the bridges delete their own; this is the net)."""
    from preflight.integrations.kubernetes.api import KubernetesError, core_api
    from preflight.integrations.kubernetes.runs import delete_run
    from preflight.run.nodes import k8s_run_record

    k8s = prepared.request.k8s
    assert k8s is not None
    record = k8s_run_record(prepared.run_id)
    if record is not None:
        record.stop_heartbeat()
    try:
        left = delete_run(core_api(k8s.context), k8s.namespace or "default", prepared.run_id)
    except KubernetesError as exc:
        say(STATUS, f"kubernetes: could not clean up run {prepared.run_id}: {exc}")
        return
    own = 1 if record is not None else 0  # the run's own record is removed too
    if left > own:
        say(STATUS, f"kubernetes: removed {left - own} object(s) run {prepared.run_id} left behind")


def release(prepared: Prepared) -> None:
    """Remove a scratch output directory (a hook's run without --out)."""
    if prepared.scratch:
        shutil.rmtree(prepared.out, ignore_errors=True)


def rejudge(request: RunRequest, past: RunReport, results: str, out_dir: str | None,
            registry: Any = None) -> tuple[RunReport, str, list[str]]:
    """`preflight report RESULTS --rejudge`: (the re-judged report, the directory to write it to, notes).

    It judges with what the run recorded, the profile, config file and --set of the request on top,
    validated as `prepare` validates a run's; --fail-on is recorded as the origin of fail_on."""
    from preflight.core.config import ConfigError
    from preflight.run.rejudge import rejudge_for_cli
    from preflight.transport.plugins import discover

    registry = registry or discover()
    try:
        # Without --out: RESULTS' own directory, which rejudge_for_cli turns into its rejudged/.
        report, out = rejudge_for_cli(past, registry, results, out_dir or str(Path(results).parent),
                                      request.profile, list(request.settings), request.config_file)
    except ConfigError as exc:
        raise RunProblem(str(exc)) from None
    sources = (report.rejudged or {}).get("sources") or {}
    if request.fail_on:
        report.fail_on = request.fail_on
        sources["run.fail_on"] = str(origin.flag("--fail-on"))
        if report.judged_with is not None:
            report.judged_with.setdefault("sources", {})["run.fail_on"] = sources["run.fail_on"]
    given = sorted(key for key, source in origin.read_sources(sources).items() if not source.recorded)
    notes = [f"re-judged with what the run recorded ({len(sources) - len(given)} values)"
             + (f"; from the options given now: {', '.join(given)}" if given else "")]
    if "note" in sources:
        notes.append(f"note: {sources['note']}")
    return report, out, notes
