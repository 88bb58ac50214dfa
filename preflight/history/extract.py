"""What fleet history keeps of one run report: pure functions over the report dict (results.json).

Nothing here touches a database. `extract(report)` reads a report as `preflight run` writes it
(RunReport.to_dict() plus the derived `verdict`) and returns the rows the store records:
- the run itself (when, verdict, level, profile, version, command, a digest of what judged it);
- the image of each node: driver, CUDA, NCCL, kernel, OS, torch, tensorflow, GPU model and count,
  VBIOS where recorded, read from the facts of the checks that declare what of them fingerprints a
  node (Check.image), and a digest of them, so that runs on the same software can be grouped;
- every numeric figure (value, unit, threshold, its declaration, the spread of its samples);
- every finding (check, node, id, level) and every result's status.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from preflight.core.check import IMAGE_FIELDS as CHECK_IMAGE_FIELDS
from preflight.core.finite import dumps
from preflight.history.stats import relative_spread

CLUSTER = "cluster"  # preflight.core.model.CLUSTER_NODE: where a cluster check files its one result

# The image fingerprint, in the order the digest and the reports use (checks fill it: Check.image).
IMAGE_FIELDS = CHECK_IMAGE_FIELDS


class FigureKey(NamedTuple):
    """What makes two measurements the same figure across runs: check, name, series, condition, unit."""

    check_id: str
    name: str
    series: str = ""
    at: str = ""
    unit: str = ""

    @property
    def label(self) -> str:
        parts = [self.check_id, self.name]
        if self.series and self.series not in self.name:
            parts.append(f"[{self.series}]")
        return " ".join(parts)


@dataclass
class KeyInfo:
    figure: str = ""  # FIGURE_KINDS, or "" for an uncharted figure
    direction: str = ""  # "higher", "lower" or "" when neither is better
    comparison: str = ""


class FigureRow(NamedTuple):
    key: FigureKey
    node: str
    value: float
    threshold: float | None
    ok: bool | None
    samples_n: int
    spread: float | None  # relative: (max - min) / median of the samples
    gpu: int | None = None  # the GPU's index on its node, for a per-GPU figure


@dataclass
class Extracted:
    run_key: str
    started: datetime
    finished: datetime | None
    level: str
    profile: str
    preflight_version: str
    command: str
    config_digest: str
    report_schema: int | None
    nodes: list[str]  # every node of the run, in report order
    images: dict[str, dict[str, Any]]  # node -> fingerprint fields and "digest"
    results: list[tuple[str, str, str, float | None]]  # check_id, node, status, duration_s
    figures: list[FigureRow]
    keys: dict[FigureKey, KeyInfo]
    findings: list[tuple[str, str, str, str]]  # check_id, node, finding id, level
    warnings: list[str] = field(default_factory=list)
    # The verdict as the process that judged the run gave it; None: judged from `report` when first
    # asked (`verdict`), as recording an import does; finding outliers or placing figures never asks.
    judged: str | None = None
    report: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    said: str | None = None  # the headline the judging process gave; None: judged with the verdict

    @property
    def verdict(self) -> str:
        if self.judged is None:
            self.judged, self.said = judge(self.report or {})
        return self.judged

    @property
    def headline(self) -> str:
        """The headline judged with the verdict; "" for a verdict given without one (never judged twice)."""
        if self.said is None and self.judged is None:
            self.judged, self.said = judge(self.report or {})
        return self.said or ""


class NotAReport(ValueError):
    """The data is not a preflight run report."""


class _Figures:
    """The figures of one report as rows, each under its key (a key is made once per way it is written)."""

    def __init__(self) -> None:
        self.rows: list[FigureRow] = []
        self.keys: dict[FigureKey, KeyInfo] = {}
        self.thresholds: set[tuple[Any, ...]] = set()
        self._cache: dict[tuple[Any, ...], FigureKey | None] = {}  # (check, name, series, at, unit) -> key

    def _key(self, check_id: str, m: dict[str, Any]) -> FigureKey | None:
        raw = (check_id, m.get("name"), m.get("series"), m.get("at"), m.get("unit"))
        try:
            return self._cache[raw]
        except (KeyError, TypeError):  # TypeError: a condition that is no scalar, never cached
            key = figure_key(check_id, m) if m.get("name") else None
            if isinstance(raw[3], (str, int, float, type(None))):
                self._cache[raw] = key
            if key is not None and key not in self.keys:
                self.keys[key] = KeyInfo(str(m.get("figure") or ""), direction(m), str(m.get("comparison") or ""))
            return key

    def add(self, check_id: str, node: str, m: Any) -> None:
        if not isinstance(m, dict):
            return
        value = number(m.get("value"))
        key = self._key(check_id, m) if value is not None else None
        if key is None:
            return
        threshold = m.get("threshold")
        if threshold is not None:
            self.thresholds.add((key, m.get("comparison"), str(threshold)))
        ok = m.get("ok")
        samples = [x for x in map(number, m.get("samples") or ()) if x is not None]
        self.rows.append(FigureRow(key, str(m.get("node") or node), value, number(threshold),
                                   ok if ok is True or ok is False else None, len(samples),
                                   relative_spread(samples) if samples else None,
                                   m["gpu"] if isinstance(m.get("gpu"), int) else None))


def extract(report: dict[str, Any], verdict: str | None = None, headline: str | None = None) -> Extracted:
    """The rows of one report. `verdict`: the verdict this process judged the report with (a run it
    has just judged); without it (a file imported, a report read back) the results are judged again
    (judge), never taken on trust, when the verdict is first asked for."""
    if not isinstance(report, dict) or not isinstance(report.get("results"), list) or "started_at" not in report:
        raise NotAReport("not a preflight run report (expected an object with started_at and results)")
    results = [r for r in report["results"] if isinstance(r, dict) and r.get("check_id") and r.get("node")]
    nodes = node_names(report)
    facts = facts_by_node(results)
    figures = _Figures()
    findings: list[tuple[str, str, str, str]] = []
    statuses: list[tuple[str, str, str, float | None]] = []
    for result in results:
        check_id, node = str(result["check_id"]), str(result["node"])
        statuses.append((check_id, node, str(result.get("status", "")), number(result.get("duration_s"))))
        for m in result.get("measurements") or ():
            figures.add(check_id, node, m)
        findings += [(check_id, str(f.get("node") or node), str(f["id"]), str(f.get("level", "")))
                     for f in result.get("findings") or () if isinstance(f, dict) and f.get("id")]
    started = parse_time(report.get("started_at"))
    warnings = [] if started else [f"started_at {report.get('started_at')!r} is not a time; recorded as now"]
    return Extracted(
        run_key=run_key(report, nodes),
        started=started or datetime.now(timezone.utc).replace(tzinfo=None),
        finished=parse_time(report.get("finished_at")),
        level=str(report.get("level") or ""),
        profile=str(report.get("profile") or ""),
        preflight_version=str(report.get("preflight_version") or ""),
        command=str(report.get("command") or ""),
        config_digest=config_digest(report, {(k.check_id, k.name, str(c), t) for k, c, t in figures.thresholds}),
        report_schema=report.get("schema_version") if isinstance(report.get("schema_version"), int) else None,
        nodes=nodes,
        images={n: image_of(facts.get(n, {})) for n in nodes},
        results=statuses,
        figures=figures.rows,
        keys=figures.keys,
        findings=findings,
        warnings=warnings,
        judged=verdict, said=headline,
        report=report,
    )


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (strings, booleans, NaN, missing)."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def at_text(at: Any) -> str:
    """The measurement's condition as stored: 1073741824, 8, "gpu01 -> gpu02"; "" when unset."""
    if at is None:
        return ""
    if isinstance(at, float) and at.is_integer():
        return str(int(at))
    return str(at)


