"""The verdict: a pure function of the run report.

GO          something was measured, nothing blocks, and every planned result is there.
NO-GO       something measured not ready, could not be measured, a check that had to run skipped, or
            the run does not meet its expectations (fewer nodes than expect.nodes, GPU nodes measured
            without their GPUs: preflight.core.expectations).
INCOMPLETE  nothing blocks, but no verdict can be reached: the run did not finish, planned results
            are missing, a check plugin failed to load, or no check measured anything.

A SKIP blocks when the run says the check had to measure here:
- the configuration expects it (`report.expected`: expect.gpus_per_node, expect.nodes, ...);
- `--profile` or `expect.gpus_per_node` is set and the check needs a GPU or a framework
  (`report.needs`), on a node;
- the node has NVIDIA GPUs on its PCI bus (the facts of the check whose role is "inventory",
  `report.roles`) and the check needs a GPU: "no driver" there is a broken GPU node, not a CPU node.
A SKIP whose findings all end in NOT_APPLICABLE ("one GPU only: nothing to scale across") states
that the check does not apply to this node's shape, and never blocks through these inferences. A
SKIP because the run level leaves the check out (--level quick) never blocks.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any

from preflight.core.check import NEEDS_FRAMEWORK, NEEDS_GPU, ROLE_INVENTORY
from preflight.core.compare import comparison_results
from preflight.core.expectations import expectation_results
from preflight.core.findings import (
    Found, count_folded, figure_shape, findings_of, is_transport, merge_figures,
)
from preflight.core.levels import SKIPPED_AT_LEVEL
from preflight.core.node_causes import NODES_CHECK, fold_node_causes
from preflight.core.nodeset import fold
from preflight.core.subset import is_partial, sentence
from preflight.core.model import CLUSTER_NODE, NOT_APPLICABLE, CheckResult, Finding, RunReport, Scope, Status


class Verdict(str, enum.Enum):
    GO = "GO"
    NO_GO = "NO-GO"
    INCOMPLETE = "INCOMPLETE"


EXIT_CODES = {Verdict.GO: 0, Verdict.NO_GO: 1, Verdict.INCOMPLETE: 3}
EXIT_USAGE = 2
# `run --shape`: not every node is ready (or not every node fits the shape), but a subset in the shape
# is: its own code, so that a gate testing for 0 never reads it as a GO on every node.
EXIT_SUBSET_GO = 4
EXIT_INTERRUPTED = 130

EXIT_CODE_HELP = (
    "Exit codes: 0 GO (ready to train, as far as was measured), 1 NO-GO (a check failed, could not measure, "
    "or a check that had to run was skipped), 2 usage or configuration error (nothing ran), "
    "3 INCOMPLETE (no verdict: results missing, a plugin not loaded, or nothing measured), "
    "4 with --shape: GO on a subset of the nodes only (the reports name the nodes to exclude), "
    "130 interrupted (reports hold what finished)."
)

# What a check needs to measure anything (`report.needs`, per check id: NEEDS_GPU, NEEDS_FRAMEWORK)
# is declared in preflight.core.check; the suffix of a SKIP finding that says the check does not apply
# to a node of this shape (NOT_APPLICABLE) in preflight.core.model.
MEASURED = (Status.PASS, Status.WARN, Status.FAIL)


@dataclass
class Decision:
    verdict: Verdict
    blocking: list[CheckResult] = field(default_factory=list)  # worst first
    skipped_expected: list[CheckResult] = field(default_factory=list)  # SKIPs that block
    skipped: list[CheckResult] = field(default_factory=list)  # every SKIP, with its reason in the summary
    warnings: list[CheckResult] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (check id, node) planned, no result
    reason: str = ""
    measured: int = 0  # checks with at least one result that measured (PASS, WARN or FAIL)
    total: int = 0  # checks planned or reported
    interrupted: bool = False  # stopped by SIGINT or SIGTERM: the exit code is 130, whatever the verdict
    # The same run read per finding (preflight.core.findings): what every report lists.
    blocking_findings: list[Found] = field(default_factory=list)  # headline ones first, then worst first
    warning_findings: list[Found] = field(default_factory=list)  # WARN findings that do not block, in any check
    skipped_findings: list[Found] = field(default_factory=list)  # what was not measured, and why
    acknowledged_findings: list[Found] = field(default_factory=list)  # silenced in [silence]: shown, never blocking
    no_gpu: bool = False  # the inventory found no NVIDIA GPU on any node and nothing says there should be one
    subset: dict[str, Any] | None = None  # the run's answer for a job's shape (RunReport.subset), when asked
    derived: list[CheckResult] = field(default_factory=list)  # derived_results(report), as weighed here

    @property
    def subset_go(self) -> bool:
        """A GO on a subset of the nodes only: the shape's answer leaves nodes out and keeps some."""
        return not self.interrupted and is_partial(self.subset)

    @property
    def subset_text(self) -> str:
        """'GO on 1,016 of 1,024 nodes (shape ...): exclude these 8: ...', or why no subset fits; ""
        when no shape was asked for."""
        return "" if self.subset is None else sentence(self.subset)

    @property
    def exit_code(self) -> int:
        """The one exit code of this verdict: every command and every report file takes it from here."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_SUBSET_GO if self.subset_go else EXIT_CODES[self.verdict]

    @property
    def measured_text(self) -> str:
        """'3 of 12 checks measured', for every report's headline."""
        return f"{self.measured} of {self.total} check{'s' if self.total != 1 else ''} measured"


