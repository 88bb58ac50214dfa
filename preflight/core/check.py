"""The shape of a check.

A check is a class with a stable dotted id, some plain-language text for the reports, a parameters
dataclass, and two methods:

    collect(ctx, params) -> facts      touches the machine; returns JSON-able facts; judges nothing
    evaluate(facts, params, expect)    pure: facts in, Outcome out; unit-tested from recorded facts

What collect() gets as `ctx` (where it may write, how it runs commands on its node or on others)
is in preflight.engine.context. The runner, not the check, turns exceptions and timeouts into ERROR. A check that finds it cannot
measure raises `CannotMeasure` with a reason a person can act on; it never returns PASS for that.

evaluate() states findings with `self.finding(kind, level, message)`, each with its fix from the
check's `fixes` (kind -> fix), and derives its Outcome from them with `outcome_from_findings`.
A parameter is declared with `param(default, kind=..., help=...)`: its kind (a count, a threshold,
a fraction, a duration, ...) is what the configuration is validated against (preflight.core.config).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from preflight.core.model import NOT_APPLICABLE, Finding, Measurement, Scope, Status, worst

# What a check may need to measure anything (Check.needs; recorded in RunReport.needs).
NEEDS_GPU = "gpu"
NEEDS_FRAMEWORK = "framework"
# Check.role of the check whose facts say what a node has: `nvidia_gpus` (the NVIDIA GPUs on its PCI
# bus, driver or not), `frameworks` (importable or not), `hostname` and `hostname_addresses`. The
# planner runs it before any check that needs a GPU or a framework; the verdict reads its facts.
ROLE_INVENTORY = "inventory"

# The kinds of parameter `param()` declares, and what the configuration accepts for each:
#   threshold  a figure judged against: a finite number above zero (unset: not judged)
#   count      a whole number, zero or more (at least `minimum` where declared)
#   fraction   a share between 0 and 1
#   duration   seconds, a finite number above zero
#   size       bytes, MiB, GB...: a finite number above zero
#   rate       a finite number above zero that is no threshold (a learning rate)
#   choice     one of `choices`
#   flag       true or false
#   path, text a string
#   list       a list of anything else (a list of counts or sizes is declared with that kind)
#   table      a table of names to values (environment variables, keyword arguments)
PARAM_KINDS = ("threshold", "count", "fraction", "duration", "size", "rate", "choice", "flag", "path", "text",
               "list", "table")
PARAM_RUNS_CODE = "preflight.runs_code"
PARAM_KIND, PARAM_HELP, PARAM_CHOICES, PARAM_MINIMUM, PARAM_AT_MOST, PARAM_AT_LEAST, PARAM_LEARN = (
    "preflight.kind", "preflight.help", "preflight.choices", "preflight.minimum", "preflight.at_most",
    "preflight.at_least", "preflight.learn")

# Where a check reads a node's image from (Check.image_source), most trusted first: what is installed
# (package metadata, the system's own records), what the driver or a framework reports at run time,
# what the PCI bus shows. When two checks state the same field, the earlier source's value is kept.
IMAGE_SOURCES = ("installed", "device", "bus")
# The fields of a node's image (what fleet history fingerprints a node by), which Check.image fills.
IMAGE_FIELDS = ("driver", "cuda", "cuda_driver", "nccl", "kernel", "os", "torch", "tensorflow", "gpu_model",
                "gpu_count", "vbios")


@dataclass(frozen=True)
class Learnable:
    """What `preflight baseline learn` may learn a threshold from: declared on the parameter it sets.

    `bound` is "floor" (a figure must be at least the parameter) or "ceiling" (at most). A recorded
    figure feeds it when it matches every criterion given: its `figure` kind, `series` and `unit`,
    its name containing `name_has`, starting with `name_prefix` and not with `not_prefix`, or being
    one of `names`. `narrow` keeps only some of the matches: "largest-at" the figures at the largest
    recorded condition (message size; `size_param` then names the parameter that says at which),
    "largest-count" those of the largest device or node count their name ends with. `what` says in
    words what is learned, for the profile's comments.
    """

    bound: str
    what: str
    figure: str | None = None
    series: str | None = None
    unit: str | None = None
    name_has: str | None = None
    name_prefix: str | None = None
    not_prefix: str | None = None
    names: tuple[str, ...] = ()
    narrow: str = ""
    size_param: str | None = None

    def __post_init__(self) -> None:
        if self.bound not in ("floor", "ceiling"):
            raise ValueError(f"a learnable bound is 'floor' or 'ceiling', not {self.bound!r}")
        if self.narrow not in ("", "largest-at", "largest-count"):
            raise ValueError(f"narrow is '', 'largest-at' or 'largest-count', not {self.narrow!r}")

    def matches(self, figure: str, series: str, unit: str, name: str) -> bool:
        """True when a recorded figure of these kinds and this name feeds the parameter."""
        return ((self.figure is None or figure == self.figure) and (self.series is None or series == self.series)
                and (self.unit is None or unit == self.unit) and (self.name_has is None or self.name_has in name)
                and (self.name_prefix is None or name.startswith(self.name_prefix))
                and (self.not_prefix is None or not name.startswith(self.not_prefix))
                and (not self.names or name in self.names))


def param(default: Any = None, *, kind: str, help: str, choices: tuple[str, ...] | list[str] | None = None,
          minimum: int | float | None = None, factory: Any = None, at_most: str | None = None,
          at_least: str | None = None, learn: Learnable | None = None, runs_code: bool = False) -> Any:
    """A Params field with its kind and its meaning declared: `dataclasses.field` with metadata.

    `kind` is one of PARAM_KINDS; `help` one line for `preflight explain` and `preflight init`, with
    the unit. `minimum` raises a count's floor (1 where zero makes no sense). `at_most` / `at_least`
    name another parameter this one's value must not exceed / fall below (a WARN level between the
    PASS level and failing). A list, dict or other mutable default is given by `factory`. `learn`
    says which recorded figures fleet history may learn this threshold from (Learnable). `runs_code`:
    the value names code of the user's that the check imports and runs ("package.module:function"),
    which a run says before it starts when a configuration file sets it.
    """
    if kind not in PARAM_KINDS:
        raise ValueError(f"param kind must be one of {', '.join(PARAM_KINDS)}, not {kind!r}")
    if kind == "choice" and not choices:
        raise ValueError("a choice parameter declares its choices")
    metadata: dict[str, Any] = {PARAM_KIND: kind, PARAM_HELP: help}
    if runs_code:
        metadata[PARAM_RUNS_CODE] = True
    for key, value in ((PARAM_CHOICES, tuple(choices) if choices else None), (PARAM_MINIMUM, minimum),
                       (PARAM_AT_MOST, at_most), (PARAM_AT_LEAST, at_least), (PARAM_LEARN, learn)):
        if value is not None:
            metadata[key] = value
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def field_default(f: Any) -> Any:
    """A Params field's default value (a fresh one from its factory), None when it has none."""
    import dataclasses

    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


