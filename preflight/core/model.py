"""The run-report model: what every check produces and every reporter reads.

Everything here is plain data that round-trips through JSON, because results cross process and
machine boundaries (check worker -> agent -> runner) and are re-rendered later by `preflight report`.
This module imports nothing from the rest of preflight, no framework and no transport.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any

# Bump on any change that a consumer of results.json could notice; document it in
# preflight/schema/run-report.schema.json.
SCHEMA_VERSION = 1

# The node name under which a cluster-scope check's single result is filed.
CLUSTER_NODE = "cluster"


class Status(str, enum.Enum):
    """Outcome of one check on one node.

    PASS  measured, ready.            WARN  measured, works but degraded.
    FAIL  measured, not ready.        SKIP  not applicable here (always with a reason).
    ERROR could not measure: crash, timeout, unreachable node.
    """

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"

    @property
    def severity(self) -> int:
        # Used to pick the "worst" status when folding several into one.
        return {"PASS": 0, "SKIP": 1, "WARN": 2, "FAIL": 3, "ERROR": 4}[self.value]


def worst(statuses: list[Status], default: Status = Status.PASS) -> Status:
    return max(statuses, key=lambda s: s.severity, default=default)


class Scope(str, enum.Enum):
    NODE = "node"  # runs on every node through the agent
    CLUSTER = "cluster"  # runs once, from the coordinator, across nodes


# What kind of figure a measurement is, so that reporters can draw it without knowing the check.
# A check declares it; a reporter groups measurements by (check, figure, series) and draws one chart.
FIGURE_LINK = "link"  # a rate between two endpoints; `at` is "src -> dst" (a heatmap of pairs)
FIGURE_SCALING = "scaling"  # throughput at n devices or nodes; `at` is n (ideal line is n x at 1)
FIGURE_SIZE = "size"  # a figure at a message or payload size; `at` is bytes (a sweep, log x axis)
FIGURE_RATE = "rate"  # rates shown side by side (supply vs demand, write vs read); `at` is a label
FIGURE_STEP = "step"  # a figure per step of a run (step time, data wait); `at` is the step number
FIGURE_KINDS = (FIGURE_LINK, FIGURE_SCALING, FIGURE_SIZE, FIGURE_RATE, FIGURE_STEP)

# Go-live alarms a check's figures can set (Check.alarm_figures -> RunReport.alarm_figures):
ALARM_GPU_UTILIZATION = "gpu-utilization"  # a percentage: the mean utilisation of the least busy GPU
ALARM_COMM_LATENCY_P99 = "comm-latency-p99"  # the p99 of a gradient bucket's all-reduce, in ms or s

# Suffix of a SKIP finding id that says "this check does not apply to a node of this shape" ("one
# GPU only: nothing to scale across"): such a SKIP never blocks through the verdict's inferences.
NOT_APPLICABLE = ".not-applicable"
# Suffix of a PASS finding id that qualifies what a result's figures mean ("measured in a scratch
# directory, not the shared checkpoint mount"): every report shows it beside the findings, with its
# fix; it changes no status.
CAVEAT = ".caveat"


@dataclass
class Measurement:
    """One figure with what it was judged against.

    `comparison` is how value relates to threshold when the figure is acceptable
    (">=" means value must be at least threshold, "==" equal to it). `ok` is the judgement of this
    figure alone. `samples` keeps repeated measurements so reports can show the spread.

    The figure declaration (`figure`, `series`, `at`, `better`) says what kind of figure this is
    (one of FIGURE_KINDS), which line or group it belongs to, the condition it was measured at (a
    message size in bytes, a device count, a link "a -> b"), and whether higher or lower is better.
    Reporters draw charts and key findings from these declarations alone.
    """

    name: str
    value: float | int | str | None
    unit: str = ""
    threshold: float | int | str | None = None
    comparison: str | None = None
    ok: bool | None = None
    samples: list[float] = field(default_factory=list)
    node: str | None = None  # set for cluster checks whose figures belong to a node or a pair
    figure: str | None = None  # one of FIGURE_KINDS, or None for a figure that is not charted
    series: str | None = None  # the line or group within the chart ("nccl", "write", "measured")
    at: float | int | str | None = None  # the condition: bytes, devices, "a -> b", a label
    better: str | None = None  # "higher" or "lower"; None: derived from `comparison`
    gpu: int | None = None  # the GPU's index on its node, for a per-GPU figure (compared GPU by GPU)
    param: str | None = None  # the check's parameter the threshold is (its origin is that parameter's)
    counts: str | None = None  # what a scaling figure's `at` counts ("GPUs"); None: devices, or nodes for a cluster check

    @property
    def direction(self) -> str | None:
        """"higher" or "lower" when one way is better, from the declaration or the threshold."""
        if self.better:
            return self.better
        if self.comparison == ">=":
            return "higher"
        if self.comparison == "<=":
            return "lower"
        return None

    @property
    def spread(self) -> float | None:
        """Relative spread (max-min)/median of the samples, or None with fewer than two."""
        if len(self.samples) < 2:
            return None
        ordered = sorted(self.samples)
        median = ordered[len(ordered) // 2]
        if not median:
            return None
        return (ordered[-1] - ordered[0]) / abs(median)


# What a finding's component names (Component.kind): what --drain, --cordon and the healthcheck act on.
COMPONENT_NODE = "node"  # the node itself
COMPONENT_GPU = "gpu"  # one GPU of a node (`gpu` its index): acting on it acts on its node
COMPONENT_LINK = "link"  # the path between two nodes: neither end is at fault alone
COMPONENT_BOUNDARY = "boundary"  # the path between two topology groups (a trunk, an uplink): no node is
# One cause shared by several components confirmed at once (most nodes under one topology group, links
# with a common end): `groups` the topology group, or `nodes` the common end; never acted on node by node.
COMPONENT_GROUP = "group"


@dataclass
class Component:
    """The part a finding names at fault, as data, and whether that was confirmed.

    `nodes`: the node (node, gpu), both ends (link), or none (boundary); `gpu`: the GPU's index on
    its node; `groups`: the two topology groups of a boundary. `confirmed` False is a suspect: seen
    bad, but not as often, or with as many different partners, as blaming asks; nothing acts on it.
    `confirmation` says how: `bad_in` of `of` measurements, the `partners`, each measurement.
    """

    kind: str
    nodes: list[str] = field(default_factory=list)
    gpu: int | None = None
    groups: list[str] = field(default_factory=list)
    confirmed: bool = True
    confirmation: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """"node n5", "GPU 3 of n5", "link n2 - n6", "boundary rack1 - rack2"."""
        if self.kind == COMPONENT_GPU:
            return f"GPU {self.gpu} of {self.nodes[0] if self.nodes else '?'}"
        if self.kind == COMPONENT_BOUNDARY:
            return "boundary " + " - ".join(self.groups)
        if self.kind == COMPONENT_GROUP:
            if not self.groups and not self.nodes:
                return "shared cause: the fleet"
            return ("shared cause: topology group " + " - ".join(self.groups)) if self.groups else \
                ("shared cause: node " + " - ".join(self.nodes))
        return f"{self.kind} " + " - ".join(self.nodes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Component:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Finding:
    """One thing a check found, with its own fix: what the reports show and what tests assert on.

    `id` is stable and dotted under the check's id (`net.bandwidth.slow-link`); rewording `message`
    breaks no test. `level` is the status this finding alone would give the check (PASS for a
    positive finding worth stating, SKIP for "not applicable" with its reason). `fix` is advice for
    this finding's own cause, never the check's generic hints. `node` names the node or link at fault
    for a cluster check, as text; `component` names it as data (preflight.core.blame reads only that).
    """

    id: str
    level: Status
    message: str
    fix: str = ""
    node: str | None = None
    component: Component | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        data = dict(data)
        data["level"] = Status(data["level"])
        if data.get("component") is not None:
            data["component"] = Component.from_dict(data["component"])
        return cls(**data)


@dataclass
class Evidence:
    """What was run to get the facts, so an engineer can reproduce it."""

    command: str
    exit_code: int | None = None
    output_tail: str = ""
    duration_s: float | None = None


@dataclass
class CheckResult:
    check_id: str
    node: str
    status: Status
    summary: str
    title: str = ""
    scope: Scope = Scope.NODE
    measurements: list[Measurement] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    remediation: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    lead: list[str] = field(default_factory=list)  # sentences the report leads the check's section with
    why: str = ""
    duration_s: float = 0.0
    started_at: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.check_id, self.node)

    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        data = dict(data)
        data["status"] = Status(data["status"])
        data["scope"] = Scope(data.get("scope", "node"))
        data["measurements"] = [Measurement(**m) for m in data.get("measurements", [])]
        data["evidence"] = [Evidence(**e) for e in data.get("evidence", [])]
        data["findings"] = [Finding.from_dict(f) for f in data.get("findings", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json_line(self) -> str:
        # Strict JSON: preflight.core.finite.make_finite turns NaN and infinity into null first.
        return json_text(self, sort_keys=True)


@dataclass
class NodeInfo:
    name: str  # as written in the hosts file, or the local hostname
    address: str = ""
    slots: int | None = None  # GPUs the hosts file says this node should have
    reachable: bool | None = None
    error: str = ""


@dataclass
class RunReport:
    """One run: its nodes, the checks asked for, and every result that came back."""

    started_at: str
    finished_at: str = ""
    preflight_version: str = ""
    nodes: list[NodeInfo] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)  # check ids asked for
    cluster_checks: list[str] = field(default_factory=list)  # the planned ids of cluster scope
    expected: list[str] = field(default_factory=list)  # check ids the config says must not SKIP
    needs: dict[str, list[str]] = field(default_factory=dict)  # check id -> "gpu", "framework" it needs
    # What the planned checks declare (preflight.core.check.Check), for the verdict and integrations:
    roles: dict[str, str] = field(default_factory=dict)  # check id -> its role ("inventory")
    headlines: list[str] = field(default_factory=list)  # finding ids whose sentence heads a NO-GO, in order
    alarm_figures: dict[str, dict[str, str]] = field(default_factory=dict)  # check id -> alarm -> measurement name
    expect: dict[str, Any] = field(default_factory=dict)  # the run's expectations (expect.* of the config)
    pulled_in: dict[str, str] = field(default_factory=dict)  # check id run only because this check reads it
    results: list[CheckResult] = field(default_factory=list)
    fail_on: str = "fail"
    incomplete: bool = False  # interrupted, or not every planned result arrived
    incomplete_reason: str = ""
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM
    level: str = "standard"  # run level (preflight.core.levels): quick, standard or thorough
    level_budget_s: float | None = None  # check time per node the level is designed to fit in
    stopped_early: str = ""  # why the run stopped before every planned check ran (--fail-fast)
    config_path: str = ""
    profile: str = ""  # node-type profile the thresholds came from (--profile)
    profile_sources: list[str] = field(default_factory=list)  # where that profile's figures are published
    command: str = ""
    load_errors: list[dict[str, str]] = field(default_factory=list)  # plugins that failed to load
    baseline: dict[str, Any] | None = None  # a comparison against an earlier run, when asked for
    # Set by `preflight report --rejudge`: when, from which results, with which thresholds, what changed.
    rejudged: dict[str, Any] | None = None
    # What the run was judged with beyond the checks' defaults, and where each value came from
    # (preflight/run/judging.py): `report --rejudge` starts from it. None in reports of older versions.
    judged_with: dict[str, Any] | None = None
    # [silence] of preflight.toml: finding id -> {"reason": why, "until": "YYYY-MM-DD" or ""}. A silenced
    # finding is an acknowledged note in every report and never blocks, until its date has passed.
    silenced: dict[str, dict[str, str]] = field(default_factory=dict)
    # Where the headline figures stand among earlier runs of the same node type, and the image changes
    # since the nodes' previous runs (preflight.history.context), when the run read fleet history.
    # Data for the reports only: it judges nothing. None when history is off or could not be read.
    history: dict[str, Any] | None = None
    # The largest healthy subset of the nodes in the shape a job asks for (run --shape;
    # preflight.core.shape). None when no shape was asked for; left out of results.json then.
    subset: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    def add(self, result: CheckResult) -> None:
        """A result joins the report with every URL password and token in it masked (preflight.core.redact)."""
        from preflight.core.redact import scrub

        self.results.append(scrub(result))

    def result_for(self, check_id: str, node: str) -> CheckResult | None:
        for result in self.results:
            if result.key == (check_id, node):
                return result
        return None

    def results_for(self, check_id: str) -> list[CheckResult]:
        return [r for r in self.results if r.check_id == check_id]

    @property
    def node_names(self) -> list[str]:
        names = [n.name for n in self.nodes]
        seen = set(names)
        for result in self.results:
            if result.node not in seen and result.scope is Scope.NODE:
                names.append(result.node)
                seen.add(result.node)
        return names

    @property
    def check_ids(self) -> list[str]:
        ids = list(self.planned)
        seen = set(ids)
        for result in self.results:
            if result.check_id not in seen:
                ids.append(result.check_id)
                seen.add(result.check_id)
        return ids

    def to_dict(self) -> dict[str, Any]:
        data = _to_jsonable(self)
        for name in _OPTIONAL:
            if data[name] is None:
                del data[name]  # present only in runs that read fleet history or asked for a shape
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"run report has schema_version {version!r}; this preflight reads {SCHEMA_VERSION}"
            )
        data = dict(data)
        data.pop("verdict", None)  # derived, recomputed on load
        data["nodes"] = [NodeInfo(**n) for n in data.get("nodes", [])]
        data["results"] = [CheckResult.from_dict(r) for r in data.get("results", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# RunReport fields written only when set (results.json of older versions lacks them).
_OPTIONAL = ("history", "subset")

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


# Fields left out of the JSON while None, so that files stay as they were for what does not use them.
_OMIT_NONE: dict[type, tuple[str, ...]] = {}


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, (dict, list, tuple)):
        if isinstance(obj, dict):
            return {str(k): _to_jsonable(v) for k, v in obj.items()}
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        omit = _OMIT_NONE.get(type(obj), ())
        return {name: _to_jsonable(getattr(obj, name)) for name in _field_names(type(obj))
                if not (name in omit and getattr(obj, name) is None)}
    return obj


def plain_value(obj: Any) -> Any:
    """json's (and orjson's) `default`: a dataclass as the dict of its fields (their values are encoded in turn), an
    enum as its value, anything else as its text."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _field_names(type(obj))
    if names is not None:
        omit = _OMIT_NONE.get(type(obj), ())
        fields = getattr(obj, "__dict__", None)
        if fields is not None and tuple(fields) == names and type(obj) is not RunReport:
            # Its attributes are its fields, in their order: read as they are, not copied one by one.
            for name in omit:
                if fields[name] is None:
                    fields = dict(fields)
                    del fields[name]
            return fields
        out = {name: getattr(obj, name) for name in names if not (name in omit and getattr(obj, name) is None)}
        if type(obj) is RunReport:
            for name in _OPTIONAL:
                if out[name] is None:
                    del out[name]  # as to_dict() leaves them out
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    return str(obj)


def json_text(obj: Any, **options: Any) -> str:
    """JSON of model objects as `json.dumps(to_dict())` writes it, without building the copy first:
    json's C encoder walks the objects itself (str enums are their values; other objects their text).
    `options` go to json.dumps; `indent` would switch it to the pure-Python encoder. Strict: a NaN
    or infinity is refused (ValueError), never written as a bare token."""
    return json.dumps(obj, default=plain_value, allow_nan=False, **options)


_OMIT_NONE.update({Measurement: ("gpu", "param"), Finding: ("component",)})