def measured_counts(report: RunReport) -> tuple[int, int]:
    """(checks that measured something on at least one node, checks in the run).

    A check that ran only because an asked-for check reads it (`report.pulled_in`) is not counted:
    the inventory check measuring does not make a run of one GPU check on a node without GPUs GO.
    """
    ids = counted_ids(report)
    measured = {r.check_id for r in report.results if r.status in MEASURED}
    return sum(1 for cid in ids if cid in measured), len(ids)


def counted_ids(report: RunReport) -> list[str]:
    """The checks every count of a report counts: those asked for (not those pulled in to be read)."""
    return [cid for cid in report.check_ids if cid not in report.pulled_in] or report.check_ids


def check_counts(report: RunReport) -> dict[str, int]:
    """How many checks (counted_ids) ended how: a check that measured anywhere counts by its worst
    measured result (FAIL, WARN, PASS), one that measured nowhere as ERROR if any result of it (or
    none at all) is, else SKIP. They add up to measured_counts' total, PASS + WARN + FAIL to its measured."""
    by_check: dict[str, set[Status]] = {}
    for r in report.results:
        by_check.setdefault(r.check_id, set()).add(r.status)
    counts = {s.value: 0 for s in Status}
    for cid in counted_ids(report):
        statuses = by_check.get(cid, {Status.ERROR})
        measured = statuses & set(MEASURED)
        if measured:
            counts[max(measured, key=lambda s: s.severity).value] += 1
        else:
            counts[(Status.ERROR if Status.ERROR in statuses else Status.SKIP).value] += 1
    return counts


def gpu_nodes(report: RunReport) -> set[str]:
    """Nodes whose PCI bus shows NVIDIA GPUs (display or 3D controllers), per the facts of the checks
    whose declared role (`report.roles`) is the inventory."""
    inventory = {cid for cid, role in report.roles.items() if role == ROLE_INVENTORY}
    return {r.node for r in report.results if r.check_id in inventory and (r.facts or {}).get("nvidia_gpus")}


def no_gpu_found(report: RunReport) -> bool:
    """True when the inventory check's facts show no NVIDIA GPU on any node it ran on, and neither a
    profile nor expect.gpus_per_node says the nodes have some: a GO here is a GO for CPU training."""
    if report.profile or (report.expect or {}).get("gpus_per_node"):
        return False
    inventory = {cid for cid, role in report.roles.items() if role == ROLE_INVENTORY}
    facts = [r.facts or {} for r in report.results if r.check_id in inventory and r.scope is Scope.NODE]
    return bool(facts) and all(isinstance(f.get("nvidia_gpus"), list) and not f["nvidia_gpus"] for f in facts)


def pulled_in_text(check_id: str, pulled_in: dict[str, str]) -> str:
    """'versions.pinned ran only because versions.consistency reads it', or "" for a check asked for."""
    reader = pulled_in.get(check_id)
    return f"{check_id} ran only because {reader} reads it" if reader else ""


