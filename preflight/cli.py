"""The `preflight` command line.

Start-up stays light: nothing here imports torch or tensorflow, and check modules are only imported
when a command needs the list of checks.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import click

from preflight import __version__
from preflight.verdict import EXIT_CODE_HELP, EXIT_INTERRUPTED, EXIT_USAGE

DEFAULT_OUT = "preflight-report"


class UsageProblem(click.ClickException):
    """Bad input: exit 2 with a message that names the problem, before anything runs."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        click.echo(f"preflight: error: {self.format_message()}", err=True)


def _split_ids(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


# Options shared by `run` and `report`, defined once.
def format_option(f: Callable) -> Callable:
    return click.option("--format", "formats", default="html,md,json,junit", show_default=True,
                        help="Comma-separated report formats to write: html, md, json, junit, prometheus.")(f)


def out_option(f: Callable) -> Callable:
    return click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
                        help=f"Directory for results.jsonl and the reports; it replaces the report files an earlier "
                             f"run left there (default: a new {DEFAULT_OUT}/<UTC time>/ per run, with "
                             f"{DEFAULT_OUT}/latest pointing at it).")(f)


def fail_on_option(f: Callable) -> Callable:
    return click.option("--fail-on", type=click.Choice(["fail", "warn"]), default=None,
                        help="Lowest status that blocks the verdict (default: fail; warn makes WARN block too).")(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODE_HELP)
@click.version_option(__version__, prog_name="preflight")
def cli() -> None:
    """Is this cluster ready to train? Run readiness checks on every node and across nodes,
    and get one go/no-go verdict with a report an engineer can act on."""


def _registry() -> Any:
    from preflight.registry import discover

    return discover()


