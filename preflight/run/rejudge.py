"""Re-judge a recorded run: today's evaluate() on the facts it recorded, with the given thresholds.

`preflight report RESULTS --rejudge [--profile P] [--set ID.KEY=VALUE ...] [--config F]` touches no
machine: collect() never runs, only each check's pure evaluate() on the facts kept in results.json.
A threshold changed, a profile applied, or a judging fix picked up costs no GPU time. Results that
recorded no facts (a check that crashed, timed out, or whose node was unreachable) stay as they were.
The report says it was re-judged, how, and which results changed status.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from preflight.core.check import Expect
from preflight.run.execute import now_iso, result_from_outcome
from preflight.core.model import CheckResult, RunReport, Scope, Status


def thresholds(registry: Any, report: RunReport, profile: str | None, settings: list[str],
               config_file: str | None) -> Any:
    """The Config to judge with: the profile given (else the one the run used), the config file, --set.

    Raises preflight.core.config.ConfigError for a bad profile, file or setting.
    """
    from preflight.core import config as config_mod

    chosen = report.profile if profile is None else profile
    config = config_mod.load(config_file, registry.checks, profile=chosen or None)
    config_mod.apply_cli_settings(config, settings, registry.checks)
    return config


def _expect_for(config: Any, report: RunReport, result: CheckResult) -> Expect:
    expect = Expect(**vars(config.expect))
    if result.scope is Scope.NODE:
        slots = next((n.slots for n in report.nodes if n.name == result.node), None)
        if slots is not None:
            expect.gpus_per_node = slots
    return expect


def rejudge_result(check_cls: Any, result: CheckResult, params: Any, expect: Expect) -> CheckResult:
    """One result judged again from its facts; the facts, evidence and timing are kept."""
    try:
        outcome = check_cls().evaluate(result.facts, params, expect)
    except Exception as exc:  # noqa: BLE001 - facts today's code cannot read are this result's ERROR
        from preflight.core.check import Outcome

        outcome = Outcome(Status.ERROR, f"re-judging crashed: {type(exc).__name__}: {exc}")
    fresh = result_from_outcome(check_cls, outcome, node=result.node, facts=result.facts, evidence=result.evidence,
                                duration_s=result.duration_s, started_at=result.started_at)
    return fresh


def rejudge_report(report: RunReport, registry: Any, config: Any, *, source: str, how: dict[str, Any]) -> RunReport:
    """A new RunReport: every result with facts judged again under `config`; marked as re-judged."""
    rejudged = dataclasses.replace(report, results=[], expected=list(report.expected))
    changed, kept = [], []
    for result in report.results:
        check_cls = registry.checks.get(result.check_id)
        if check_cls is None or not result.facts:
            why = "its check is not installed" if check_cls is None else "it recorded no facts"
            kept.append(f"{result.check_id} on {result.node}: kept as recorded ({why})")
            rejudged.add(result)
            continue
        fresh = rejudge_result(check_cls, result, config.params_for(check_cls), _expect_for(config, report, result))
        if fresh.status is not result.status:
            changed.append({"check_id": result.check_id, "node": result.node, "was": result.status.value,
                            "now": fresh.status.value})
        rejudged.add(fresh)
    expects = [_expect_for(config, report, r) for r in report.results if r.scope is Scope.NODE] or [config.expect]
    rejudged.expected = [cid for cid in report.planned if cid in registry.checks
                         and any(registry.checks[cid]().expected_to_run(e) for e in expects)]
    rejudged.profile = config.profile
    rejudged.profile_sources = list(config.profile_sources)
    rejudged.fail_on = config.fail_on if how.get("config") else report.fail_on
    if how.get("config"):
        rejudged.silenced = {**report.silenced, **config.silence}  # the [silence] of the --config given
    rejudged.rejudged = {"at": now_iso(), "from": source, "preflight_version": _version(),
                         "recorded_with": report.preflight_version, **how, "changed": changed, "kept": kept}
    return rejudged


def rejudge_for_cli(past: RunReport, registry: Any, results: str, out_dir: str, profile: str | None,
                    settings: list[str], config_file: str | None) -> tuple[RunReport, str]:
    """What `preflight report --rejudge` does: the re-judged report and the directory to write it to
    (<out>/rejudged when --out holds the results being revisited: the original is never overwritten)."""
    config = thresholds(registry, past, profile, settings, config_file)
    how = {"profile": config.profile, "config": config_file or "", "settings": settings}
    if Path(out_dir).resolve() == Path(results).resolve().parent:
        out_dir = str(Path(out_dir) / "rejudged")
    return rejudge_report(past, registry, config, source=results, how=how), out_dir


def _version() -> str:
    from preflight import __version__

    return __version__