def skip_blocks(result: CheckResult, report: RunReport, with_gpus: set[str] | None = None,
                slots: dict[str, int | None] | None = None) -> str:
    """Why this SKIP blocks the verdict, or "" when it does not. `with_gpus` (gpu_nodes) and
    `slots` (node name -> slots) may be given when many results are asked about at once."""
    if result.status is not Status.SKIP:
        return ""
    if result.findings and all(f.id.endswith(SKIPPED_AT_LEVEL) for f in result.findings):
        return ""  # the run level (--level quick) leaves it out on purpose
    if result.check_id in report.expected:
        return "the configuration expects it to run"
    if result.findings and all(f.id.endswith(NOT_APPLICABLE) for f in result.findings if f.level is Status.SKIP):
        return ""
    if result.scope is not Scope.NODE:
        return ""  # cross-node checks are expected through expect.nodes (told apart by scope: a host may be
        # called "cluster" too)
    needs = set(report.needs.get(result.check_id, []))
    with_gpus = gpu_nodes(report) if with_gpus is None else with_gpus
    if NEEDS_GPU in needs and result.node in with_gpus:
        return f"{result.node} has NVIDIA GPUs on its PCI bus"
    if needs & {NEEDS_GPU, NEEDS_FRAMEWORK}:
        if report.profile:
            return f"the profile {report.profile} describes GPU nodes"
        if slots is None:
            node_slots = next((n.slots for n in report.nodes if n.name == result.node), None)
        else:
            node_slots = slots.get(result.node)
        if (report.expect or {}).get("gpus_per_node") or node_slots:
            return "the configuration says this node has GPUs"
    return ""


def _load_error_text(errors: list[dict[str, Any]]) -> str:
    names = ", ".join(f"{e.get('entry_point', '?').split(' =')[0]} ({e.get('distribution', '?')})" for e in errors)
    return (f"check plugin{'s' if len(errors) != 1 else ''} failed to load: {names}; "
            f"{'their' if len(errors) != 1 else 'its'} checks did not run")


def _first_blocking(found: Found, headlines: list[str]) -> tuple:
    """Sort key: the declared headline findings (`report.headlines`) first, then FAIL, ERROR, blocking
    SKIP, then by check and node."""
    headline = headlines.index(found.id) if found.id in headlines else len(headlines)
    rank = {Status.FAIL: 0, Status.ERROR: 1, Status.SKIP: 2, Status.WARN: 3}.get(found.level, 4)
    return (headline, rank, found.result.check_id, found.node)


def where_text(nodes: list[str | None]) -> str:
    """'on gpu02', 'on gpu[01-03]', or 'across the cluster' for a cluster check's own result (None: a
    host may be called "cluster", so the name never says it)."""
    named = [n for n in nodes if n is not None]
    return f"on {fold(named)}" if named else "across the cluster"


def blocking_text(found: list[Found], shown: int = 2, pulled_in: dict[str, str] | None = None) -> str:
    """'2 blocking findings: SENTENCE (on gpu02); SENTENCE (across the cluster)': what blocks, in the
    checks' own words, the first `shown` of them; one sentence found on several nodes is named once.
    A warning of a check run only because another reads it (`pulled_in`) says so."""
    sentences: dict[str, list[str | None]] = {}  # by figure_shape: findings a few percent apart are one
    said: dict[str, list[str]] = {}
    whose: dict[str, str] = {}
    distinct = count_folded(found)  # as the reports list them
    for f in found:
        # A cluster check's own result is told by its scope (a host may be called "cluster" too).
        own = f.result.scope is Scope.CLUSTER and f.node == CLUSTER_NODE
        shape = figure_shape(f.finding.message)
        sentences.setdefault(shape, []).append(None if own else f.node)
        said.setdefault(shape, []).append(f.finding.message)
        if f.level is Status.WARN and pulled_in_text(f.result.check_id, pulled_in or {}):
            whose[shape] = "; " + pulled_in_text(f.result.check_id, pulled_in or {})
    # A node-level cause names its node set in its sentence already (preflight.core.node_causes).
    named = {figure_shape(f.finding.message) for f in found if f.result.check_id == NODES_CHECK}
    parts = [(merge_figures(said[shape]) if shape in named
              else f"{merge_figures(said[shape])} ({where_text(nodes)}" + whose.get(shape, "") + ")")
             for shape, nodes in list(sentences.items())[:shown]]
    more = len(sentences) - len(parts)
    n = distinct
    return (f"{n} blocking finding{'s' if n != 1 else ''}: " + "; ".join(parts)
            + (f"; and {more} more" if more else ""))


SILENCE_CHECK = "preflight.silence"


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text[:10])
    except ValueError:
        return False
    return len(text) == 10 or text[10] in "T "


