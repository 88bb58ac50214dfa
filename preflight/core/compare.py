"""Compare two runs: a new cluster image against the last known-good one.

`compare(old, new)` is a pure function of two RunReports and returns a Diff:
- status changes per (check, node): PASS -> FAIL is a regression, FAIL -> PASS an improvement,
  using the order PASS < SKIP < WARN < FAIL < ERROR (a check that measured before and skips now has
  lost coverage, which counts as worse). A result the baseline has and the new run does not (the
  check was skipped, deselected or its node left out) has lost coverage too: a regression, unless
  the baseline's result was itself a SKIP, which measured nothing to lose. A node of the baseline
  that is not in the new run is a regression of its own (check id `node`). A result only the new run
  has is information;
- figure changes beyond a relative tolerance (default 10%). A measurement's comparison says which
  way is better: ">=" (at least) means higher is better, "<=" lower is better. For "==" and for
  text figures, a change that turns the figure from acceptable to not acceptable is a regression.
  Figures judged against nothing are reported as information, never as regressions;
- software versions, from the software stack a check records on each node (torch 2.4.1 -> 2.5.0).
  A version change counts as a regression unless `versions_regress=False`: an image that changes
  torch under a team's feet is what a gate should stop; an intended upgrade is accepted by making
  the new run the baseline.

Whether a regression blocks the verdict is the caller's choice: `preflight diff` exits 1 on one;
`preflight run --baseline` keeps the comparison in RunReport.baseline, every report shows it, and
the verdict reads it through `comparison_results`: a WARN by default, a FAIL (NO-GO) with
--fail-on-regression. This module only compares; the reporters (preflight.reporters.baseline)
write the comparison out.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from preflight.core.levels import SKIPPED_AT_LEVEL
from preflight.core.model import CLUSTER_NODE, FIGURE_STEP, CheckResult, Measurement, RunReport, Scope, Status

DEFAULT_TOLERANCE = 0.10
BASELINE_CHECK_ID = "baseline.comparison"
NODE_ENTRY = "node"  # the check id of a StatusChange that says a whole node is gone from the new run
BASELINE_TITLE = "Comparison with the baseline run"

HIGHER_IS_BETTER = {">=", ">"}
LOWER_IS_BETTER = {"<=", "<"}


@dataclass
class StatusChange:
    check_id: str
    node: str
    old: str  # a status, or "" when the old run has no result for this check and node
    new: str
    kind: str  # "regression", "improvement" or "info"
    summary: str = ""  # the new result's summary, or the old one's when it is gone
    level_skip: bool = False  # one side is a SKIP because its run level leaves the check out
    cluster: bool = False  # a cluster check's own result (its node is CLUSTER_NODE; a host may be called so too)


@dataclass
class FigureChange:
    check_id: str
    node: str  # the result's node, or the link ("a -> b") a cluster figure belongs to
    name: str
    old: float | int | str | None
    new: float | int | str | None
    unit: str = ""
    comparison: str | None = None
    threshold: float | int | str | None = None
    change: float | None = None  # relative, (new - old) / |old|, for numbers
    kind: str = "info"  # "regression", "improvement" or "info"
    noisy: bool = False  # either run's samples spread wider than the tolerance
    figure: str | None = None  # the kind of figure it declares (FIGURE_STEP: one point of a per-step series)


@dataclass
class VersionChange:
    package: str
    old: str | None
    new: str | None
    nodes: list[str] = field(default_factory=list)
    kind: str = "regression"  # or "info" when versions do not count


@dataclass
class Diff:
    old_started_at: str
    new_started_at: str
    tolerance: float = DEFAULT_TOLERANCE
    old_label: str = ""  # where the old run came from (a path), for the reports
    statuses: list[StatusChange] = field(default_factory=list)
    figures: list[FigureChange] = field(default_factory=list)
    versions: list[VersionChange] = field(default_factory=list)
    compared_results: int = 0
    compared_figures: int = 0
    versions_regress: bool = True
    # How the two runs were made: (old, new) run level, profile and preflight version.
    levels: list[str] = field(default_factory=lambda: ["", ""])
    profiles: list[str] = field(default_factory=lambda: ["", ""])
    preflight_versions: list[str] = field(default_factory=lambda: ["", ""])

    @property
    def context(self) -> list[str]:
        """What differs in how the runs were made, one sentence each; a reader weighs the changes by it."""
        said = []
        for what, (old, new), empty in (("run level", self.levels, "standard"), ("profile", self.profiles, "none"),
                                        ("preflight version", self.preflight_versions, "unknown")):
            if (old or empty) != (new or empty):
                said.append(f"the {what} differs: {old or empty} before, {new or empty} now")
        if self.levels[0] != self.levels[1] and any(c.level_skip for c in self.statuses):
            said.append("checks one level leaves out are listed as other changes, not as regressions or improvements")
        return said

    @property
    def regressions(self) -> list[StatusChange | FigureChange | VersionChange]:
        return [c for c in [*self.statuses, *self.figures, *self.versions] if c.kind == "regression"]

    @property
    def improvements(self) -> list[StatusChange | FigureChange]:
        return [c for c in [*self.statuses, *self.figures] if c.kind == "improvement"]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    @property
    def unchanged(self) -> bool:
        return not (self.statuses or self.figures or self.versions)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diff:
        data = dict(data)
        # Written before `cluster` was recorded: the node's name was all there was to go by.
        data["statuses"] = [_known(StatusChange, {"cluster": c.get("node") == CLUSTER_NODE, **c}
                                   if isinstance(c, dict) else c) for c in data.get("statuses", [])]
        data["figures"] = [_known(FigureChange, c) for c in data.get("figures", [])]
        data["versions"] = [_known(VersionChange, c) for c in data.get("versions", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> str:
        data = self.to_dict()
        data["regressions"] = len(self.regressions)
        data["exit_code"] = self.exit_code
        from preflight.core.finite import finite

        return json.dumps(finite(data)[0], indent=2, sort_keys=True, allow_nan=False) + "\n"


def _known(cls: Any, data: dict[str, Any]) -> Any:
    """A change record from its dict; keys this version does not know are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


