"""`preflight run`: run the checks on every node and across nodes; the exit code is the verdict."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

import click

from preflight.cli.options import (
    FINITE, Duration, FiniteFloat, checks_option, color_option, config_option, exit_with_verdict, fail_on_option, format_option,
    json_option, out_option, profile_option, run_problems, sayer, set_option, skip_option, split_ids, summary_step,
    textfile_option,
)
from preflight.cli import shape as shape_mod
from preflight.cli.k8s import k8s_options, k8s_request
from preflight.core.verdict import EXIT_CODE_HELP


@click.command(epilog=EXIT_CODE_HELP)
@click.option("--nodes", "nodes_file", default=None, metavar="FILE|NODESET",
              help="Hosts file (one node per line: user@host:port slots=N group=LEAF), or a node set such as "
                   "gpu[001-064,070] (at most 100,000 nodes). Without it, checks this machine.")
@config_option
@profile_option
@checks_option
@skip_option
@click.option("--tag", "tags", multiple=True, metavar="TAG",
              help="Run only the checks with this tag (repeatable or comma-separated: any of them); `preflight "
                   "list` shows each check's tags.")
@out_option
@format_option
@fail_on_option
@click.option("--timeout", type=Duration(), default=None,
              help="Per-check timeout: seconds, or 90s, 5m, 1h (overrides the config).")
@set_option
@click.option("--remote-python", default="python3", show_default=True,
              help="Interpreter with preflight installed on remote nodes (a hosts-file python= wins).")
@click.option("--ssh-option", "ssh_options", multiple=True, metavar="OPT",
              help="Extra ssh -o option, e.g. --ssh-option ProxyJump=bastion. Repeatable.")
@click.option("--ssh-accept-new", is_flag=True, help="Accept and remember host keys of nodes not yet known.")
@click.option("--ship", is_flag=True, help="On each SSH node whose interpreter lacks this preflight: install it "
              "for this run into a throwaway venv that sees the node's own packages, removed after the run.")
@click.option("--fanout", type=click.IntRange(1, 4096), default=64, show_default=True,
              help="How many nodes to drive at once.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None,
              help="results.json of a known-good run: every report shows what got worse against it.")
@click.option("--baseline-tolerance", type=FINITE, default=0.1, show_default=True,
              help="Relative change of a figure that counts against the baseline (0.1 = 10%).")
@click.option("--fail-on-regression", is_flag=True,
              help="With --baseline: a regression makes the verdict NO-GO (without it, regressions are warnings).")
@click.option("--slurm", is_flag=True, help="Check the nodes of the Slurm allocation this runs in (salloc/sbatch), "
              "through job steps; their interpreter defaults to this one.")
@click.option("--slurm-step", type=click.Choice(["auto", "single", "per-node"]), default="auto", show_default=True,
              help="With --slurm: drive the agents as one job step across the allocation (single), as one job "
                   "step per node, --fanout at a time (per-node), or choose by the allocation's size (auto).")
@click.option("--drain", is_flag=True, help="With --slurm: drain each node with a blocking finding of its own.")
@click.option("--resume", is_flag=True, help="With --slurm: resume nodes preflight drained that now pass.")
@click.option("--blast-radius", type=FiniteFloat(0, 1, min_open=True), default=None,
              help="The most --drain and --cordon act on in one run, as a share of its nodes (default 0.02, or [run] "
                   "blast_radius; at least one node, never more than half of one topology group). Past it nothing "
                   "is acted on and the run says which nodes would have been.")
@click.option("--level", type=click.Choice(["quick", "standard", "thorough"]), default=None,
              help="How much to measure: quick (probes, at most 30 s per node: a Slurm prolog), standard "
                   "(default, or [run] level in preflight.toml), thorough (larger sizes, more repeats).")
@click.option("--fail-fast", is_flag=True, help="Stop the run as soon as the verdict is NO-GO.")
@k8s_options
@shape_mod.shape_option
@click.option("--no-history", is_flag=True, help="Leave fleet history alone: do not show this run's figures "
              "against earlier runs, nor record it (default: $XDG_DATA_HOME/preflight/history.sqlite, or "
              "[history] url).")
@textfile_option
@json_option
@color_option
def run(nodes_file: str | None, config_file: str | None, profile: str | None, only: str | None, skip: str | None,
        out_dir: str | None, formats: str, fail_on: str | None, timeout: float | None, settings: tuple[str, ...],
        remote_python: str, ssh_options: tuple[str, ...], ssh_accept_new: bool, fanout: int,
        baseline_file: str | None = None, baseline_tolerance: float = 0.1, fail_on_regression: bool = False,
        slurm: bool = False, slurm_step: str = "auto", drain: bool = False, resume: bool = False,
        level: str | None = None, fail_fast: bool = False, **more: Any) -> None:
    """Run the checks and write the reports; the exit code is the verdict."""
    from preflight.run.request import HISTORY_AUTO, HISTORY_OFF, RunRequest
    from preflight.engine.signals import INTERRUPTS

    if more.get("ship") and not nodes_file:
        raise click.UsageError("--ship installs preflight on nodes reached over SSH: give them with --nodes")
    remote_source = click.get_current_context().get_parameter_source("remote_python")
    request = RunRequest(
        checks=only, skip=skip, tags=tuple(more.get("tags") or ()), level=level, profile=profile,
        config_file=config_file, settings=tuple(settings), fail_on=fail_on, timeout_s=timeout,
        nodes_file=nodes_file, slurm=slurm, slurm_step=slurm_step, k8s=k8s_request(more),
        remote_python=remote_python, remote_python_given=remote_source is not click.core.ParameterSource.DEFAULT,
        ssh_options=tuple(ssh_options), ssh_accept_new=ssh_accept_new, ship=bool(more.get("ship")), fanout=fanout,
        fail_fast=fail_fast,
        out_dir=out_dir, formats=tuple(split_ids(formats)), textfile_dir=more.get("textfile_dir"),
        baseline_file=baseline_file, baseline_tolerance=baseline_tolerance, fail_on_regression=fail_on_regression,
        drain=drain, resume=resume, blast_radius=more.get("blast_radius"),
        history=HISTORY_OFF if more.get("no_history") else HISTORY_AUTO,
        shape=shape_mod.parse(more.get("shape")), shape_values=tuple(more.get("shape") or ()),
        argv=tuple(sys.argv[1:]),
        command=shlex.join(["preflight", *sys.argv[1:]]))
    # From here on, SIGINT and SIGTERM (any number, at any moment) end in exit 130 with the reports
    # written once and marked interrupted (preflight/engine/signals.py).
    with INTERRUPTS.handling():
        exit_with_verdict(lambda: _run(request, as_json=bool(more.get("as_json"))))


def _run(request: Any, as_json: bool) -> int:
    from preflight.run import service

    say = sayer(as_json)
    with run_problems():
        prepared = service.prepare(request)
    for note in prepared.notes:
        say(service.NOTE, note)
    progress = _progress(prepared.plan, prepared.nodes, to_stderr=as_json)
    try:
        with run_problems():
            report, write_error = service.execute(prepared, say, on_event=progress)
    finally:
        progress.stop()
    with run_problems():
        return service.finish(prepared, report, say, write_error, summary_step(as_json))


def _progress(plan: Any, nodes: list[Any], to_stderr: bool = False) -> Any:
    from preflight.cli.progress import STILL_RUNNING_INTERVAL_S, Progress

    interval = float(os.environ.get("PREFLIGHT_PROGRESS_INTERVAL_S") or STILL_RUNNING_INTERVAL_S)
    total = sum(len(nodes) if c.scope.value == "node" else 1 for c in plan.checks)  # results expected
    return Progress(total, {c.id: plan.config.timeout_for(c, len(nodes) if c.scope.value == "cluster" else None)
                            for c in plan.checks},
                    interactive=sys.stdout.isatty() and not os.environ.get("CI"), interval_s=interval,
                    echo=(lambda *a, **k: click.echo(*a, err=True, **k)) if to_stderr else click.echo)
