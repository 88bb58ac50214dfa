"""`preflight alerts`: Prometheus rules for the go-live alarms."""

from __future__ import annotations

from pathlib import Path

import click

from preflight.cli.options import (
    FINITE, Duration, UsageProblem, load_results,
)


@click.command("alerts")
@click.option("--out", "out_file", default="-", show_default=True, help="File to write (- for stdout).")
@click.option("--format", "fmt", type=click.Choice(["rules", "prometheus-operator"]), default="rules", show_default=True,
              help="A Prometheus rule file, or a PrometheusRule manifest for prometheus-operator.")
@click.option("--from", "from_results", type=click.Path(dir_okay=False), default=None,
              help="results.json of a run: floor and ceiling from its canary.training figures.")
@click.option("--gpu-util-floor", type=FINITE, default=None, help="Alarm below this GPU utilisation, percent (default 50).")
@click.option("--comm-latency-ceiling", type=Duration(), default=None,
              help="Alarm above this all-reduce p99: seconds or a duration (250ms; default 0.25).")
@click.option("--window", default=None, help="Averaging window of every alert, a Prometheus duration (e.g. 10m).")
@click.option("--for", "for_", default=None, help="How long a condition must hold before it fires, for every alert.")
@click.option("--name", default="preflight-go-live", show_default=True, help="PrometheusRule name.")
@click.option("--namespace", default=None, help="PrometheusRule namespace.")
@click.option("--check", "check_files", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Judge rule files (or PrometheusRule manifests) as written, before Prometheus loads them: is there "
                   "an alarm on GPU utilisation and on all-reduce latency? Exit 1 when one is missing. Repeatable.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="With prometheus-operator: a metadata label of the PrometheusRule, e.g. release=kube-prometheus-stack "
                   "for that chart's ruleSelector. Repeatable.")
def alerts_command(out_file: str, fmt: str, from_results: str | None, gpu_util_floor: float | None,
                   comm_latency_ceiling: float | None, window: str | None, for_: str | None, name: str,
                   namespace: str | None, labels: tuple[str, ...] = (), check_files: tuple[str, ...] = ()) -> None:
    """Write Prometheus alerting rules for the go-live alarms: low GPU utilisation, XID errors, high
    all-reduce latency, GPU telemetry that stopped arriving (or, with --check, judge rule files)."""
    from preflight.integrations import alerts

    if check_files:
        raise SystemExit(_check(list(check_files)))

    report = load_results(from_results).to_dict() if from_results else None
    try:
        text = alerts.build(fmt, report=report, floor_pct=gpu_util_floor, ceiling_s=comm_latency_ceiling,
                            window=window, for_=for_, name=name, namespace=namespace,
                            labels=list(labels))
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



def _check(paths: list[str]) -> int:
    """Print what the rule files alarm on, as each installed check that judges rule files
    (Check.alarm_rules) judges them, with no Prometheus to ask; 0 when every one passes."""
    import tempfile

    from preflight.core.check import CannotMeasure, Expect
    from preflight.core.model import Status
    from preflight.core.registry import discover
    from preflight.engine.context import ClusterContext
    from preflight.reporters.safe_text import single_line

    judges = [check for _, check in sorted(discover().checks.items()) if check.alarm_rules]
    if not judges:
        raise UsageProblem("--check: no installed check judges alarm rule files")
    passed = True
    for check in judges:
        params = check.params_from({check.alarm_rules: paths})
        with tempfile.TemporaryDirectory(prefix="preflight-alerts-") as scratch:
            ctx = ClusterContext(nodes=[], output_dir=Path(scratch), scratch_dir=Path(scratch), expect=Expect(),
                                 timeout_s=check.timeout_s)
            try:
                facts = check().collect(ctx, params)
            except CannotMeasure as exc:  # a file that cannot be read: the message names it
                raise UsageProblem(single_line(exc)) from None
        outcome = check().evaluate(facts, params, Expect())
        click.echo(single_line(f"{outcome.status.value}: {outcome.summary}"))  # rule names come from the files
        for fix in (outcome.remediation or []) if outcome.status is not Status.PASS else []:
            click.echo(f"  fix: {single_line(fix)}")
        passed = passed and outcome.status is Status.PASS
    return 0 if passed else 1