# ---------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------

_RANK = {"PASS": 0, "SKIP": 1, "WARN": 2, "FAIL": 3, "ERROR": 4}


def compare(old: RunReport, new: RunReport, tolerance: float = DEFAULT_TOLERANCE, *, old_label: str = "",
            versions_regress: bool = True) -> Diff:
    if tolerance < 0 or not math.isfinite(tolerance):
        raise ValueError(f"tolerance must be a non-negative number, not {tolerance!r}")
    diff = Diff(old.started_at, new.started_at, tolerance, old_label, versions_regress=versions_regress,
                levels=[old.level or "", new.level or ""], profiles=[old.profile or "", new.profile or ""],
                preflight_versions=[old.preflight_version or "", new.preflight_version or ""])
    old_results = {r.key: r for r in old.results if r.check_id != BASELINE_CHECK_ID}
    new_results = {r.key: r for r in new.results if r.check_id != BASELINE_CHECK_ID}
    # A check the new run was not asked to run (--checks, --skip, --tag) lost nothing: the user left it out.
    asked = set(new.planned) if new.planned else None
    for key in dict.fromkeys([*old_results, *new_results]):
        _compare_result(diff, key, old_results.get(key), new_results.get(key),
                        left_out=asked is not None and key[0] not in asked)
    diff.statuses += _lost_nodes(old, new)
    diff.versions = _compare_versions(old, new, "regression" if versions_regress else "info")
    for change in diff.statuses:
        result = new_results.get((change.check_id, change.node)) or old_results.get((change.check_id, change.node))
        change.cluster = result is not None and result.scope is Scope.CLUSTER
    return diff


def _compare_result(diff: Diff, key: tuple[str, str], before: CheckResult | None, after: CheckResult | None,
                    left_out: bool = False) -> None:
    """Add to the diff what changed in one (check, node) result between the runs: its status, its figures.
    `left_out`: the new run was not asked to run this check."""
    if before is not None and after is None:
        # Gone from the new run: what the baseline measured here is no longer known (lost coverage),
        # unless the new run was not asked for it.
        lost = before.status is not Status.SKIP and not left_out
        why = ("not asked for in the new run (--checks, --skip or --tag left it out)" if left_out
               else "no result in the new run: lost coverage" if lost else before.summary)
        diff.statuses.append(StatusChange(key[0], key[1], before.status.value, "",
                                          "regression" if lost else "info", why))
        return
    if after is not None and before is None:
        # Only the new run has it: it covers more ground, not a regression.
        diff.statuses.append(StatusChange(key[0], key[1], "", after.status.value, "info", after.summary))
        return
    assert before is not None and after is not None
    diff.compared_results += 1
    if before.status is not after.status:
        worse = _RANK[after.status.value] > _RANK[before.status.value]
        # A SKIP because a run's level leaves the check out (--level quick) says nothing about the
        # cluster: what changed is what was asked for.
        level_skip = _skipped_at_level(before) or _skipped_at_level(after)
        kind = "info" if level_skip else "regression" if worse else "improvement"
        diff.statuses.append(StatusChange(key[0], key[1], before.status.value, after.status.value, kind,
                                          after.summary, level_skip))
        if level_skip:
            return
    diff.figures += _compare_figures(before, after, diff.tolerance, diff)


