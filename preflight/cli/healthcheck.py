"""`preflight healthcheck`: the cheap node checks on this node only, for a scheduler hook.

Slurm runs it as HealthCheckProgram (every HealthCheckInterval seconds, on idle nodes) or as a
Prolog (before every job; a non-zero exit drains the node and requeues the job). So it must be
quick and bounded, and it must drain a node only for what it measured there: its exit code is 1
exactly when this node has a blocking finding of its own (what --drain drains), and 0 otherwise,
GO or not. What it could not measure (a check ERROR: a probe short of time, a plugin that did not
load, a timeout) is printed with the verdict and drains nothing. Nothing leaves the node: the checks
run here through the local transport, no report is written unless --out asks for one, and the only
message that leaves is the optional `scontrol update` of --drain and --resume for this node itself
(and, with --history, the run recorded in the fleet history store, which may be a shared database).

Each check gets its run-level `quick` timeout (its floor: what it needs to finish) out of --budget,
in run order; a check the budget can no longer give its floor does not run and is ERROR, so a small
budget never turns into a half-run probe that reads as a broken GPU.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from preflight.cli.options import (
    Duration, UsageProblem, check_ids_known, checks_option, color_option, config_option, plugin_name,
    profile_option, set_option, skip_option, split_ids,
)
from preflight.core.model import Scope

DEFAULT_BUDGET_S = 45.0  # slurmd kills a HealthCheckProgram after 60 s
MIN_CHECK_TIMEOUT_S = 5.0  # the floor of a check that declares no quick-level timeout
EXIT_HEALTHY, EXIT_DRAIN = 0, 1
HEALTHCHECK_EPILOG = (
    "Exit codes: 0 nothing to drain (GO, or only what could not be measured: ERROR, INCOMPLETE, printed with "
    "the verdict), 1 this node has a blocking finding of its own (what --drain drains), 2 usage or "
    "configuration error (nothing ran)."
)


def hook_check_ids(checks: dict) -> list[str]:
    """The registered node checks that declare themselves cheap enough for a hook (Check.hook)."""
    return sorted(cid for cid, check in checks.items() if check.scope is Scope.NODE and check.hook)


def local_node_name() -> str:
    """This node as Slurm names it: slurmd exports SLURMD_NODENAME to its prolog; else the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def floor_s(check: Any) -> float:
    """The least time a check is given: its quick-level timeout, which is sized for a hook."""
    from preflight.core import levels

    at_quick = levels.timeout(check, "quick")
    return float(at_quick) if at_quick is not None else MIN_CHECK_TIMEOUT_S


def allot(checks: list[Any], config: Any, budget_s: float,
          spent_s: float = 0.0) -> tuple[dict[str, float], dict[str, str]]:
    """(check id -> timeout, check id -> why it does not run): in run order, each check gets its own
    timeout (the quick one, unless the configuration sets another) out of what is left of the budget;
    one that can no longer get its floor is left out, with the reason. `spent_s`: the budget used
    already (loading the plugins)."""
    left = budget_s - spent_s
    timeouts: dict[str, float] = {}
    left_out: dict[str, str] = {}
    for check in checks:
        if config.skipped_at_level(check):
            continue  # recorded as a SKIP of the level, costs nothing
        want, floor = config.timeout_for(check), floor_s(check)
        give = min(want, left)
        if give < min(want, floor):
            left_out[check.id] = (f"not run: --budget {budget_s:g} s leaves {max(0.0, left):.0f} s for it, and it "
                                  f"needs {min(want, floor):g} s; raise --budget or --skip {check.id}")
            continue
        timeouts[check.id] = give
        left -= give
    return timeouts, left_out


def select(registry: Any, only: str | None, skip: str | None) -> tuple[list[str], set[str]]:
    """(ids to run, ids skipped): the hook checks, or --checks (node checks only), less --skip."""
    if only is not None and not split_ids(only):
        raise UsageProblem("--checks is empty; give check ids or leave --checks out")
    wanted = split_ids(only) or hook_check_ids(registry.checks)
    skipped = set(split_ids(skip))
    check_ids_known(registry, wanted, skipped)
    cluster = [cid for cid in wanted if registry.checks[cid].scope is not Scope.NODE]
    if cluster:
        raise UsageProblem(f"--checks {', '.join(cluster)}: a cluster check measures across nodes; healthcheck "
                           "runs on this node only (use `preflight run`)")
    return [cid for cid in wanted if cid not in skipped], skipped


def load_errors_of(registry: Any, only: str | None, skipped: set[str]) -> list[dict[str, str]]:
    """The plugins that failed to load and that this healthcheck might have run: named in --checks, or
    (without --checks) any not skipped, since a plugin that did not load could not say whether it is
    a hook check. They make the verdict INCOMPLETE, which drains nothing."""
    asked = set(split_ids(only))
    return [e.to_dict() for e in registry.errors if plugin_name(e) not in skipped
            and (not asked or plugin_name(e) in asked)]


def drain_worthy(report: Any, node: str) -> list[tuple[str, str]]:
    """This node's own blocking findings, measured (what --drain drains); empty: nothing to drain."""
    from preflight.integrations.slurm import own_findings

    return own_findings(report).get(node, [])


