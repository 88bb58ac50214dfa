"""`preflight run`: run the checks on every node and across nodes; the exit code is the verdict."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

import click

from preflight.cli.options import (
    FINITE, Duration, UsageProblem, check_formats, check_ids_known, checks_option, color_option, config_option,
    fail_on_option, finish, format_option, json_option, load_baseline, nonempty, out_option, plugin_name,
    profile_option, registry, set_option, skip_option, split_ids, textfile_option, writable_dir, write_textfile,
)
from preflight.cli import k8s, shape as shape_mod
from preflight.cli.k8s import k8s_options
from preflight.core.verdict import EXIT_CODE_HELP


@click.command(epilog=EXIT_CODE_HELP)
@click.option("--nodes", "nodes_file", default=None, metavar="FILE|NODESET",
              help="Hosts file (one node per line: user@host:port slots=N group=LEAF), or a node set such as "
                   "gpu[001-064,070]. Without it, checks this machine.")
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
def run(nodes_file: str | None, config_file: str | None, profile: str | None, only: str | None, skip: str | None, out_dir: str | None,
        formats: str, fail_on: str | None, timeout: float | None, settings: tuple[str, ...], remote_python: str,
        ssh_options: tuple[str, ...], ssh_accept_new: bool, fanout: int, baseline_file: str | None = None,
        baseline_tolerance: float = 0.1, fail_on_regression: bool = False, slurm: bool = False,
        slurm_step: str = "auto", drain: bool = False, resume: bool = False, level: str | None = None,
        fail_fast: bool = False, **more: Any) -> None:
    """Run the checks and write the reports; the exit code is the verdict."""
    from preflight.run.signals import INTERRUPTS

    # From here on, SIGINT and SIGTERM (any number, at any moment) end in exit 130 with the reports
    # written once and marked interrupted (preflight/run/signals.py).
    with INTERRUPTS.handling():
        sys.exit(_run(nodes_file, config_file, profile, only, skip, out_dir, formats, fail_on, timeout, settings,
                      remote_python, ssh_options, ssh_accept_new, fanout, baseline_file, baseline_tolerance,
                      fail_on_regression, slurm, slurm_step, drain, resume, level, fail_fast, more))


def _run(nodes_file: str | None, config_file: str | None, profile: str | None, only: str | None, skip: str | None,
         out_dir: str | None, formats: str, fail_on: str | None, timeout: float | None, settings: tuple[str, ...],
         remote_python: str, ssh_options: tuple[str, ...], ssh_accept_new: bool, fanout: int,
         baseline_file: str | None, baseline_tolerance: float, fail_on_regression: bool, slurm: bool, slurm_step: str,
         drain: bool,
         resume: bool, level: str | None, fail_fast: bool, more: dict[str, Any]) -> int:
    as_json = bool(more.get("as_json"))
    from preflight.core import config as config_mod
    from preflight.core.files import FileWriteError
    from preflight.run.judging import record_judging
    from preflight.run.runner import mark_interrupted
    from preflight.run.signals import INTERRUPTS
    from preflight.run.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport

    from preflight.run import plan as plan_mod

    chosen_formats = check_formats(formats)
    shape = shape_mod.parse(more.get("shape"))
    textfile_dir = more.get("textfile_dir")
    if textfile_dir is not None and not (os.path.isdir(textfile_dir) and os.access(textfile_dir, os.W_OK)):
        raise UsageProblem(f"--textfile-dir {textfile_dir}: not a directory this user can write to")
    if only is not None:
        nonempty("--checks", only)
    baseline = load_baseline(baseline_file, baseline_tolerance, fail_on_regression)
    checks_found = registry()
    try:
        config = config_mod.load(config_file, checks_found.checks, profile=profile)
        config_mod.apply_cli_settings(config, list(settings), checks_found.checks)
        config_mod.validate(config, checks_found.checks)
    except config_mod.ConfigError as exc:
        raise UsageProblem(str(exc)) from None
    if fail_on:
        config.fail_on = fail_on
    if level:
        config.level = level
    if timeout is not None:
        if timeout <= 0:
            raise UsageProblem("--timeout must be positive")
        config.default_timeout = timeout
        config.timeouts.clear()

    wanted = split_ids(only) or sorted(checks_found.checks)
    skipped = set(split_ids(skip))
    wanted = _tagged(wanted, [t for value in more.get("tags") or () for t in split_ids(value)], checks_found.checks)
    check_ids_known(checks_found, wanted, skipped)
    try:
        selection = plan_mod.select(checks_found.checks, wanted, skipped, explicit=bool(split_ids(only)))
        plan_mod.prepare_params(selection.ids, checks_found.checks, config)
    except (plan_mod.PlanError, config_mod.ConfigError) as exc:
        raise UsageProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    for added, reader in selection.added.items():
        click.echo(f"preflight: also running {added}: {reader} reads what it records", err=True)
    checks = checks_found.ordered(selection.ids)

    run_id = k8s.new_run_id()
    if k8s.wanted(more):
        nodes = k8s.nodes(more, remote_python, run_id, other_sources=bool(nodes_file or slurm or drain or resume),
                          budget_s=sum(config.timeout_for(c) for c in checks))
    elif slurm or drain or resume:
        nodes = _slurm_nodes(nodes_file, slurm, remote_python)
    elif nodes_file:
        nodes = _nodes_from_file(nodes_file, remote_python, list(ssh_options), ssh_accept_new)
    else:
        nodes = [NodeTarget(LocalTransport())]
    kinds = {node.transport.kind for node in nodes}
    asked = set(split_ids(only))
    checks = [c for c in checks if not c.transports or kinds & set(c.transports) or c.id in asked]
    try:
        plan_mod.check_deselection(checks_found.checks, wanted, skipped, selection, config.expect,
                                   [n.slots for n in nodes], config.profile)
    except plan_mod.PlanError as exc:
        raise UsageProblem(str(exc)) from None
    # Files the run reads that its --out must not replace (a baseline there is refused, not overwritten).
    inputs = [("--baseline", baseline_file), ("--config", config_file), ("--nodes", nodes_file),
              ("--profile", profile if profile and ("/" in profile or profile.endswith(".toml")) else None)]
    out = writable_dir(out_dir, inputs=inputs, formats=chosen_formats)

    plan = RunPlan(checks=checks, config=config, output_dir=out, nodes=nodes, fanout=fanout,
                   command=shlex.join(["preflight", *sys.argv[1:]]),
                   load_errors=[e.to_dict() for e in checks_found.errors if plugin_name(e) not in skipped],
                   fail_fast=fail_fast, slurm_step=slurm_step,
                   judged_with=record_judging(config, checks_found.checks, profile=profile, config_file=config_file,
                                              settings=list(settings), flags={"--fail-on": fail_on, "--level": level}))
    progress = _progress(plan, nodes, to_stderr=as_json)
    try:
        try:
            runner = Runner(plan, on_event=progress)
        except FileWriteError as exc:
            raise UsageProblem(str(exc)) from None
        report = runner.run()  # the first signal stops it inside; none escapes from it
    finally:
        progress.stop()
        for node in nodes:
            close = getattr(node.transport, "close", None)
            if close:
                close()
        if more.get("k8s"):
            k8s.sweep(more, run_id)
    if INTERRUPTS.received and not report.interrupted:
        mark_interrupted(report)  # a signal after the last check, before the reports: they say so
    if baseline is not None:
        from preflight.core.compare import attach

        attach(report, baseline, baseline_tolerance, label=str(baseline_file), fail_on_regression=fail_on_regression)
    if len(report.nodes) > 1:
        from preflight.history import outlier_result

        fleet = outlier_result(report.to_dict())  # a node that lags its identical peers, though it passes
        if fleet is not None:
            report.results.append(fleet)
    from preflight.cli import history_context

    keep_history = history_context.wanted(config, more.get("no_history", False))
    if keep_history:
        history_context.attach_context(report, config)  # this run among the earlier ones, for its reports
    problem: UsageProblem | None = None
    try:
        shape_mod.apply(report, shape, nodes, out)  # before the reports: they show the answer
        finish(report, out, chosen_formats, as_json=as_json)
        write_textfile(report, textfile_dir)
    except UsageProblem as exc:  # a report that cannot be written: exit 2 naming it, after the Slurm actions
        problem = exc
    if runner.write_error and problem is None:
        problem = UsageProblem(f"{runner.write_error}; the reports hold every result")
    if drain or resume:
        from preflight.integrations.slurm import apply

        for action in apply(report, drain, resume):
            click.echo(f"slurm: {action.describe()}", err=bool(action.error) or as_json)
    k8s.after_run(report, more)
    if keep_history:
        history_context.record(report, config)
    if problem is not None:
        raise problem
    from preflight.core.verdict import decide

    return decide(report).exit_code  # 130 for an interrupted run, as every report says


def _nodes_from_file(path: str, remote_python: str, ssh_options: list[str], accept_new: bool) -> list[Any]:
    from preflight.cli.hosts import HostsFileError, nodes_from_arg
    from preflight.run.runner import NodeTarget
    from preflight.transport.ssh import SshTransport

    try:
        hosts = without_ports(nodes_from_arg(path))
        return [NodeTarget(SshTransport.from_host(host, python=remote_python, options=ssh_options,
                                                  accept_new=accept_new), slots=host.slots,
                           topology={"group": host.group} if host.group else {}) for host in hosts]
    except HostsFileError as exc:
        raise UsageProblem(str(exc)) from None
    except ValueError as exc:  # an --ssh-option that is not Key=Value
        raise UsageProblem(str(exc)) from None


def without_ports(hosts: list[Any]) -> list[Any]:
    """Hosts named by their address alone (`gpu01`, not `gpu01:2222`) in every report, unless two of
    them share an address: then the port tells them apart."""
    import dataclasses

    shared = {h.hostname for h in hosts if sum(1 for o in hosts if o.hostname == h.hostname) > 1}
    return [h if h.hostname in shared or h.port is None else dataclasses.replace(h, name=h.hostname) for h in hosts]


def _slurm_nodes(nodes_file: str | None, slurm: bool, remote_python: str) -> list[Any]:
    from preflight.cli import nodes as slurm_mod

    source = click.get_current_context().get_parameter_source("remote_python")
    python = sys.executable if source is click.core.ParameterSource.DEFAULT else remote_python
    try:
        return slurm_mod.nodes_for_run(bool(nodes_file), slurm, python, sys.argv[1:])
    except (slurm_mod.SlurmError, ValueError) as exc:
        raise UsageProblem(str(exc)) from None


def _tagged(wanted: list[str], tags: list[str], checks: dict[str, Any]) -> list[str]:
    """The wanted checks that carry any of the tags; a tag no check has is a usage error."""
    if not tags:
        return wanted
    from preflight.core.suggest import suggest

    known = {t for c in checks.values() for t in c.tags}
    for tag in tags:
        if tag not in known:
            raise UsageProblem(f"no check has the tag {tag!r}{suggest(tag, known)} (tags: {', '.join(sorted(known))})")
    chosen = [cid for cid in wanted if set(checks[cid].tags) & set(tags)]
    if not chosen:
        raise UsageProblem(f"no check selected has the tag{'s' if len(tags) > 1 else ''} {', '.join(tags)}")
    return chosen


def _progress(plan: Any, nodes: list[Any], to_stderr: bool = False) -> Any:
    from preflight.cli.progress import STILL_RUNNING_INTERVAL_S, Progress

    interval = float(os.environ.get("PREFLIGHT_PROGRESS_INTERVAL_S") or STILL_RUNNING_INTERVAL_S)
    total = sum(len(nodes) if c.scope.value == "node" else 1 for c in plan.checks)  # results expected
    return Progress(total, {c.id: plan.config.timeout_for(c) for c in plan.checks},
                    interactive=sys.stdout.isatty() and not os.environ.get("CI"), interval_s=interval,
                    echo=(lambda *a, **k: click.echo(*a, err=True, **k)) if to_stderr else click.echo)