def _check_formats(formats: str) -> list[str]:
    from preflight.reporters import FORMATS

    chosen = _split_ids(formats)
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown:
        raise UsageProblem(f"unknown report format {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    return chosen


def _writable_dir(path: str | None, keep: Path | None = None) -> Path:
    """The run's own directory (see preflight/outdir.py): a new one per run without --out."""
    from preflight.outdir import OutputDirError, run_directory

    if path is not None:
        _nonempty("--out", path)
    if path == "-":
        raise UsageProblem("--out - prints one report and is for `preflight report`; a run writes a directory")
    try:
        return run_directory(path or DEFAULT_OUT, per_run=path is None, keep=keep)
    except OutputDirError as exc:
        raise UsageProblem(str(exc)) from None


@cli.command(epilog=EXIT_CODE_HELP)
@click.option("--nodes", "nodes_file", type=click.Path(dir_okay=False), default=None,
              help="Hosts file: one node per line (user@host:port slots=N). Without it, checks this machine.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="preflight.toml with expectations and per-check parameters.")
@click.option("--profile", default=None, metavar="NAME|FILE",
              help="Thresholds for a node type (h100-8x, h200-8x, a100-8x) or a profile TOML of your own; "
                   "the config file and --set override it.")
@click.option("--checks", "only", default=None, help="Comma-separated check ids to run (default: all).")
@click.option("--skip", default=None, help="Comma-separated check ids not to run.")
@out_option
@format_option
@fail_on_option
@click.option("--timeout", type=float, default=None, help="Per-check timeout in seconds (overrides the config).")
@click.option("--set", "settings", multiple=True, metavar="ID.KEY=VALUE",
              help="Override a check parameter or expectation, e.g. --set net.bandwidth.min_gbps=100.")
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
def run(nodes_file: str | None, config_file: str | None, profile: str | None, only: str | None, skip: str | None, out_dir: str | None,
        formats: str, fail_on: str | None, timeout: float | None, settings: tuple[str, ...], remote_python: str,
        ssh_options: tuple[str, ...], ssh_accept_new: bool, fanout: int, baseline_file: str | None = None,
        baseline_tolerance: float = 0.1, fail_on_regression: bool = False, slurm: bool = False,
        drain: bool = False, resume: bool = False, level: str | None = None, fail_fast: bool = False) -> None:
    """Run the checks and write the reports; the exit code is the verdict."""
    from preflight import config as config_mod
    from preflight.runner import NodeTarget, RunPlan, Runner
    from preflight.transport import LocalTransport

    from preflight import plan as plan_mod

    chosen_formats = _check_formats(formats)
    if only is not None:
        _nonempty("--checks", only)
    baseline = _load_baseline(baseline_file, baseline_tolerance, fail_on_regression)
    registry = _registry()
    try:
        config = config_mod.load(config_file, registry.checks, profile=profile)
        config_mod.apply_cli_settings(config, list(settings), registry.checks)
        config_mod.validate(config, registry.checks)
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

    wanted = _split_ids(only) or sorted(registry.checks)
    skipped = set(_split_ids(skip))
    for check_id in [*wanted, *skipped]:
        if check_id not in registry.checks:
            hint = ""
            broken = [e for e in registry.errors if _plugin_name(e) == check_id]
            if broken and check_id in skipped:
                continue  # --skip of a plugin that failed to load: the user knows, its absence is no gap
            if broken:
                hint = f" (its plugin failed to load: {broken[0].error})"
            raise UsageProblem(f"unknown check id {check_id!r}{hint}; `preflight list` shows the known ones")
    try:
        selection = plan_mod.select(registry.checks, wanted, skipped, explicit=bool(_split_ids(only)))
        plan_mod.prepare_params(selection.ids, registry.checks, config)
    except (plan_mod.PlanError, config_mod.ConfigError) as exc:
        raise UsageProblem(str(exc)) from None
    config.pulled_in = dict(selection.added)
    for added, reader in selection.added.items():
        click.echo(f"preflight: also running {added}: {reader} reads what it records", err=True)
    checks = registry.ordered(selection.ids)

    if slurm or drain or resume:
        nodes = _slurm_nodes(nodes_file, slurm, remote_python)
    elif nodes_file:
        nodes = _nodes_from_file(nodes_file, remote_python, list(ssh_options), ssh_accept_new)
    else:
        nodes = [NodeTarget(LocalTransport())]
    out = _writable_dir(out_dir)

    plan = RunPlan(checks=checks, config=config, output_dir=out, nodes=nodes, fanout=fanout,
                   command=shlex.join(["preflight", *sys.argv[1:]]),
                   load_errors=[e.to_dict() for e in registry.errors if _plugin_name(e) not in skipped],
                   fail_fast=fail_fast)
    progress = _progress(plan, nodes)
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
        from preflight.diff import attach

        attach(report, baseline, baseline_tolerance, label=str(baseline_file), fail_on_regression=fail_on_regression)
    _finish(report, out, chosen_formats)
    if drain or resume:
        from preflight.slurm import apply

        for action in apply(report, drain, resume):
            click.echo(f"slurm: {action.describe()}", err=bool(action.error))
    from preflight.verdict import decide

    sys.exit(EXIT_INTERRUPTED if report.interrupted else decide(report).exit_code)


def _plugin_name(error: Any) -> str:
    """The check id a plugin that failed to load would have had (its entry point's name)."""
    return error.entry_point.split(" =")[0]


def _nonempty(flag: str, value: str) -> None:
    if not value.strip() or (flag == "--checks" and not _split_ids(value)):
        raise UsageProblem(f"{flag} is empty; give {'a directory' if flag == '--out' else 'check ids'} or leave "
                           f"{flag} out")


def _nodes_from_file(path: str, remote_python: str, ssh_options: list[str], accept_new: bool) -> list[Any]:
    from preflight.hosts import HostsFileError, load_hosts
    from preflight.runner import NodeTarget
    from preflight.transport.ssh import SshTransport

    try:
        hosts = load_hosts(path)
        return [NodeTarget(SshTransport.from_host(host, python=remote_python, options=ssh_options,
                                                  accept_new=accept_new), slots=host.slots) for host in hosts]
    except HostsFileError as exc:
        raise UsageProblem(str(exc)) from None
    except ValueError as exc:  # an --ssh-option that is not Key=Value
        raise UsageProblem(str(exc)) from None


def _slurm_nodes(nodes_file: str | None, slurm: bool, remote_python: str) -> list[Any]:
    from preflight import slurm as slurm_mod

    source = click.get_current_context().get_parameter_source("remote_python")
    python = sys.executable if source is click.core.ParameterSource.DEFAULT else remote_python
    try:
        return slurm_mod.nodes_for_run(bool(nodes_file), slurm, python, sys.argv[1:])
    except (slurm_mod.SlurmError, ValueError) as exc:
        raise UsageProblem(str(exc)) from None


def _progress(plan: Any, nodes: list[Any]) -> Any:
    from preflight.progress import STILL_RUNNING_INTERVAL_S, Progress

    interval = float(os.environ.get("PREFLIGHT_PROGRESS_INTERVAL_S") or STILL_RUNNING_INTERVAL_S)
    total = sum(len(nodes) if c.scope.value == "node" else 1 for c in plan.checks)  # results expected
    return Progress(total, {c.id: plan.config.timeout_for(c) for c in plan.checks},
                    interactive=sys.stdout.isatty() and not os.environ.get("CI"), interval_s=interval,
                    echo=click.echo)


def _finish(report: Any, out: Path, formats: list[str], announce: bool = True) -> None:
    from preflight.reporters import FORMATS, renderer
    from preflight.reporters.terminal import render as render_terminal

    written = []
    for fmt in formats:
        name = FORMATS[fmt][0]
        (out / name).write_text(renderer(fmt)(report), encoding="utf-8")
        written.append(out / name)
    if announce:
        click.echo("")
        click.echo(render_terminal(report), nl=False)
        click.echo("Reports: " + ", ".join(str(p) for p in written))
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(renderer("md")(report) + "\n")
        except OSError as exc:
            click.echo(f"preflight: warning: cannot append to GITHUB_STEP_SUMMARY: {exc}", err=True)


@cli.command()
@click.argument("results", type=click.Path(dir_okay=False))
@out_option
@format_option
@fail_on_option
@click.option("--rejudge", is_flag=True, help="Judge the recorded facts again with today's code and the thresholds "
              "below (the run's own profile unless --profile is given), touching no machine; written to "
              "<out>/rejudged/ when --out holds RESULTS.")
@click.option("--profile", default=None, metavar="NAME|FILE", help="With --rejudge: thresholds of this profile.")
@click.option("--set", "settings", multiple=True, metavar="ID.KEY=VALUE", help="With --rejudge: override a parameter.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="With --rejudge: a preflight.toml to judge with.")
def report(results: str, out_dir: str | None, formats: str, fail_on: str | None, rejudge: bool = False,
           profile: str | None = None, settings: tuple[str, ...] = (), config_file: str | None = None) -> None:
    """Re-render the reports of a past run from its results.json (or results.jsonl) without re-running.

    `--out -` prints the one report asked for to standard output (e.g. `--format md --out -` for a
    pull-request comment)."""
    from preflight.verdict import decide

    chosen = _check_formats(formats)
    if out_dir is not None:
        _nonempty("--out", out_dir)
    if out_dir == "-" and len(chosen) != 1:
        raise UsageProblem("--out - prints one report: choose one with --format (md, html, json or junit)")
    past = _load_results(results)
    if rejudge:
        from preflight.config import ConfigError
        from preflight.rejudge import rejudge_for_cli

        try:
            past, rejudged_out = rejudge_for_cli(past, _registry(), results, out_dir or DEFAULT_OUT, profile,
                                                 list(settings), config_file)
            out_dir = rejudged_out if out_dir is not None else None  # without --out: a new directory anyway
        except ConfigError as exc:
            raise UsageProblem(str(exc)) from None
    elif profile is not None or settings or config_file:
        raise UsageProblem("--profile, --set and --config apply to `report` only with --rejudge")
    if fail_on:
        past.fail_on = fail_on
    if out_dir == "-":
        from preflight.reporters import renderer

        click.echo(renderer(chosen[0])(past), nl=False)
        sys.exit(decide(past).exit_code)
    out = _writable_dir(out_dir, keep=Path(results))  # the results re-rendered are the same run's: kept
    _finish(past, out, chosen)
    sys.exit(decide(past).exit_code)


def _load_results(path: str) -> Any:
    import json

    from preflight.model import RunReport

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if path.endswith(".jsonl"):
            from preflight.plan import read_results_jsonl

            rebuilt, notes = read_results_jsonl(text, path, __version__)
            for note in notes:
                click.echo(f"preflight: note: {note}", err=True)
            return rebuilt
        return RunReport.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageProblem(f"{path} is not a preflight results file: {exc}") from None


def _load_baseline(path: str | None, tolerance: float, fail_on_regression: bool) -> Any:
    if path is None:
        if fail_on_regression:
            raise UsageProblem("--fail-on-regression needs --baseline FILE")
        return None
    if not tolerance >= 0:
        raise UsageProblem("--baseline-tolerance must be zero or more")
    return _load_results(path)


@cli.command("diff")
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--tolerance", type=float, default=0.1, show_default=True,
              help="Relative change of a figure that counts as a regression (0.1 = 10%).")
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text", show_default=True)
@click.option("--ignore-versions", is_flag=True,
              help="List software version changes without counting them as regressions.")
def diff_runs(old: str, new: str, tolerance: float, fmt: str, ignore_versions: bool) -> None:
    """Compare two runs, OLD (known-good) and NEW: status changes, figures that got worse by more
    than the tolerance, and changed software versions.

    Exit codes: 0 no regression, 1 a regression, 2 bad input (a file that is not a results.json)."""
    from preflight import diff
    from preflight.reporters import baseline as words

    if not tolerance >= 0:
        raise UsageProblem("--tolerance must be zero or more")
    comparison = diff.compare(_load_results(old), _load_results(new), tolerance, old_label=old,
                              versions_regress=not ignore_versions)
    render = {"text": words.render_text, "md": words.render_markdown, "json": words.render_json}[fmt]
    click.echo(render(comparison), nl=False)
    sys.exit(comparison.exit_code)


@cli.command("alerts")
@click.option("--out", "out_file", default="-", show_default=True, help="File to write (- for stdout).")
@click.option("--format", "fmt", type=click.Choice(["rules", "prometheus-operator"]), default="rules", show_default=True,
              help="A Prometheus rule file, or a PrometheusRule manifest for prometheus-operator.")
@click.option("--from", "from_results", type=click.Path(dir_okay=False), default=None,
              help="results.json of a run: floor and ceiling from its canary.training figures.")
@click.option("--gpu-util-floor", type=float, default=None, help="Alarm below this GPU utilisation, percent (default 50).")
@click.option("--comm-latency-ceiling", type=float, default=None, help="Alarm above this all-reduce p99, seconds (default 0.25).")
@click.option("--window", default=None, help="Averaging window of every alert, a Prometheus duration (e.g. 10m).")
@click.option("--for", "for_", default=None, help="How long a condition must hold before it fires, for every alert.")
@click.option("--name", default="preflight-go-live", show_default=True, help="PrometheusRule name.")
@click.option("--namespace", default=None, help="PrometheusRule namespace.")
def alerts_command(out_file: str, fmt: str, from_results: str | None, gpu_util_floor: float | None,
                   comm_latency_ceiling: float | None, window: str | None, for_: str | None, name: str,
                   namespace: str | None) -> None:
    """Write Prometheus alerting rules for the go-live alarms: low GPU utilisation, XID errors, high
    all-reduce latency, GPU telemetry that stopped arriving."""
    from preflight import alerts

    report = _load_results(from_results).to_dict() if from_results else None
    try:
        text = alerts.build(fmt, report=report, floor_pct=gpu_util_floor, ceiling_s=comm_latency_ceiling,
                            window=window, for_=for_, name=name, namespace=namespace)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    if out_file == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(out_file).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot write {out_file}: {exc.strerror or exc}") from None
    click.echo(f"wrote {out_file}", err=True)


from preflight.cli_catalog import explain, init, list_checks  # noqa: E402 - registered after the group exists
from preflight.healthcheck import healthcheck  # noqa: E402

for _command in (list_checks, explain, init, healthcheck):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="preflight")
