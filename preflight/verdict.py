"""The verdict: a pure function of the run report.

GO          no check is FAIL or ERROR (nor WARN with fail_on="warn"), and no expected check SKIPped.
NO-GO       something measured not ready, could not be measured, or an expected check was skipped.
INCOMPLETE  nothing blocks, but the run did not finish (interrupted, results missing): no verdict.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from preflight.diff import comparison_results
from preflight.model import CLUSTER_NODE, CheckResult, RunReport, Status


class Verdict(str, enum.Enum):
    GO = "GO"
    NO_GO = "NO-GO"
    INCOMPLETE = "INCOMPLETE"


EXIT_CODES = {Verdict.GO: 0, Verdict.NO_GO: 1, Verdict.INCOMPLETE: 3}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

EXIT_CODE_HELP = (
    "Exit codes: 0 GO (ready to train), 1 NO-GO (a check failed, could not measure, or an expected check "
    "was skipped), 2 usage or configuration error (nothing ran), 3 INCOMPLETE (no verdict could be "
    "reached), 130 interrupted (reports hold what finished)."
)


@dataclass
class Decision:
    verdict: Verdict
    blocking: list[CheckResult] = field(default_factory=list)  # worst first
    skipped_expected: list[CheckResult] = field(default_factory=list)
    skipped: list[CheckResult] = field(default_factory=list)  # every SKIP, with its reason in the summary
    warnings: list[CheckResult] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (check id, node) planned, no result
    reason: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def decide(report: RunReport) -> Decision:
    blocking_statuses = {Status.FAIL, Status.ERROR}
    if report.fail_on == "warn":
        blocking_statuses.add(Status.WARN)

    expected = set(report.expected)
    results = [*report.results, *comparison_results(report)]  # the baseline comparison weighs like a result
    skipped = [r for r in results if r.status is Status.SKIP]
    skipped_expected = [r for r in skipped if r.check_id in expected]
    blocking = [r for r in results if r.status in blocking_statuses] + skipped_expected
    blocking.sort(key=lambda r: (-r.status.severity if r.status is not Status.SKIP else -2.5, r.check_id, r.node))
    warnings = [r for r in results if r.status is Status.WARN and r not in blocking]
    missing = _missing(report)

    if blocking:
        verdict = Verdict.NO_GO
        reason = f"{len(blocking)} blocking finding{'s' if len(blocking) != 1 else ''}"
    elif report.incomplete or missing or not report.results:
        verdict = Verdict.INCOMPLETE
        reason = report.incomplete_reason or (
            "no check produced a result" if not report.results else f"{len(missing)} planned results missing")
    else:
        verdict = Verdict.GO
        reason = "every check passed" if not warnings else f"no blocking findings ({len(warnings)} warning{'s' if len(warnings) != 1 else ''})"
    return Decision(verdict, blocking, skipped_expected, skipped, warnings, missing, reason)


def _missing(report: RunReport) -> list[tuple[str, str]]:
    have = {r.key for r in report.results}
    missing = []
    for check_id in report.planned:
        nodes = [CLUSTER_NODE] if check_id in report.cluster_checks else report.node_names
        missing += [(check_id, node) for node in nodes if (check_id, node) not in have]
    return missing
