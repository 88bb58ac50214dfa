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
    """Print what the rule files alarm on, as monitoring.alarms judges them; 0 when both alarms are there."""
    from preflight.core.check import Expect
    from preflight.core.model import Status
    from preflight_checks.monitoring.alarms import MonitoringAlarms, Params
    from preflight_checks.monitoring.rule_files import RuleFileError, read_rule_files
    from preflight.reporters.safe_text import single_line

    try:
        rules = read_rule_files(paths)
    except RuleFileError as exc:
        raise UsageProblem(single_line(exc)) from None
    outcome = MonitoringAlarms().evaluate({"url": None, "nodes": [], "file_rules": rules, "rule_files": paths},
                                          Params(rule_files=paths), Expect())
    click.echo(single_line(f"{outcome.status.value}: {outcome.summary}"))  # rule names come from the files
    for fix in (outcome.remediation or []) if outcome.status is not Status.PASS else []:
        click.echo(f"  fix: {single_line(fix)}")
    return 0 if outcome.status is Status.PASS else 1
