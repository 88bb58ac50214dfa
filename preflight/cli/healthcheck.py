"""`preflight healthcheck`: the cheap node checks on this node only, for a scheduler hook (a Slurm
Prolog or HealthCheckProgram). Its rules (the budget, which checks, what drains) are in
preflight.run.hook; this module turns the options into a request and prints one line per finding.
Nothing leaves the node: no report is written unless --out asks for one, and the only message that
leaves is the optional `scontrol update` of --drain and --resume for this node itself (and, with
--history, the run recorded in the fleet history store, which may be a shared database).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from preflight.cli.options import (
    Duration, checks_option, color_option, config_option, exit_with_verdict, profile_option, run_problems, set_option,
    skip_option,
)
from preflight.run.hook import DEFAULT_BUDGET_S

HEALTHCHECK_EPILOG = (
    "Exit codes: 0 nothing to drain (GO, or only what could not be measured: ERROR, INCOMPLETE, printed with "
    "the verdict), 1 this node has a blocking finding of its own (what --drain drains), 2 usage or "
    "configuration error (nothing ran), 3 it was ended before its verdict (a plugin's exit: never 0)."
)


def run_healthcheck(request: Any, echo: Callable[..., None]) -> int:
    """Run the hook checks of `request` under its budget; print one line per finding; return the exit code."""
    from preflight.core.verdict import decide
    from preflight.reporters.safe_text import single_line
    from preflight.run import hook, service

    start = time.monotonic()

    def say(kind: str, text: str) -> None:
        if kind in (service.NOTE, service.WARNING):  # as `preflight run` prints them, on stderr
            click.echo(f"preflight: {'warning: ' if kind == service.WARNING else ''}{text}", err=True)
        else:
            echo(single_line(text))

    with run_problems():
        prepared = service.prepare(request)
    node = prepared.nodes[0].name
    try:
        with run_problems():
            report, write_error = service.execute(prepared, say)

        def summary(report: Any, _run: Any) -> None:
            decision = decide(report)
            for result in report.results:
                if result.status.value != "PASS":
                    echo(single_line(f"{result.status.value:<5} {result.check_id} {result.node}: {result.summary}"))
            own = hook.drain_worthy(report, node)
            after = "" if own or decision.exit_code == 0 else "; nothing measured here blocks: not drained"
            echo(single_line(f"preflight healthcheck {node}: {decision.verdict.value} ({decision.reason}{after}) "
                             f"in {time.monotonic() - start:.1f}s"))

        with run_problems():
            return service.finish(prepared, report, say, write_error, summary)
    finally:
        service.release(prepared)


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
    from preflight.run.hook import local_node_name
    from preflight.run.request import HISTORY_OFF, HISTORY_ON, HookRequest, RunRequest

    request = RunRequest(checks=only, skip=skip, profile=profile, config_file=config_file, settings=tuple(settings),
                         out_dir=out_dir, formats=("json",) if out_dir else (), drain=drain, resume=resume,
                         history=HISTORY_ON if history else HISTORY_OFF, fanout=1, argv=tuple(sys.argv[1:]),
                         command=shlex.join(["preflight", *sys.argv[1:]]),
                         hook=HookRequest(budget_s=budget, node=local_node_name()))
    exit_with_verdict(lambda: run_healthcheck(request, click.echo))