class CannotMeasure(Exception):
    """Raised by collect() when the facts cannot be gathered; becomes ERROR with this message."""


@dataclass
class Expect:
    """What the team says the cluster must have (from preflight.toml and the hosts file)."""

    gpus_per_node: int | None = param(None, kind="count", help="GPUs every node must have (count)")
    nodes: int | None = param(None, kind="count", help="nodes the run must reach (count)")
    # None: not stated (a node that can train with neither torch nor tensorflow is not ready);
    # []: stated on purpose, no framework is expected.
    frameworks: list[str] | None = param(None, kind="list", help="frameworks every node must be able to import")

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
    # Sentences for a reader who reads nothing else (a product manager): the report leads the check's
    # section with them, and with the charts of its declared figures.
    lead: list[str] = field(default_factory=list)


def outcome_from_findings(
    findings: list[Finding],
    measurements: list[Measurement] | None = None,
    *,
    passed: str,
    details: list[str] | None = None,
    notes: list[str] | None = None,
) -> Outcome:
    """The one way a check turns what it found into its Outcome.

    Status: the worst level among the findings (PASS when none is worse). Summary: the sentences of
    the findings at that level, joined; `passed` when nothing is worse than PASS. Remediation: the
    fixes of the findings that are not PASS, in order, without repeats. Details: `details` when
    given; else every non-PASS finding's sentence (when more than one fired, or whenever `notes` are
    given), then `notes`, without repeats.
    """
    status = worst([f.level for f in findings], default=Status.PASS)
    if status is Status.PASS:
        summary = passed
    else:
        summary = "; ".join(dict.fromkeys(f.message for f in findings if f.level is status))
    fired = [f for f in findings if f.level is not Status.PASS]
    fixes = list(dict.fromkeys(f.fix for f in fired if f.fix))
    if details is None:
        listed = [f.message for f in fired] if len(fired) > 1 or notes is not None else []
        details = list(dict.fromkeys([*listed, *(notes or [])]))
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
    param: str | None = None,
    counts: str | None = None,
) -> Measurement:
    """A Measurement judged against at most one threshold (at_least, at_most or equals), with its
    figure declaration (see preflight.core.model.Measurement) for the reporters. `param`: the name of
    the check's parameter the threshold is (or is computed from), so a report can say where it came
    from; it is recorded only with a threshold."""
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
        param=param if threshold is not None else None,
        counts=counts,
    )