def active_silences(report: RunReport) -> tuple[dict[str, dict[str, str]], list[CheckResult]]:
    """The silences in force on the day the run started, and one WARN result per silence past its date.

    An expired silence silences nothing and says so: what it hid counts again, and a warning names it."""
    day = (report.started_at or "")[:10]
    active, expired = {}, []
    for finding_id, silence in sorted((report.silenced or {}).items()):
        until = str(silence.get("until") or "")
        if until and not _is_date(until):
            message = (f"the silence of {finding_id} has an end date that is not a date ({until!r}): it silences "
                       "nothing")
        elif until and day and until[:10] < day:
            message = (f"the silence of {finding_id} expired on {until} ({silence.get('reason', '')}): it counts "
                       "again")
        else:
            message = ""
        if message:
            expired.append(CheckResult(
                SILENCE_CHECK, CLUSTER_NODE, Status.WARN, message, title="Silenced findings", scope=Scope.CLUSTER,
                findings=[Finding(f"{SILENCE_CHECK}.expired", Status.WARN, message,
                                  f"Fix what {finding_id} found, or set a later `until` for it under [silence] in "
                                  "preflight.toml.")]))
        else:
            active[finding_id] = silence
    return active, expired


def is_silenced(finding: Finding, silences: dict[str, dict[str, str]]) -> bool:
    """The one rule of what a silence covers, which the verdict, the exit code, drain, cordon, the
    healthcheck and the subset all read (preflight.core.blame): a finding whose id is silenced, unless it
    says that nothing was measured (an ERROR: could not measure, crashed; a transport's: unreachable,
    timed out), which no silence covers."""
    return finding.id in silences and finding.level is not Status.ERROR and not is_transport(finding.id)


def derived_results(report: RunReport) -> list[CheckResult]:
    """What the verdict weighs besides the checks' results, never stored in report.results: the
    comparison with a baseline, and the expectations the run does not meet (preflight.core.expectations).
    Every reporter that lists results lists these too."""
    return [*comparison_results(report), *expectation_results(report)]


@dataclass
class _Sorted:
    """The findings of one run, sorted by what they do to the verdict."""
    blocking: list[Found] = field(default_factory=list)
    warning: list[Found] = field(default_factory=list)
    skipped: list[Found] = field(default_factory=list)
    acknowledged: list[Found] = field(default_factory=list)


def decide(report: RunReport) -> Decision:
    with_gpus = gpu_nodes(report)
    derived = derived_results(report)
    results = [*report.results, *derived]
    skipped = [r for r in report.results if r.status is Status.SKIP]
    slots: dict[str, int | None] = {}
    for node in report.nodes:
        slots.setdefault(node.name, node.slots)  # the first of a name, as a search from the front finds
    skip_reasons = {id(r): skip_blocks(r, report, with_gpus, slots) for r in skipped}
    skipped_expected = [r for r in skipped if skip_reasons[id(r)]]
    silences, expired = active_silences(report)
    found = _sort_findings(report, [*results, *expired], silences, skip_reasons)
    headlines = list(report.headlines or [])
    blocked = {id(f.result) for f in found.blocking}
    found.blocking = fold_node_causes(found.blocking, report)  # one cause, one finding (its node set)
    found.blocking.sort(key=lambda f: _first_blocking(f, headlines))
    results += expired
    blocking = [r for r in results if id(r) in blocked]
    blocking.sort(key=lambda r: (-r.status.severity if r.status is not Status.SKIP else -2.5, r.check_id, r.node))
    blocking_ids = {id(r) for r in blocking}
    warnings = [r for r in results if r.status is Status.WARN and id(r) not in blocking_ids]
    missing = _missing(report)
    measured, total = measured_counts(report)
    verdict, reason = _verdict(report, bool(blocking), found, missing, measured)
    decision = Decision(verdict, blocking, skipped_expected, skipped, warnings, missing, reason, measured, total,
                        interrupted=report.interrupted, blocking_findings=found.blocking,
                        warning_findings=found.warning, skipped_findings=found.skipped,
                        acknowledged_findings=found.acknowledged, no_gpu=no_gpu_found(report), subset=report.subset,
                        derived=derived)
    decision.reason = f"{reason}. {decision.measured_text}"
    if decision.subset is not None and (decision.subset_go or not is_partial(decision.subset)
                                        and verdict is not Verdict.GO):
        decision.reason += f"; {decision.subset_text}"
    return decision