def direction(m: dict[str, Any]) -> str:
    if m.get("better") in ("higher", "lower"):
        return str(m["better"])
    return {">=": "higher", "<=": "lower"}.get(str(m.get("comparison")), "")


def figure_key(check_id: str, m: dict[str, Any]) -> FigureKey:
    return FigureKey(check_id, str(m.get("name", "")), str(m.get("series") or ""), at_text(m.get("at")),
                     str(m.get("unit") or ""))


def node_names(report: dict[str, Any]) -> list[str]:
    """The run's nodes: those listed, then any other that a node-scope result names, in order."""
    names = dict.fromkeys(str(n["name"]) for n in report.get("nodes") or [] if isinstance(n, dict) and n.get("name"))
    for result in report.get("results") or []:
        if isinstance(result, dict) and result.get("scope", "node") == "node" and result.get("node"):
            if result["node"] != CLUSTER:
                names.setdefault(str(result["node"]), None)
    return list(names)


def parse_time(text: Any) -> datetime | None:
    """An ISO 8601 time as naive UTC (the store keeps UTC), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when


def run_key(report: dict[str, Any], nodes: list[str] | None = None) -> str:
    """Identifies a run so that recording or importing it twice keeps one copy."""
    ident = [report.get("started_at"), report.get("finished_at"), report.get("command"),
             sorted(node_names(report) if nodes is None else nodes), len(report.get("results") or [])]
    return hashlib.sha256(dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]


def config_digest(report: dict[str, Any], thresholds: set[tuple[str, str, str, str]]) -> str:
    """A digest of what the run was judged against: level, profile, expectations and every threshold."""
    ident = {"level": report.get("level"), "profile": report.get("profile"), "fail_on": report.get("fail_on"),
             "expect": report.get("expect"), "expected": sorted(report.get("expected") or []),
             "planned": sorted(report.get("planned") or []), "thresholds": sorted(thresholds)}
    return hashlib.sha256(dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def judge(report: dict[str, Any]) -> tuple[str, str]:
    """The verdict of the report's own results and its headline, judged again: a recorded verdict is not taken on
    trust (a hand-edited file saying GO over a FAIL is recorded as what its results say);
    ("UNKNOWN", "") when the results cannot be judged."""
    try:
        from preflight.core.model import RunReport
        from preflight.core.verdict import decide

        decision = decide(RunReport.from_dict(report))
        return decision.verdict.value, decision.reason
    except Exception:  # noqa: BLE001 - an old or partial report: the verdict stays unknown
        return "UNKNOWN", ""


def recorded_verdict(report: dict[str, Any]) -> str | None:
    """The verdict the file itself states, if any (to say when it disagrees with its results)."""
    verdict = report.get("verdict")
    return str(verdict["verdict"]) if isinstance(verdict, dict) and verdict.get("verdict") else None


# ---------------------------------------------------------------------------------------------------
# The image of a node
# ---------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def image_checks(ids: frozenset[str]) -> tuple[Any, ...]:
    """One instance of each installed check among `ids` that reads a node's image (Check.image_source),
    most trusted source first (IMAGE_SOURCES), then by id. Only those checks are imported: a plugin the
    run skipped (absent from its results) never is."""
    from preflight.core.check import IMAGE_SOURCES
    from preflight.core.registry import discover

    found = [c for c in discover(only=set(ids)).checks.values() if c.image_source in IMAGE_SOURCES]
    return tuple(c() for c in sorted(found, key=lambda c: (IMAGE_SOURCES.index(c.image_source), c.id)))


def facts_by_node(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """node -> check id -> facts, for the checks the image is read from."""
    present = frozenset(str(r["check_id"]) for r in results if isinstance(r, dict) and r.get("check_id"))
    ids = {c.id for c in image_checks(present)}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        if isinstance(r, dict) and r.get("check_id") in ids:
            out.setdefault(str(r.get("node")), {})[r["check_id"]] = r.get("facts") or {}
    return out


def images_of_report(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every node's image (see image_of)."""
    facts = facts_by_node(report.get("results") or [])
    return {n: image_of(facts.get(n, {})) for n in node_names(report)}