# The fixes of the findings `too_few_nodes` states; a cross-node check adds them to its own `fixes`.
TOO_FEW_NODES_FIXES = {
    "nodes-missing": "List every node of the cluster in the hosts file (or run inside the whole Slurm allocation).",
    "nodes-unreachable": ("Make the unreachable nodes reachable from here (preflight run names why each was not), "
                          "or leave them out of the hosts file."),
}


def too_few_nodes(check: type[Check], names: list[str], unreachable: list[str], expect: Expect, *, single: str,
                  nothing: str) -> Outcome | None:
    """What a cross-node check reports without two reachable nodes to work with; None when it has them.

    One node in the run: SKIP (`single` says why; finding `one-node`, nothing to fix), or ERROR when
    the configuration expects several (`nodes-missing`). Several nodes but fewer than two reachable:
    ERROR naming the unreachable ones (`nodes-unreachable`). `nothing` says what could not be done,
    e.g. "no link between nodes could be measured". The check declares TOO_FEW_NODES_FIXES.
    """
    total = len(names) + len(unreachable)
    if total < 2:
        if expect.nodes and expect.nodes > 1:
            found = check.finding("nodes-missing", Status.ERROR, f"the configuration expects {expect.nodes} nodes "
                                  f"but this run has {total}: {nothing}")
        else:
            found = check.finding("one-node", Status.SKIP, f"one node: {single}", fix="")
        return outcome_from_findings([found], passed="")
    if len(names) < 2:
        return outcome_from_findings([check.finding(
            "nodes-unreachable", Status.ERROR, f"only {len(names)} of {total} nodes reachable "
            f"({', '.join(unreachable)} unreachable): {nothing}")], passed="")
    return None