def _sort_findings(report: RunReport, results: list[CheckResult], silences: dict[str, dict[str, str]],
                   skip_reasons: dict[int, str]) -> _Sorted:
    """Each finding of these results as silenced, blocking (under --fail-on too), a warning or not measured."""
    blocking_statuses = {Status.FAIL, Status.ERROR}
    if report.fail_on == "warn":
        blocking_statuses.add(Status.WARN)
    unreachable = {n.name for n in report.nodes if n.reachable is False}
    found = _Sorted()
    for result in results:
        for finding in findings_of(result, result.node in unreachable):
            stand_in = all(f.id != finding.id for f in result.findings)
            if is_silenced(finding, silences):
                found.acknowledged.append(Found(result, finding, "", stand_in))
            elif finding.level in blocking_statuses:
                # A warning blocks under --fail-on warn; one of a check nobody asked for says whose it is.
                pulled = pulled_in_text(result.check_id, report.pulled_in) if finding.level is Status.WARN else ""
                blocks = f"{finding.level.value} blocks" + (f" ({pulled})" if pulled else "")
                found.blocking.append(Found(result, finding, blocks, stand_in))
            elif finding.level is Status.WARN:
                found.warning.append(Found(result, finding, "", stand_in))
            elif finding.level is Status.SKIP and skip_reasons.get(id(result)):
                found.blocking.append(Found(result, finding, skip_reasons[id(result)], stand_in))
            elif finding.level is Status.SKIP and result.status is Status.SKIP:
                # Only a result that measured nothing is "not measured": a figure reported but not judged
                # inside a result that measured stays in its check's section, never in a second list.
                found.skipped.append(Found(result, finding, "", stand_in))
    return found


def _verdict(report: RunReport, blocks: bool, found: _Sorted, missing: list[tuple[str, str]],
             measured: int) -> tuple[Verdict, str]:
    """The verdict and the sentence that says why, before the count of what was measured."""
    if blocks:
        verdict, reason = Verdict.NO_GO, blocking_text(found.blocking, pulled_in=report.pulled_in)
    elif report.load_errors:
        verdict, reason = Verdict.INCOMPLETE, ""  # the load errors below say it
    elif report.incomplete or report.interrupted or missing or not report.results:
        verdict, reason = Verdict.INCOMPLETE, _incomplete_reason(report, missing)
    elif not measured:
        verdict = Verdict.INCOMPLETE
        reason = "no check measured anything (every result is SKIP): nothing here was shown to be ready"
    else:
        verdict, reason = Verdict.GO, _go_reason(found)
    if report.stopped_early:
        reason += f"; the run was stopped early ({report.stopped_early})"
    if report.load_errors:
        # Named first in every report: its checks are missing from everything below.
        reason = _load_error_text(report.load_errors) + (f"; {reason}" if reason else "")
    return verdict, reason


def _incomplete_reason(report: RunReport, missing: list[tuple[str, str]]) -> str:
    """Why a run that was cut short, or is missing planned results, is INCOMPLETE."""
    if report.incomplete_reason:
        return report.incomplete_reason
    if report.interrupted:
        return "interrupted (SIGINT or SIGTERM): the reports hold what finished"
    if not report.results:
        return "no check produced a result"
    return (f"{len(missing)} planned result{'s' if len(missing) != 1 else ''} missing: "
            f"{_missing_text(missing, report.cluster_checks)}")


def _go_reason(found: _Sorted) -> str:
    """Why a GO is a GO: every check passed, or the warnings and silenced findings it holds."""
    n, checks = count_folded(found.warning), len({f.result.check_id for f in found.warning})
    reason = "every check passed" if not found.warning else \
        f"no blocking findings ({n} warning{'s' if n != 1 else ''} from {checks} check{'s' if checks != 1 else ''})"
    if found.acknowledged:  # what passed only because it was silenced is never "every check passed"
        quiet = len(found.acknowledged)
        reason = (f"GO with {quiet} silenced finding{'s' if quiet != 1 else ''} ([silence] in the config)"
                  + (f"; {reason}" if found.warning else ""))
    return reason


def _missing_text(missing: list[tuple[str, str]], cluster_checks: list[str], shown: int = 5) -> str:
    by_check: dict[str, list[str]] = {}
    for cid, node in missing:
        by_check.setdefault(cid, []).append(node)
    names = [cid if cid in cluster_checks else f"{cid} on {fold(nodes)}" for cid, nodes in by_check.items()]
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _missing(report: RunReport) -> list[tuple[str, str]]:
    """(check id, node) planned without a result; a cluster check's one result is found by its scope,
    never by the name it is filed under (CLUSTER_NODE), which a real host may have."""
    have = {r.key for r in report.results if r.scope is Scope.NODE}
    cluster_done = {r.check_id for r in report.results if r.scope is Scope.CLUSTER}
    missing = []
    node_names = report.node_names
    for check_id in report.planned:
        if check_id in report.cluster_checks:
            missing += [] if check_id in cluster_done else [(check_id, CLUSTER_NODE)]
        else:
            missing += [(check_id, node) for node in node_names if (check_id, node) not in have]
    return missing
