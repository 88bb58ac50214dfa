"""The shape of a check.

A check is a class with a stable dotted id, some plain-language text for the reports, a parameters
dataclass, and two methods:

    collect(ctx, params) -> facts      touches the machine; returns JSON-able facts; judges nothing
    evaluate(facts, params, expect)    pure: facts in, Outcome out; unit-tested from recorded facts

What collect() gets as `ctx` (where it may write, how it runs commands on its node or on others)
is in preflight.run.context. The runner, not the check, turns exceptions and timeouts into ERROR. A check that finds it cannot
measure raises `CannotMeasure` with a reason a person can act on; it never returns PASS for that.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from preflight.core.model import Finding, Measurement, Scope, Status, worst


class CannotMeasure(Exception):
    """Raised by collect() when the facts cannot be gathered; becomes ERROR with this message."""


@dataclass
class Expect:
    """What the team says the cluster must have (from preflight.toml and the hosts file)."""

    gpus_per_node: int | None = None
    nodes: int | None = None
    # None: not stated (a node that can train with neither torch nor tensorflow is not ready);
    # []: stated on purpose, no framework is expected.
    frameworks: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Expect:
        return cls(**(data or {}))


@dataclass
class NoParams:
    pass


@dataclass
class Outcome:
    """What evaluate() decides. The runner adds id, node, timing, evidence and facts."""

    status: Status
    summary: str
    measurements: list[Measurement] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    # None means: the fixes of the findings that fired, or, for a check that states no findings,
    # the check's own remediation hints when the status is not PASS or SKIP.
    remediation: list[str] | None = None
    findings: list[Finding] = field(default_factory=list)


def outcome_from_findings(
    findings: list[Finding],
    measurements: list[Measurement] | None = None,
    *,
    passed: str,
    details: list[str] | None = None,
) -> Outcome:
    """The one way a check turns what it found into its Outcome.

    Status: the worst level among the findings (PASS when none is worse). Summary: the sentences of
    the findings at that level, joined; `passed` when nothing is worse than PASS. Remediation: the
    fixes of the findings that are not PASS, in order, without repeats. Details: every non-PASS
    finding's sentence unless given.
    """
    status = worst([f.level for f in findings], default=Status.PASS)
    if status is Status.PASS:
        summary = passed
    else:
        summary = "; ".join(dict.fromkeys(f.message for f in findings if f.level is status))
    fired = [f for f in findings if f.level is not Status.PASS]
    fixes = list(dict.fromkeys(f.fix for f in fired if f.fix))
    if details is None:
        details = [f.message for f in fired] if len(fired) > 1 else []
    return Outcome(status, summary, list(measurements or []), list(details), fixes, list(findings))


def measure(
    name: str,
    value: float | int | None,
    unit: str = "",
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    equals: Any = None,
    samples: list[float] | None = None,
    node: str | None = None,
    figure: str | None = None,
    series: str | None = None,
    at: float | int | str | None = None,
    better: str | None = None,
) -> Measurement:
    """A Measurement judged against at most one threshold (at_least, at_most or equals), with its
    figure declaration (see preflight.core.model.Measurement) for the reporters."""
    if sum(x is not None for x in (at_least, at_most, equals)) > 1:
        raise ValueError("measure() takes at most one of at_least, at_most, equals")
    threshold, comparison, ok = None, None, None
    if at_least is not None:
        threshold, comparison = at_least, ">="
        ok = value is not None and value >= at_least
    elif at_most is not None:
        threshold, comparison = at_most, "<="
        ok = value is not None and value <= at_most
    elif equals is not None:
        threshold, comparison = equals, "=="
        ok = value == equals
    return Measurement(
        name=name,
        value=value,
        unit=unit,
        threshold=threshold,
        comparison=comparison,
        ok=ok,
        samples=list(samples or []),
        node=node,
        figure=figure,
        series=series,
        at=at,
        better=better,
    )


def too_few_nodes(names: list[str], unreachable: list[str], expect: Expect, *, single: str,
                  nothing: str) -> Outcome | None:
    """What a cross-node check reports without two reachable nodes to work with; None when it has them.

    One node in the run: SKIP (`single` says why), or ERROR when the configuration expects several.
    Several nodes but fewer than two reachable: ERROR naming the unreachable ones. `nothing` says what
    could not be done, e.g. "no link between nodes could be measured".
    """
    total = len(names) + len(unreachable)
    if total < 2:
        if expect.nodes and expect.nodes > 1:
            return Outcome(Status.ERROR, f"the configuration expects {expect.nodes} nodes but this run has {total}: "
                           f"{nothing}", remediation=["list every node in the hosts file"])
        return Outcome(Status.SKIP, f"one node: {single}")
    if len(names) < 2:
        return Outcome(Status.ERROR, f"only {len(names)} of {total} nodes reachable "
                       f"({', '.join(unreachable)} unreachable): {nothing}")
    return None


class Check:
    """Base class for node and cluster checks. Subclasses set the class attributes below."""

    id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    scope: ClassVar[Scope] = Scope.NODE
    tags: ClassVar[tuple[str, ...]] = ()
    why: ClassVar[str] = ""
    remediation: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type] = NoParams
    # Wall-clock limit for collect() in its own process; config can override per check.
    timeout_s: ClassVar[float] = 120.0
    # Checks whose facts (on the same node) this one reads through ctx.earlier; they run first.
    run_after: ClassVar[tuple[str, ...]] = ()
    # A cheap check that runs before the others on every node, so a missing driver is reported first.
    run_first: ClassVar[bool] = False
    # What each run level changes (preflight.core.levels): level -> parameter overrides, plus "timeout"
    # (seconds at that level) and "skip" (why the check does not run at that level).
    levels: ClassVar[dict[str, dict[str, Any]]] = {}
    # One line per Params field for people (`preflight explain`): what it means, with its unit.
    param_help: ClassVar[dict[str, str]] = {}
    # Settings of another area this check also takes, "area.key" -> its own parameter: storage.shared
    # takes `[checkpoint] dir` (and `--set checkpoint.dir=...`) for its `dir`. Its own setting wins.
    config_aliases: ClassVar[dict[str, str]] = {}

    def collect(self, ctx: Any, params: Any) -> dict[str, Any]:
        raise NotImplementedError

    def evaluate(self, facts: dict[str, Any], params: Any, expect: Expect) -> Outcome:
        raise NotImplementedError

    def expected_to_run(self, expect: Expect) -> bool:
        """True when the config says this check must measure something here (a SKIP then blocks)."""
        return False

    @classmethod
    def params_from(cls, overrides: dict[str, Any] | None = None) -> Any:
        return cls.Params(**(overrides or {}))