class Check:
    """Base class for node and cluster checks.

    Subclasses set the class attributes below; every attribute the planner, the runner, the verdict
    and the reports read is declared here with its default, so a check states nothing by convention.
    """

    id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    scope: ClassVar[Scope] = Scope.NODE
    tags: ClassVar[tuple[str, ...]] = ()
    why: ClassVar[str] = ""
    # General advice on the check as a whole, for `preflight explain`, and the fix a result shows when
    # the check states no findings. A finding's own fix comes from `fixes`, by its kind.
    remediation: ClassVar[tuple[str, ...]] = ()
    # Finding kind -> its fix: one entry for every kind the check can report worse than PASS.
    # `finding(kind, ...)` attaches it; a report shows the fix of each finding that fired.
    fixes: ClassVar[dict[str, str]] = {}
    # Finding kinds whose sentence is the headline of a NO-GO when they fire (the one thing to say
    # first: "neither PyTorch nor TensorFlow is installed"); recorded in the run report.
    headlines: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type] = NoParams
    # Wall-clock limit for collect() in its own process; config can override per check (and
    # timeout_at() may grow it with the cluster's size).
    timeout_s: ClassVar[float] = 120.0
    # Checks whose facts (on the same node) this one reads through ctx.earlier; they run first.
    run_after: ClassVar[tuple[str, ...]] = ()
    # Checks whose facts this one reads when they ran (a cluster check: ctx.node_facts and
    # ctx.cluster_facts): it runs after them, but neither pulls them into a run nor leaves with them.
    reads: ClassVar[tuple[str, ...]] = ()
    # A cheap check that runs before the others on every node, so a missing driver is reported first.
    run_first: ClassVar[bool] = False
    # What the check needs to measure anything: NEEDS_GPU and/or NEEDS_FRAMEWORK. None: read from
    # its tags ("gpu" needs a GPU; "torch" or "tensorflow" a framework). Recorded in the run report:
    # a SKIP of such a check blocks where the node is known to have GPUs (see preflight.core.verdict).
    needs: ClassVar[tuple[str, ...] | None] = None
    # What the check's facts are to the rest of preflight: ROLE_INVENTORY for the check whose facts
    # say what a node has (see ROLE_INVENTORY). Recorded in the run report.
    role: ClassVar[str] = ""
    # Cheap enough for a scheduler hook (`preflight healthcheck` as a Slurm Prolog or
    # HealthCheckProgram): seconds, on the node itself, nothing that leaves it.
    hook: ClassVar[bool] = False
    # Go-live alarm -> the name of the measurement an alarm is set from (ALARM_* in
    # preflight.core.model); `preflight alerts --from results.json` reads them. Recorded in the report.
    alarm_figures: ClassVar[dict[str, str]] = {}
    # The parameter that names Prometheus rule files (or PrometheusRule manifests) this check judges as
    # written, with no Prometheus to ask: `preflight alerts --check FILE` judges them with the check.
    alarm_rules: ClassVar[str] = ""
    # What each run level changes (preflight.core.levels): level -> parameter overrides, plus "timeout"
    # (seconds at that level) and "skip" (why the check does not run at that level).
    levels: ClassVar[dict[str, dict[str, Any]]] = {}
    # One line per Params field for people (`preflight explain`), for a check whose Params fields do
    # not declare it with `param(help=...)`; `param_docs()` reads both.
    param_help: ClassVar[dict[str, str]] = {}
    # Transport kinds this check is about ("k8s": the node came from the Kubernetes API); empty: every run.
    # A run through none of them leaves the check out unless it was asked for by name.
    transports: ClassVar[tuple[str, ...]] = ()
    # Where this check's image() reads a node's image from: one of IMAGE_SOURCES; "" when it states none.
    image_source: ClassVar[str] = ""
    # Settings of another area this check also takes, "area.key" -> its own parameter: storage.shared
    # takes `[checkpoint] dir` (and `--set checkpoint.dir=...`) for its `dir`. Its own setting wins.
    config_aliases: ClassVar[dict[str, str]] = {}
    # The area table `preflight init` writes this check's parameters under ("job": [job]), with the
    # other checks' settings aliased into it, instead of [checks."<id>"]; "" for the latter.
    config_table: ClassVar[str] = ""
    # `run --shape` keys this check's parameters fill when the command line leaves them out, shape key
    # -> parameter ({"gpus-per-node": "gpus_per_node"}): the job's plan is the shape's default.
    shape_defaults: ClassVar[dict[str, str]] = {}

    def collect(self, ctx: Any, params: Any) -> dict[str, Any]:
        raise NotImplementedError

    def evaluate(self, facts: dict[str, Any], params: Any, expect: Expect) -> Outcome:
        raise NotImplementedError

    def expected_to_run(self, expect: Expect) -> bool:
        """True when the config says this check must measure something here (a SKIP then blocks)."""
        return False

    @classmethod
    def prepare_on_coordinator(cls, overrides: dict[str, Any], cwd: Path) -> dict[str, Any]:
        """Read, where preflight starts, what every node needs (a lock file, say) into the parameter
        overrides, once; returns the overrides to run with. A ValueError is the user's mistake (a
        configured file that does not exist) and stops the run before it starts, naming the check.
        By default nothing is read: the overrides are returned as they are."""
        return overrides

    @classmethod
    def finding(cls, kind: str, level: Status, message: str, *, node: str | None = None,
                fix: str | None = None) -> Finding:
        """A finding of this check: id `<check id>.<kind>`, its fix `fixes[kind]` (none at PASS) unless
        `fix` gives one for this occurrence (naming the path or the package at fault).

        A finding worse than PASS without a fix is a mistake in the check (ValueError). A SKIP may
        have nothing to fix, said on purpose: `fix=""` (a node without GPUs), or a kind ending in
        NOT_APPLICABLE (the check does not apply to a node of this shape)."""
        declared = "" if level is Status.PASS else cls.fixes.get(kind, "")  # a PASS has nothing to fix
        text = declared if fix is None else fix
        nothing_to_fix = level is Status.SKIP and (fix == "" or kind.endswith(NOT_APPLICABLE))
        if not text and level is not Status.PASS and not nothing_to_fix:
            raise ValueError(f"{cls.id}: finding kind {kind!r} at {level.value} has no fix; declare it in "
                             f"{cls.__name__}.fixes")
        return Finding(f"{cls.id}.{kind}", level, message, text, node)

    @classmethod
    def timeout_at(cls, nodes: int, params: Any) -> float:
        """The check's wall-clock limit on a run of `nodes` reachable nodes with `params`, when no
        config or level sets one: `timeout_s`, unless the check's work grows with the cluster (an
        isolation pass whose rounds grow with it). Pure."""
        return cls.timeout_s

    @classmethod
    def params_from(cls, overrides: dict[str, Any] | None = None) -> Any:
        return cls.Params(**(overrides or {}))

    @classmethod
    def learnable(cls) -> dict[str, Learnable]:
        """Parameter name -> what fleet history may learn it from (`param(learn=...)`)."""
        if not dataclasses.is_dataclass(cls.Params):
            return {}
        return {f.name: f.metadata[PARAM_LEARN] for f in dataclasses.fields(cls.Params) if PARAM_LEARN in f.metadata}

    def image(self, facts: dict[str, Any]) -> dict[str, Any]:
        """What of this check's facts on a node fingerprints the node's image (IMAGE_FIELDS: driver,
        CUDA, NCCL, kernel, OS, framework versions, GPU model and count, VBIOS), for fleet history;
        fields it does not know are left out. Pure: it reads recorded facts, old ones too."""
        return {}

    @classmethod
    def param_docs(cls) -> dict[str, str]:
        """Parameter name -> its meaning and unit, for people: from each field's `param(help=...)`,
        else from `param_help`."""
        if not dataclasses.is_dataclass(cls.Params):
            return {}
        return {f.name: f.metadata.get(PARAM_HELP) or cls.param_help.get(f.name, "")
                for f in dataclasses.fields(cls.Params)}
