"""`preflight run`: run the checks on every node and across nodes; the exit code is the verdict."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import Any

import click

from preflight.cli.options import (
    Duration, UsageProblem, check_formats, color_option, config_option, fail_on_option, finish, format_option,
    json_option, load_baseline, nonempty, out_option, profile_option, registry, set_option, split_ids,
    textfile_option, writable_dir, write_textfile,
)
from preflight.core.verdict import EXIT_CODE_HELP, EXIT_INTERRUPTED


@click.command(epilog=EXIT_CODE_HELP)
@click.option("--nodes", "nodes_file", type=click.Path(dir_okay=False), default=None,
              help="Hosts file: one node per line (user@host:port slots=N). Without it, checks this machine.")
@config_option
@profile_option
@click.option("--checks", "only", default=None, help="Comma-separated check ids to run (default: all).")
@click.option("--skip", default=None, help="Comma-separated check ids not to run.")
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
@click.option("--baseline-tolerance", type=float, default=0.1, show_default=True,
              help="Relative change of a figure that counts against the baseline (0.1 = 10%).")
@click.option("--fail-on-regression", is_flag=True,
              help="With --baseline: a regression makes the verdict NO-GO (without it, regressions are warnings).")
@click.option("--slurm", is_flag=True, help="Check the nodes of the Slurm allocation this runs in (salloc/sbatch), "
              "through job steps; their interpreter defaults to this one.")
@click.option("--drain", is_flag=True, help="With --slurm: drain each node with a blocking finding of its own.")
@click.option("--resume", is_flag=True, help="With --slurm: resume nodes preflight drained that now pass.")
@click.option("--level", type=click.Choice(["quick", "standard", "thorough"]), default=None,
              help="How much to measure: quick (probes, at most 30 s per node: a Slurm prolog), standard "
                   "(default, or [run] level in preflight.toml), thorough (larger sizes, more repeats).")
@click.option("--fail-fast", is_flag=True, help="Stop the run as soon as the verdict is NO-GO.")
@textfile_option
@json_option
@color_option
def run(nodes_file: str | None, config_file: str | None, profile: str | None, only: str | None, skip: str | None, out_dir: str | None,
        formats: str, fail_on: str | None, timeout: float | None, settings: tuple[str, ...], remote_python: str,
        ssh_options: tuple[str, ...], ssh_accept_new: bool, fanout: int, baseline_file: str | None = None,
        baseline_tolerance: float = 0.1, fail_on_regression: bool = False, slurm: bool = False,
        drain: bool = False, resume: bool = False, level: str | None = None, fail_fast: bool = False,
        tags: tuple[str, ...] = (), as_json: bool = False, textfile_dir: str | None = None) -> None:
    """Run the checks and write the reports; the exit code is the verdict."""
    from preflight.core import config as config_mod
    from preflight.run.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport

    from preflight.run import plan as plan_mod

    chosen_formats = check_formats(formats)
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
    wanted = _tagged(wanted, [t for value in tags for t in split_ids(value)], checks_found.checks)
    for check_id in [*wanted, *skipped]:
        if check_id not in checks_found.checks:
            hint = ""
            broken = [e for e in checks_found.errors if _plugin_name(e) == check_id]
            if broken and check_id in skipped:
                continue  # --skip of a plugin that failed to load: the user knows, its absence is no gap
            if broken:
                hint = f" (its plugin failed to load: {broken[0].error})"
            from preflight.core.suggest import suggest

            hint = hint or suggest(check_id, checks_found.checks)
            raise UsageProblem(f"unknown check id {check_id!r}{hint}; `preflight list` shows the known ones")
    try:
        selection = plan_mod.select(checks_found.checks, wanted, skipped, explicit=bool(split_ids(only)))
        plan_mod.prepare_params(selection.ids, checks_found.checks, config)
    except (plan_mod.PlanError, config_mod.ConfigError) as exc:
        raise UsageProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    for added, reader in selection.added.items():
        click.echo(f"preflight: also running {added}: {reader} reads what it records", err=True)
    checks = checks_found.ordered(selection.ids)

    if slurm or drain or resume:
        nodes = _slurm_nodes(nodes_file, slurm, remote_python)
    elif nodes_file:
        nodes = _nodes_from_file(nodes_file, remote_python, list(ssh_options), ssh_accept_new)
    else:
        nodes = [NodeTarget(LocalTransport())]
    out = writable_dir(out_dir)

    plan = RunPlan(checks=checks, config=config, output_dir=out, nodes=nodes, fanout=fanout,
                   command=shlex.join(["preflight", *sys.argv[1:]]),
                   load_errors=[e.to_dict() for e in checks_found.errors if _plugin_name(e) not in skipped],
                   fail_fast=fail_fast)
    progress = _progress(plan, nodes, to_stderr=as_json)
    # CI cancels jobs with SIGTERM: treat it as Ctrl-C so the partial reports are still written.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    runner = Runner(plan, on_event=progress)
    try:
        report = runner.run()
    finally:
        progress.stop()
        for node in nodes:
            close = getattr(node.transport, "close", None)
            if close:
                close()
    if baseline is not None:
        from preflight.core.compare import attach

        attach(report, baseline, baseline_tolerance, label=str(baseline_file), fail_on_regression=fail_on_regression)
    finish(report, out, chosen_formats, as_json=as_json)
    write_textfile(report, textfile_dir)
    if drain or resume:
        from preflight.integrations.slurm import apply

        for action in apply(report, drain, resume):
            click.echo(f"slurm: {action.describe()}", err=bool(action.error) or as_json)
    from preflight.core.verdict import decide

    sys.exit(EXIT_INTERRUPTED if report.interrupted else decide(report).exit_code)


def _plugin_name(error: Any) -> str:
    """The check id a plugin that failed to load would have had (its entry point's name)."""
    return error.entry_point.split(" =")[0]


def _nodes_from_file(path: str, remote_python: str, ssh_options: list[str], accept_new: bool) -> list[Any]:
    from preflight.cli.hosts import HostsFileError, load_hosts
    from preflight.run.runner import NodeTarget
    from preflight.transport.ssh import SshTransport

    try:
        hosts = without_ports(load_hosts(path))
        return [NodeTarget(SshTransport.from_host(host, python=remote_python, options=ssh_options,
                                                  accept_new=accept_new), slots=host.slots) for host in hosts]
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