def node_image(report: dict[str, Any], node: str) -> dict[str, Any]:
    return image_of(facts_by_node(report.get("results") or []).get(node, {}))


def image_of(facts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The node's software and GPU fingerprint from the facts its checks recorded (check id -> facts):
    each field from the most trusted check that states it (Check.image); "digest" is None when no
    check recorded any of it."""
    image: dict[str, Any] = dict.fromkeys(IMAGE_FIELDS)
    for check in image_checks(frozenset(facts)):
        own = facts.get(check.id)
        if not isinstance(own, dict):
            continue
        try:
            stated = check.image(own)
        except Exception:  # noqa: BLE001 - facts of another version of the check: its image is unknown
            continue
        for key in IMAGE_FIELDS:
            if image[key] is None and stated.get(key) not in (None, ""):
                image[key] = stated[key]
    image = {k: (None if v in (None, "") else (v if k == "gpu_count" else str(v))) for k, v in image.items()}
    image["digest"] = image_digest(image)
    return image


def image_digest(image: dict[str, Any]) -> str | None:
    values = [image.get(k) for k in IMAGE_FIELDS]
    if all(v is None for v in values):
        return None
    return hashlib.sha256(dumps(values, default=str).encode()).hexdigest()[:16]


def node_kind(image: dict[str, Any]) -> str:
    """Nodes of the same kind have the same GPU model and count: peers for the fleet outlier test."""
    if not image.get("gpu_model") and not image.get("gpu_count"):
        return "no GPU"
    return f"{image.get('gpu_count') or 0} x {image.get('gpu_model') or 'GPU'}"


def describe_image(image: dict[str, Any]) -> str:
    """driver 550.54.15, CUDA 12.4, NCCL 2.20.5, torch 2.4.1, ...: the fields that are set."""
    labels = {"driver": "driver", "cuda": "CUDA", "cuda_driver": "driver CUDA", "nccl": "NCCL", "kernel": "kernel",
              "os": "", "torch": "torch", "tensorflow": "tensorflow", "gpu_model": "", "gpu_count": "GPUs",
              "vbios": "VBIOS"}
    parts = []
    for k in IMAGE_FIELDS:
        value = image.get(k)
        if value is None:
            continue
        parts.append(f"{labels[k]} {value}".strip() if k != "gpu_count" else f"{value} GPUs")
    return ", ".join(parts) or "no image facts recorded"
