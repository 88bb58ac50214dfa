"""One run, assembled once for every command that starts one (`preflight run`, `preflight
healthcheck`) and re-judges one (`preflight report --rejudge`):

    prepare(request)   the configuration (every value with its origin), the selection, the checks'
                       parameters, the nodes (nodes_for), the output directory: the plan
    execute(prepared)  the runner, as today; the nodes' transports closed after it
    finish(report, ..) the after-run steps, in order (preflight.run.finish)

The command line turns its options into a RunRequest and prints what comes back; nothing here
prints. A user's mistake is a RunProblem (exit 2) naming the flag, key or file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from preflight.core.model import RunReport
from preflight.run import hook
from preflight.run.inputs import (
    check_ids_known, formats_known, nonempty, output_dir, plugin_name, read_report, split_ids, tagged,
)
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
    baseline: RunReport | None = None
    notes: list[str] = field(default_factory=list)  # what the user should know before it starts
    run_id: str = ""  # this run's name among what it leaves in a Kubernetes namespace
    left_out: dict[str, str] = field(default_factory=dict)  # check id -> why the hook's budget left it out
    scratch: bool = False  # the output directory is a temporary one, removed after the run
    selected: list[Any] = field(default_factory=list)  # the checks selected, with those left out

    @property
    def out(self) -> Path:
        return self.plan.output_dir

    @property
    def nodes(self) -> list[NodeTarget]:
        return self.plan.nodes


def configure(request: RunRequest, checks: dict[str, Any]) -> Any:
    """The Config the request asks for: profile, config file, --set, then the flags; each value with its origin."""
    from preflight.core import config as config_mod

    try:
        config = config_mod.load(request.config_file, checks, profile=request.profile)
        if request.hook is not None:
            hook.shape_config(config)
        config_mod.apply_cli_settings(config, list(request.settings), checks)
        config_mod.validate(config, checks)
    except config_mod.ConfigError as exc:
        raise RunProblem(str(exc)) from None
    if request.hook is not None:
        hook.after_settings(config)
    if request.fail_on:
        config.set_run("fail_on", request.fail_on, "--fail-on")
    if request.level:
        config.set_run("level", request.level, "--level")
    if request.blast_radius is not None:  # checked by the option: above 0, at most 1
        config.set_run("blast_radius", request.blast_radius, "--blast-radius")
    if request.timeout_s is not None:
        if request.timeout_s <= 0:
            raise RunProblem("--timeout must be positive")
        config.set_run("timeout", request.timeout_s, "--timeout")
        config.timeouts.clear()
    return config


def _select(request: RunRequest, registry: Any) -> tuple[list[str], set[str], bool]:
    """(wanted, skipped, named explicitly) of the request."""
    if request.hook is not None:
        wanted, skipped = hook.select(registry, request.checks, request.skip)
        return wanted, skipped, request.checks is not None
    if request.checks is not None:
        nonempty("--checks", request.checks)
    wanted = split_ids(request.checks) or sorted(registry.checks)
    skipped = set(split_ids(request.skip))
    wanted = tagged(wanted, [t for value in request.tags for t in split_ids(value)], registry.checks)
    check_ids_known(registry, wanted, skipped)
    return wanted, skipped, bool(split_ids(request.checks))


def _load_errors(request: RunRequest, registry: Any, skipped: set[str]) -> list[dict[str, str]]:
    if request.hook is not None:
        return hook.load_errors_of(registry, request.checks, skipped)
    return [e.to_dict() for e in registry.errors if plugin_name(e) not in skipped]


def _output(request: RunRequest) -> tuple[Path, bool]:
    """(the output directory, whether it is a scratch directory removed after the run)."""
    if request.hook is not None and not request.out_dir:
        return Path(tempfile.mkdtemp(prefix="preflight-healthcheck-")), True
    profile = request.profile
    # Files the run reads that its --out must not replace (a baseline there is refused, not overwritten).
    inputs = [("--baseline", request.baseline_file), ("--config", request.config_file),
              ("--nodes", request.nodes_file),
              ("--profile", profile if profile and ("/" in profile or profile.endswith(".toml")) else None)]
    return output_dir(request.out_dir, inputs=inputs, formats=list(request.formats)), False


def baseline_of(request: RunRequest, checks: dict[str, Any]) -> tuple[RunReport | None, list[str]]:
    if request.baseline_file is None:
        if request.fail_on_regression:
            raise RunProblem("--fail-on-regression needs --baseline FILE")
        return None, []
    if not request.baseline_tolerance >= 0:
        raise RunProblem("--baseline-tolerance must be zero or more")
    baseline, notes = read_report(request.baseline_file, checks)
    return baseline, [f"note: {note}" for note in notes]


def prepare(request: RunRequest, registry: Any = None) -> Prepared:
    """Everything a run needs before it starts; RunProblem (exit 2, nothing ran) for a mistake."""
    from preflight.core.registry import discover
    from preflight.run import plan as plan_mod
    from preflight.run.judging import record_judging

    formats_known(list(request.formats))
    if request.textfile_dir is not None and not (os.path.isdir(request.textfile_dir)
                                                 and os.access(request.textfile_dir, os.W_OK)):
        raise RunProblem(f"--textfile-dir {request.textfile_dir}: not a directory this user can write to")
    start = time.monotonic()
    # Third-party plugins --skip names are never imported; a hook's imports are bounded by a third of its
    # budget and count against it (preflight.core.registry contains what a plugin does at import).
    registry = registry or discover(skip=set(split_ids(request.skip)),
                                    **({"limit_s": request.hook.budget_s / 3} if request.hook is not None else {}))
    baseline, notes = baseline_of(request, registry.checks)
    config = configure(request, registry.checks)
    wanted, skipped, explicit = _select(request, registry)
    try:
        selection = plan_mod.select(registry.checks, wanted, skipped, explicit=explicit)
        plan_mod.prepare_params(selection.ids, registry.checks, config)
    except (plan_mod.PlanError, ValueError) as exc:
        raise RunProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    notes += [f"also running {added}: {reader} reads what it records" for added, reader in selection.added.items()]
    run_id = new_run_id() if request.node_source == K8S else ""
    nodes = nodes_for(request, run_id, budget_s=sum(config.timeout_for(c) for c in registry.ordered(selection.ids)),
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
    left_out: dict[str, str] = {}
    if request.hook is not None:
        timeouts, left_out = hook.allot(checks, config, request.hook.budget_s, time.monotonic() - start)
        config.timeouts.update(timeouts)
    out, scratch = _output(request)
    plan = RunPlan(checks=[c for c in checks if c.id not in left_out], config=config, output_dir=out, nodes=nodes,
                   fanout=request.fanout, command=request.command,
                   load_errors=_load_errors(request, registry, skipped), fail_fast=request.fail_fast,
                   slurm_step=request.slurm_step, judged_with=record_judging(config, registry.checks))
    return Prepared(request, registry, config, plan, baseline, notes, run_id, left_out, scratch, checks)


def execute(prepared: Prepared, say: Say, on_event: Callable[[Any], None] | None = None) -> tuple[RunReport, str]:
    """(the run's report, the problem writing results.jsonl or ""): the runner, then the transports
    closed and whatever a Kubernetes run left swept; a signal after the last check marks the report."""
    from preflight.core.files import FileWriteError
    from preflight.engine.runner import Runner, mark_interrupted
    from preflight.engine.signals import INTERRUPTS

    try:
        try:
            runner = Runner(prepared.plan, on_event=on_event)
        except (FileWriteError, OSError) as exc:
            raise RunProblem(str(exc)) from None
        report = runner.run()  # the first signal stops it inside; none escapes from it
    finally:
        for node in prepared.nodes:
            close = getattr(node.transport, "close", None)
            if close:
                close()
        if prepared.run_id:
            _sweep(prepared, say)
    if INTERRUPTS.received and not report.interrupted:
        mark_interrupted(report)  # a signal after the last check, before the reports: they say so
    if prepared.left_out:
        hook.record_left_out(report, prepared.selected, prepared.left_out, prepared.nodes[0].name)
    return report, runner.write_error


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
    from preflight.core.registry import discover
    from preflight.run.rejudge import rejudge_for_cli

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
        sources["run.fail_on"] = "--fail-on"
        if report.judged_with is not None:
            report.judged_with.setdefault("sources", {})["run.fail_on"] = "--fail-on"
    given = sorted(key for key, source in sources.items() if not source.startswith("the run") and key != "note")
    notes = [f"re-judged with what the run recorded ({len(sources) - len(given)} values)"
             + (f"; from the options given now: {', '.join(given)}" if given else "")]
    if "note" in sources:
        notes.append(f"note: {sources['note']}")
    return report, out, notes