def run_healthcheck(config_file: str | None, settings: list[str], budget_s: float, out_dir: str | None,
                    drain: bool, resume: bool, echo: Callable[..., None], command: str = "", profile: str | None = None,
                    only: str | None = None, skip: str | None = None, history: bool = False) -> int:
    """Run the hook checks under `budget_s` in all; print one line per finding; return the exit code.
    `history`: record the run in fleet history, as `preflight run` does (a store problem is a warning)."""
    from preflight.core import config as config_mod
    from preflight.core.registry import discover
    from preflight.core.verdict import decide
    from preflight.reporters.safe_text import single_line
    from preflight.run import plan as plan_mod
    from preflight.run.execute import error_result
    from preflight.run.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport

    start = time.monotonic()
    # Plugin imports are bounded (a third of the budget at most) and count against the budget.
    registry = discover(skip=set(split_ids(skip)), limit_s=budget_s / 3)
    chosen, skipped = select(registry, only, skip)
    config = config_mod.load(config_file, registry.checks, profile=profile)
    config.level = "quick"  # each check's parameters sized for a hook (preflight.core.levels); --set still wins
    config_mod.apply_cli_settings(config, list(settings), registry.checks)
    config_mod.validate(config, registry.checks)
    # One node is checked here: how many nodes the cluster has is for `preflight run` to judge.
    config.expect.nodes = None
    node = local_node_name()
    try:
        selection = plan_mod.select(registry.checks, chosen, skipped, explicit=only is not None)
        plan_mod.check_deselection(registry.checks, chosen, skipped, selection, config.expect, [None],
                                   config.profile)
    except plan_mod.PlanError as exc:
        raise UsageProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    checks = registry.ordered(selection.ids)
    timeouts, left_out = allot(checks, config, budget_s, time.monotonic() - start)
    config.timeouts.update(timeouts)
    if out_dir:
        # The same rules as `run --out`: the report files of an earlier run there are removed first, so
        # DIR never holds two verdicts; the config file it reads is never among what it replaces.
        from preflight.cli.options import writable_dir

        scratch = writable_dir(out_dir, inputs=[("--config", config_file)], formats=["json"])
    else:
        scratch = Path(tempfile.mkdtemp(prefix="preflight-healthcheck-"))
    try:
        plan = RunPlan(checks=[c for c in checks if c.id not in left_out], config=config, output_dir=scratch,
                       nodes=[NodeTarget(LocalTransport(name=node))], fanout=1, command=command,
                       load_errors=load_errors_of(registry, only, skipped))
        try:
            report = Runner(plan).run()
        except OSError as exc:  # results.jsonl cannot be opened (FileWriteError names it)
            raise UsageProblem(str(exc)) from None
        for check in checks:
            if check.id in left_out:
                report.planned.append(check.id)
                report.add(error_result(check, node, left_out[check.id]))
        decision = decide(report)
        if out_dir:
            from preflight.core.files import write_atomic
            from preflight.reporters import renderer

            try:
                write_atomic(scratch / "results.json", renderer("json")(report))
            except OSError as exc:
                raise UsageProblem(str(exc)) from None
        for result in report.results:
            if result.status.value != "PASS":
                echo(single_line(f"{result.status.value:<5} {result.check_id} {result.node}: {result.summary}"))
        own = drain_worthy(report, node)
        after = "" if own or decision.exit_code == 0 else "; nothing measured here blocks: not drained"
        echo(single_line(f"preflight healthcheck {node}: {decision.verdict.value} ({decision.reason}{after}) "
                         f"in {time.monotonic() - start:.1f}s"))
        if drain or resume:
            from preflight.integrations.slurm import apply

            for action in apply(report, drain, resume):
                echo(single_line(f"slurm: {action.describe()}"))
        if history:
            from preflight.cli.history_context import record

            record(report, config)  # [history] url or $PREFLIGHT_HISTORY_URL; the flag asks, whatever `enabled` says
        return EXIT_DRAIN if own else EXIT_HEALTHY
    finally:
        if not out_dir:
            shutil.rmtree(scratch, ignore_errors=True)


@click.command(epilog=HEALTHCHECK_EPILOG)
@config_option
@set_option
@profile_option
@checks_option
@skip_option
@click.option("--budget", type=Duration(minimum=0.999), default=DEFAULT_BUDGET_S, show_default=True,
              help="Time all checks together may take: seconds, or 45s, 1m (slurmd stops a HealthCheckProgram at "
                   "60 s); a check the budget cannot give its quick-level time does not run and is ERROR.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Also keep results.json here (default: nothing is written).")
@click.option("--drain", is_flag=True, help="Drain this node in Slurm when it has a blocking finding.")
@click.option("--resume", is_flag=True, help="Resume this node when preflight drained it and it now passes.")
@click.option("--history", is_flag=True, help="Record this healthcheck in fleet history, as `preflight run` does "
              "([history] url, $PREFLIGHT_HISTORY_URL, or $XDG_DATA_HOME/preflight/history.sqlite); off by default. "
              "A store that cannot be written is a warning, never the exit code.")
@color_option
def healthcheck(config_file: str | None, settings: tuple[str, ...], profile: str | None, only: str | None,
                skip: str | None, budget: float, out_dir: str | None, drain: bool, resume: bool,
                history: bool = False) -> None:
    """The cheap node checks (node.environment, gpu.visibility, versions.*) on this node only, for a
    Slurm Prolog or HealthCheckProgram: bounded time, exit 1 only for a blocking finding measured here,
    nothing leaves the node."""
    from preflight.core.config import ConfigError

    try:
        code = run_healthcheck(config_file, list(settings), budget, out_dir, drain, resume, click.echo,
                               command=shlex.join(["preflight", *sys.argv[1:]]), profile=profile, only=only,
                               skip=skip, history=history)
    except ConfigError as exc:
        raise UsageProblem(str(exc)) from None
    sys.exit(code)
