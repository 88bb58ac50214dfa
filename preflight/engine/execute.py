"""Run one check's collect() and evaluate() and turn whatever happens into a CheckResult.

This is where exceptions become ERROR: a check never has to catch its own crash.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from typing import Any

from preflight.core.check import CannotMeasure, Check, Expect, Outcome
from preflight.core.model import CheckResult, Evidence, Status


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def execute(check: Check, ctx: Any, params: Any, expect: Expect, node: str) -> CheckResult:
    started_at = now_iso()
    start = time.monotonic()
    facts: dict[str, Any] = {}
    try:
        facts = check.collect(ctx, params)
        outcome = check.evaluate(facts, params, expect)
    except CannotMeasure as exc:
        outcome = Outcome(Status.ERROR, f"could not measure: {exc}")
    except Exception as exc:  # noqa: BLE001 - any crash in a check is that check's ERROR
        outcome = Outcome(Status.ERROR, f"crashed: {type(exc).__name__}: {exc}")
        ctx.evidence.append(Evidence(command=f"{check.id} (collect/evaluate)", output_tail=traceback.format_exc()))
    return result_from_outcome(
        check, outcome, node=node, facts=facts, evidence=list(ctx.evidence),
        duration_s=time.monotonic() - start, started_at=started_at,
    )


def result_from_outcome(
    check: type[Check] | Check,
    outcome: Outcome,
    *,
    node: str,
    facts: dict[str, Any] | None = None,
    evidence: list[Evidence] | None = None,
    duration_s: float = 0.0,
    started_at: str = "",
) -> CheckResult:
    remediation = outcome.remediation
    if remediation is None and outcome.findings:
        remediation = list(dict.fromkeys(f.fix for f in outcome.findings if f.fix and f.level is not Status.PASS))
    if remediation is None:
        # A check that states no findings (a third-party one, say) falls back to its own hints.
        remediation = [] if outcome.status in (Status.PASS, Status.SKIP) else list(check.remediation)
    return CheckResult(
        check_id=check.id,
        node=node,
        status=outcome.status,
        summary=outcome.summary,
        title=check.title,
        scope=check.scope,
        measurements=list(outcome.measurements),
        evidence=list(evidence or []),
        remediation=remediation,
        details=list(outcome.details),
        findings=list(outcome.findings),
        lead=list(outcome.lead),
        why=check.why,
        duration_s=round(duration_s, 3),
        started_at=started_at or now_iso(),
        facts=facts or {},
    )


def error_result(check: type[Check] | Check, node: str, summary: str, evidence: list[Evidence] | None = None,
                 duration_s: float = 0.0) -> CheckResult:
    """ERROR for a check that never produced a result (timeout, unreachable node, dead agent)."""
    return result_from_outcome(check, Outcome(Status.ERROR, summary), node=node, evidence=evidence,
                               duration_s=duration_s)