def _lost_nodes(old: RunReport, new: RunReport) -> list[StatusChange]:
    """A regression for each node of the old run that the new run leaves out."""
    new_nodes = set(new.node_names)
    return [StatusChange(NODE_ENTRY, node, "present", "", "regression",
                         "the node is not in the new run: nothing was measured on it")
            for node in old.node_names if node not in new_nodes and node != CLUSTER_NODE]


def _skipped_at_level(result: CheckResult) -> bool:
    return result.status is Status.SKIP and bool(result.findings) and \
        all(f.id.endswith(SKIPPED_AT_LEVEL) for f in result.findings)


def _figure_key(m: Measurement) -> tuple[str, str | None]:
    return (m.name, m.node)


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _compare_figures(before: CheckResult, after: CheckResult, tolerance: float, diff: Diff) -> list[FigureChange]:
    changes = []
    old_figures = {_figure_key(m): m for m in before.measurements}
    for m in after.measurements:
        o = old_figures.get(_figure_key(m))
        if o is None:
            continue
        diff.compared_figures += 1
        node = m.node or after.node
        comparison = m.comparison or o.comparison
        base = FigureChange(after.check_id, node, m.name, o.value, m.value, m.unit or o.unit, comparison,
                            m.threshold, noisy=_noisy(o, tolerance) or _noisy(m, tolerance), figure=m.figure)
        old_num, new_num = _numeric(o.value), _numeric(m.value)
        if old_num is not None and new_num is not None:
            if old_num == new_num:
                continue
            relative = (new_num - old_num) / abs(old_num) if old_num else math.copysign(math.inf, new_num)
            base.change = relative if math.isfinite(relative) else None
            if comparison in HIGHER_IS_BETTER:
                kind = "regression" if relative < -tolerance else "improvement" if relative > tolerance else ""
            elif comparison in LOWER_IS_BETTER:
                kind = "regression" if relative > tolerance else "improvement" if relative < -tolerance else ""
            elif comparison is not None:  # "==" / "!=": only a change of judgement matters
                kind = _judgement_change(o, m) or ("info" if abs(relative) > tolerance else "")
            else:
                kind = "info" if abs(relative) > tolerance else ""
            if kind and m.figure == FIGURE_STEP:
                kind = "info"  # one step of a training run is noise; its check judges the series as a whole
            if kind:
                base.kind = kind
                changes.append(base)
            continue
        if o.value == m.value:
            continue
        # Text figures, or a figure measured in one run only.
        base.kind = _judgement_change(o, m) or "info"
        changes.append(base)
    return changes


def _judgement_change(old: Measurement, new: Measurement) -> str:
    if old.ok is not False and new.ok is False:
        return "regression"
    if old.ok is False and new.ok is True:
        return "improvement"
    return ""


def _noisy(m: Measurement, tolerance: float) -> bool:
    spread = m.spread
    return spread is not None and spread > 2 * tolerance


def _stacks(report: RunReport) -> dict[str, dict[str, Any]]:
    """Per node, the versions in the software stack a check recorded (facts["stack"]).

    Only the entries the check declares as versions (facts["stack_versions"]) count; a stack recorded
    without that declaration counts its text entries, never a flag such as `builds_probed`."""
    stacks: dict[str, dict[str, Any]] = {}
    for r in report.results:
        facts = r.facts or {}
        stack = facts.get("stack")
        if not isinstance(stack, dict) or r.node in stacks:
            continue
        declared = facts.get("stack_versions")
        if isinstance(declared, list):
            stacks[r.node] = {k: stack.get(k) for k in declared}
        else:
            stacks[r.node] = {k: v for k, v in stack.items() if v is None or isinstance(v, str)}
    return stacks


