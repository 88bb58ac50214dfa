"""Re-judge a recorded run: today's evaluate() on the facts it recorded, with the given thresholds.

`preflight report RESULTS --rejudge [--profile P] [--set ID.KEY=VALUE ...] [--config F]` touches no
machine: collect() never runs, only each check's pure evaluate() on the facts kept in results.json.
A threshold changed, a profile applied, or a judging fix picked up costs no GPU time. Results that
recorded no facts (a check that crashed, timed out, or whose node was unreachable), and results
whose facts held NaN or infinity (written as null), stay as they were.

It starts from everything the run was judged with (preflight/run/judging.py: its parameters, --set
values, config file, expectations, level, profile and fail_on), and the options given to --rejudge
override that on top. The report says it was re-judged, with what, where each value came from
(`rejudged.sources`), and which results changed status.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from preflight.core.check import Expect
from preflight.core.finite import facts_lost_values
from preflight.run.judging import rejudge_config
from preflight.engine.execute import now_iso, result_from_outcome
from preflight.engine.head import record_declarations
from preflight.run.shape import answer_again
from preflight.core.model import CheckResult, RunReport, Scope, Status


def thresholds(registry: Any, report: RunReport, profile: str | None, settings: list[str],
               config_file: str | None) -> Any:
    """The Config to judge with: what the run recorded, then the profile, config file and --set given.

    Raises preflight.core.config.ConfigError for a bad profile, file or setting.
    """
    return rejudge_config(registry, report, profile, settings, config_file)[0]


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
        if check_cls is None or not result.facts or facts_lost_values(result):
            why = ("its check is not installed" if check_cls is None else "it recorded no facts" if not result.facts
                   else "its facts held NaN or infinity, written as null")
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
    rejudged.expect = config.expect.to_dict()
    rejudged.level = config.level
    rejudged.judged_with = {**(report.judged_with or {}), "params": dict(config.params),
                            "expect": config.expect.to_dict(), "profile": config.profile,
                            "sources": dict(how.get("sources") or (report.judged_with or {}).get("sources") or {})}
    # Today's checks judge, so today's declarations (roles, headlines, alarm figures) apply.
    known = [registry.checks[cid] for cid in report.check_ids if cid in registry.checks]
    needs = dict(report.needs)
    record_declarations(rejudged, known)
    rejudged.needs = {**needs, **rejudged.needs}
    rejudged.profile = config.profile
    rejudged.profile_sources = list(config.profile_sources)
    rejudged.fail_on = config.fail_on if how.get("config") else report.fail_on
    if how.get("config"):
        rejudged.silenced = {**report.silenced, **config.silence}  # the [silence] of the --config given
    answer_again(rejudged)  # run --shape: the subset from the re-judged results
    rejudged.rejudged = {"at": now_iso(), "from": source, "preflight_version": _version(),
                         "recorded_with": report.preflight_version, **how, "changed": changed, "kept": kept}
    return rejudged


def rejudge_for_cli(past: RunReport, registry: Any, results: str, out_dir: str, profile: str | None,
                    settings: list[str], config_file: str | None) -> tuple[RunReport, str]:
    """What `preflight report --rejudge` does: the re-judged report and the directory to write it to
    (<out>/rejudged when --out holds the results being revisited: the original is never overwritten)."""
    config, sources = rejudge_config(registry, past, profile, settings, config_file)
    how = {"profile": config.profile, "config": config_file or "", "settings": settings, "sources": sources,
           "level": config.level, "fail_on": config.fail_on}
    if Path(out_dir).resolve() == Path(results).resolve().parent:
        out_dir = str(Path(out_dir) / "rejudged")
    return rejudge_report(past, registry, config, source=results, how=how), out_dir


def _version() -> str:
    from preflight import __version__

    return __version__
