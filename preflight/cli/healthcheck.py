"""`preflight healthcheck`: the cheap node checks on this node only, for a scheduler hook.

Slurm runs it as HealthCheckProgram (every HealthCheckInterval seconds, on idle nodes) or as a
Prolog (before every job; a non-zero exit drains the node and requeues the job). So it must be
quick and bounded, its exit code must be the verdict (0 GO, 1 NO-GO, 3 INCOMPLETE), and nothing may
leave the node: the checks run here through the local transport, no report is written unless
--out asks for one, and the only message that leaves is the optional `scontrol update` of --drain
and --resume for this node itself.
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

import click

from preflight.cli.options import Duration, UsageProblem, color_option, config_option, set_option
from preflight.core.model import Scope, Status
from preflight.core.verdict import EXIT_CODE_HELP

DEFAULT_BUDGET_S = 45.0  # slurmd kills a HealthCheckProgram after 60 s
MIN_CHECK_TIMEOUT_S = 5.0


def hook_check_ids(checks: dict) -> list[str]:
    """The registered node checks cheap enough for a hook: node.environment, gpu.visibility, versions.*."""
    from preflight.integrations.slurm import HOOK_CHECKS

    return sorted(cid for cid, check in checks.items()
                  if check.scope is Scope.NODE and any(cid == h or (h.endswith(".") and cid.startswith(h))
                                                       for h in HOOK_CHECKS))


def local_node_name() -> str:
    """This node as Slurm names it: slurmd exports SLURMD_NODENAME to its prolog; else the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def run_healthcheck(config_file: str | None, settings: list[str], budget_s: float, out_dir: str | None,
                    drain: bool, resume: bool, echo: Callable[..., None], command: str = "") -> int:
    """Run the hook checks under `budget_s` in all; print one line per finding; return the exit code."""
    from preflight.core import config as config_mod
    from preflight.core.registry import discover
    from preflight.run.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport
    from preflight.core.verdict import decide

    start = time.monotonic()
    registry = discover()
    config = config_mod.load(config_file, registry.checks)
    config.level = "quick"  # each check's parameters sized for a hook (preflight.core.levels); --set still wins
    config_mod.apply_cli_settings(config, list(settings), registry.checks)
    checks = registry.ordered(hook_check_ids(registry.checks))
    # Each check gets its share of the budget (or less, if its own timeout is shorter): the whole
    # run ends within the budget plus the agent's start-up.
    share = max(MIN_CHECK_TIMEOUT_S, budget_s / max(1, len(checks)))
    for check in checks:
        config.timeouts[check.id] = min(config.timeout_for(check), share)
    scratch = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="preflight-healthcheck-"))
    try:
        plan = RunPlan(checks=checks, config=config, output_dir=scratch,
                       nodes=[NodeTarget(LocalTransport(name=local_node_name()))], fanout=1, command=command,
                       load_errors=[e.to_dict() for e in registry.errors])
        report = Runner(plan).run()
        decision = decide(report)
        if out_dir:
            from preflight.reporters import renderer

            (scratch / "results.json").write_text(renderer("json")(report), encoding="utf-8")
        for result in report.results:
            if result.status is not Status.PASS:
                echo(f"{result.status.value:<5} {result.check_id} {result.node}: {result.summary}")
        echo(f"preflight healthcheck {local_node_name()}: {decision.verdict.value} "
             f"({decision.reason}) in {time.monotonic() - start:.1f}s")
        if drain or resume:
            from preflight.integrations.slurm import apply

            for action in apply(report, drain, resume):
                echo(f"slurm: {action.describe()}")
        return decision.exit_code
    finally:
        if not out_dir:
            shutil.rmtree(scratch, ignore_errors=True)


@click.command(epilog=EXIT_CODE_HELP)
@config_option
@set_option
@click.option("--budget", type=Duration(minimum=0.999), default=DEFAULT_BUDGET_S, show_default=True,
              help="Time all checks together may take: seconds, or 45s, 1m (slurmd stops a HealthCheckProgram at 60 s).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Also keep results.json here (default: nothing is written).")
@click.option("--drain", is_flag=True, help="Drain this node in Slurm when it has a blocking finding.")
@click.option("--resume", is_flag=True, help="Resume this node when preflight drained it and it now passes.")
@color_option
def healthcheck(config_file: str | None, settings: tuple[str, ...], budget: float, out_dir: str | None,
                drain: bool, resume: bool) -> None:
    """The cheap node checks (node.environment, gpu.visibility, versions.*) on this node only, for a
    Slurm Prolog or HealthCheckProgram: bounded time, the exit code is the verdict, nothing leaves the node."""
    from preflight.core.config import ConfigError

    try:
        code = run_healthcheck(config_file, list(settings), budget, out_dir, drain, resume, click.echo,
                               command=shlex.join(["preflight", *sys.argv[1:]]))
    except ConfigError as exc:
        raise UsageProblem(str(exc)) from None
    sys.exit(code)