def _compare_versions(old: RunReport, new: RunReport, kind: str) -> list[VersionChange]:
    old_stacks, new_stacks = _stacks(old), _stacks(new)
    grouped: dict[tuple[str, str | None, str | None], list[str]] = {}
    for node in [n for n in new_stacks if n in old_stacks]:
        before, after = old_stacks[node], new_stacks[node]
        for package in list(dict.fromkeys([*before, *after])):
            a, b = before.get(package), after.get(package)
            if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
                continue  # the stack's error notes, not versions
            a = None if a is None else str(a)
            b = None if b is None else str(b)
            if a != b:
                grouped.setdefault((package, a, b), []).append(node)
    return [VersionChange(package, a, b, nodes, kind) for (package, a, b), nodes in grouped.items()]


# ---------------------------------------------------------------------------------------------------
# Inside a run: the comparison is a field of the run report; the verdict reads it from there
# ---------------------------------------------------------------------------------------------------

def attach(report: RunReport, baseline: RunReport, tolerance: float = DEFAULT_TOLERANCE, *, label: str = "",
           fail_on_regression: bool = False) -> Diff:
    """Compare a finished run with its baseline and keep the comparison in RunReport.baseline."""
    comparison = compare(baseline, report, tolerance, old_label=label)
    report.baseline = {**comparison.to_dict(), "fail_on_regression": fail_on_regression}
    return comparison


def baseline_of(report: RunReport) -> Diff | None:
    """The comparison a run carries, or None (none asked for, or written by another version)."""
    if not report.baseline:
        return None
    try:
        return Diff.from_dict({k: v for k, v in report.baseline.items() if k != "fail_on_regression"})
    except (KeyError, TypeError, ValueError):
        return None


def blocking_regressions(comparison: Diff) -> list[StatusChange | FigureChange | VersionChange]:
    """The regressions --fail-on-regression blocks on: not a figure whose own samples (in either run)
    spread too wide to tell a change from noise, which the reports still list, marked noisy."""
    return [c for c in comparison.regressions if not (isinstance(c, FigureChange) and c.noisy)]


def baseline_blocks(report: RunReport) -> bool:
    """True when the run was compared with --fail-on-regression and something got worse, beyond noise."""
    comparison = baseline_of(report)
    return bool(comparison and blocking_regressions(comparison) and (report.baseline or {}).get("fail_on_regression"))


def comparison_results(report: RunReport) -> list[CheckResult]:
    """What the verdict weighs for the baseline: one derived result, never stored in report.results.

    Regressions are a WARN: every report shows them, and with --fail-on warn they block like any
    warning. --fail-on-regression makes them a FAIL, so the verdict is NO-GO and CI stops. A
    regression does not block by default because a new image is often meant to differ (a newer
    torch, a slower but cheaper storage tier) and the figures the checks judge still decide.
    """
    comparison = baseline_of(report)
    if comparison is None:
        if report.baseline:  # a comparison was made but cannot be read back: it must not vanish
            return [CheckResult(BASELINE_CHECK_ID, CLUSTER_NODE, Status.ERROR,
                                "the comparison with the baseline run cannot be read", title=BASELINE_TITLE,
                                scope=Scope.CLUSTER)]
        return []
    regressions = comparison.regressions
    if not regressions:
        return [CheckResult(BASELINE_CHECK_ID, CLUSTER_NODE, Status.PASS, "no regression against the baseline run",
                            title=BASELINE_TITLE, scope=Scope.CLUSTER)]
    n = len(regressions)
    noisy = n - len(blocking_regressions(comparison))
    said = f"{n} regression{'s' if n != 1 else ''} against the baseline run"
    if noisy:
        said += f" ({noisy} of noisy figures, which --fail-on-regression does not block on)"
    return [CheckResult(
        BASELINE_CHECK_ID, CLUSTER_NODE, Status.FAIL if baseline_blocks(report) else Status.WARN,
        said, title=BASELINE_TITLE, scope=Scope.CLUSTER,
        remediation=["Compare the two reports; if the change is intended, make this run the new baseline.",
                     "Run `preflight diff OLD/results.json NEW/results.json` for the full list."])]
