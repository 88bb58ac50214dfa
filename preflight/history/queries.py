"""Questions asked of fleet history: which runs, how a figure moved, what an image change did, which
nodes keep lagging their peers.

Every function takes an open Store and returns plain dataclasses; the command line words them and
`--json` prints them. Time filters take naive UTC datetimes, as the store keeps them. An image is
named by a prefix of its digest (`3f2a9c`) or by fields (`driver=550.54.15,nccl=2.20.5`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from preflight.history.extract import IMAGE_FIELDS, describe_image
from preflight.history.nodeset import fold
from preflight.history.outliers import OUTLIER_ID
from preflight.history.schema import (figure_keys, figure_stats, figures, findings, node_images, nodes, results,
                                      runs)
from preflight.history.stats import MANN_WHITNEY, mann_whitney_u, median, percentile
from preflight.history.store import Store

CHUNK = 500


class QueryError(ValueError):
    """A filter that matches nothing, or an ambiguous name: the message says which and offers the known ones."""


# ---------------------------------------------------------------------------------------------------
# Names: images, runs, figures
# ---------------------------------------------------------------------------------------------------

def resolve_image(conn: Connection, spec: str) -> set[str]:
    """The digests an image spec names: a digest prefix, or FIELD=VALUE pairs joined by commas."""
    spec = spec.strip()
    if "=" in spec:
        where = []
        for pair in spec.split(","):
            name, _, value = pair.partition("=")
            name = name.strip()
            if name not in IMAGE_FIELDS:
                raise QueryError(f"unknown image field {name!r} in {spec!r}; fields: {', '.join(IMAGE_FIELDS)}")
            column = node_images.c[name]
            where.append(column == (int(value) if name == "gpu_count" and value.strip().isdigit() else value.strip()))
        query = select(node_images.c.digest).where(and_(*where), node_images.c.digest.is_not(None)).distinct()
    else:
        if len(spec) < 4 or any(c not in "0123456789abcdef" for c in spec.lower()):
            raise QueryError(f"image {spec!r}: give at least 4 hex digits of its digest, or FIELD=VALUE pairs "
                             "such as driver=550.54.15")
        query = select(node_images.c.digest).where(node_images.c.digest.like(f"{spec.lower()}%")).distinct()
    found = {d for (d,) in conn.execute(query)}
    if not found:
        raise QueryError(f"no recorded node image matches {spec!r} (`preflight history list` shows the images)")
    return found


def image_fields(conn: Connection, digests: set[str] | list[str]) -> dict[str, dict[str, Any]]:
    """digest -> its fingerprint fields, from one node that ran it."""
    out: dict[str, dict[str, Any]] = {}
    wanted = sorted(digests)
    for i in range(0, len(wanted), CHUNK):
        rows = conn.execute(select(node_images.c.digest, *[node_images.c[f] for f in IMAGE_FIELDS])
                            .where(node_images.c.digest.in_(wanted[i:i + CHUNK])))
        for row in rows:
            out.setdefault(row[0], dict(zip(IMAGE_FIELDS, row[1:])))
    return out


@dataclass(frozen=True)
class Key:
    id: int
    check_id: str
    name: str
    series: str
    at: str
    unit: str
    figure: str
    direction: str

    @property
    def label(self) -> str:
        extra = f" [{self.series}]" if self.series and self.series not in self.name else ""
        return f"{self.check_id}: {self.name}{extra}"


def _key_from(row: Any) -> Key:
    return Key(row.id, row.check_id, row.name, row.series, row.at, row.unit, row.figure, row.direction)


def find_keys(conn: Connection, *, figure: str | None = None, check: str | None = None,
              series: str | None = None) -> list[Key]:
    """Figure keys by exact name (or, failing that, a case-insensitive part of it), check id and series."""
    if not (figure or check):
        raise QueryError("name a figure (--figure) or a check (--check), with --series to narrow it")
    query = select(figure_keys)
    if check:
        query = query.where(figure_keys.c.check_id == check)
    if series is not None:
        query = query.where(figure_keys.c.series == series)
    if figure:
        exact = [_key_from(r) for r in conn.execute(query.where(figure_keys.c.name == figure))]
        if exact:
            return exact
        query = query.where(func.lower(figure_keys.c.name).contains(figure.lower(), autoescape=True))
    found = [_key_from(r) for r in conn.execute(query.order_by(figure_keys.c.check_id, figure_keys.c.name))]
    if not found:
        known = conn.execute(select(figure_keys.c.check_id, figure_keys.c.name)
                             .where(figure_keys.c.check_id == check) if check else
                             select(figure_keys.c.check_id, figure_keys.c.name).limit(12)).all()
        hint = "; known: " + ", ".join(f"{c}: {n}" for c, n in known[:12]) if known else ""
        what = " ".join(x for x in (check or "", f"series {series!r}" if series else "",
                                    f"figure {figure!r}" if figure else "") if x)
        raise QueryError(f"no recorded figure matches {what}{hint}")
    return found


def run_id_of(conn: Connection, spec: str | int) -> int:
    """A run by its id, or `latest`."""
    if str(spec) in ("latest", "last"):
        found = conn.execute(select(runs.c.id).order_by(runs.c.started.desc(), runs.c.id.desc()).limit(1)).scalar()
    elif str(spec).isdigit():
        found = conn.execute(select(runs.c.id).where(runs.c.id == int(spec))).scalar()
    else:
        raise QueryError(f"run {spec!r}: give a run id (`preflight history list`) or `latest`")
    if found is None:
        raise QueryError(f"no recorded run {spec}" if str(spec).isdigit() else "no run recorded yet")
    return int(found)


def _node_ids(conn: Connection, names: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for i in range(0, len(names), CHUNK):
        ids.update({name: node_id for node_id, name in conn.execute(
            select(nodes.c.id, nodes.c.name).where(nodes.c.name.in_(names[i:i + CHUNK])))})
    return ids


def _time_filters(column: Any, since: datetime | None, until: datetime | None) -> list[Any]:
    out = []
    if since is not None:
        out.append(column >= since)
    if until is not None:
        out.append(column <= until)
    return out


# ---------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------

@dataclass
class RunRow:
    id: int
    started: datetime
    verdict: str
    level: str
    profile: str
    preflight_version: str
    node_count: int
    command: str
    config_digest: str
    images: dict[str, int] = field(default_factory=dict)  # digest -> nodes on it ("" for nodes without facts)


def list_runs(store: Store, *, nodes_in: list[str] | None = None, image: str | None = None,
              verdict: str | None = None, since: datetime | None = None, until: datetime | None = None,
              limit: int | None = None) -> list[RunRow]:
    """Runs newest first; nodes_in keeps the runs that any of these nodes took part in."""
    with store.connect() as conn:
        query = select(runs).where(*_time_filters(runs.c.started, since, until))
        if verdict:
            query = query.where(runs.c.verdict == verdict.upper())
        if image:
            digests = resolve_image(conn, image)
            query = query.where(runs.c.id.in_(select(node_images.c.run_id).where(node_images.c.digest.in_(digests))))
        if nodes_in:
            ids = list(_node_ids(conn, nodes_in).values())
            if not ids:
                raise QueryError(f"none of these nodes was ever recorded: {fold(nodes_in)}")
            query = query.where(runs.c.id.in_(select(node_images.c.run_id).where(node_images.c.node_id.in_(ids))))
        query = query.order_by(runs.c.started.desc(), runs.c.id.desc())
        if limit:
            query = query.limit(limit)
        found = [RunRow(r.id, r.started, r.verdict, r.level, r.profile, r.preflight_version, r.node_count,
                        r.command, r.config_digest) for r in conn.execute(query)]
        by_id = {r.id: r for r in found}
        ids = list(by_id)
        for i in range(0, len(ids), CHUNK):
            counts = conn.execute(select(node_images.c.run_id, node_images.c.digest, func.count())
                                  .where(node_images.c.run_id.in_(ids[i:i + CHUNK]))
                                  .group_by(node_images.c.run_id, node_images.c.digest))
            for run_id, digest, count in counts:
                by_id[run_id].images[digest or ""] = count
    return found


@dataclass
class RunDetail:
    run: RunRow
    nodes: str  # folded
    images: list[dict[str, Any]]  # digest, fields, description, nodes (folded)
    statuses: dict[str, int]  # status -> results
    findings: list[dict[str, Any]]  # check_id, node, id, level, count: WARN and worse, outliers first
    figures: int


def show_run(store: Store, spec: str | int) -> RunDetail:
    with store.connect() as conn:
        run_id = run_id_of(conn, spec)
        row = list_runs_by_id(conn, run_id)
        members = conn.execute(select(nodes.c.name, node_images).join(node_images, nodes.c.id == node_images.c.node_id)
                               .where(node_images.c.run_id == run_id)).all()
        by_image: dict[str, list[Any]] = defaultdict(list)
        for m in members:
            by_image[m.digest or ""].append(m)
        images = [{"digest": d, "fields": {f: getattr(ms[0], f) for f in IMAGE_FIELDS},
                   "description": describe_image({f: getattr(ms[0], f) for f in IMAGE_FIELDS}),
                   "nodes": fold([m.name for m in ms]), "count": len(ms)}
                  for d, ms in sorted(by_image.items(), key=lambda kv: -len(kv[1]))]
        row.images = {i["digest"]: i["count"] for i in images}
        statuses = dict(conn.execute(select(results.c.status, func.count()).where(results.c.run_id == run_id)
                                     .group_by(results.c.status)).all())
        found = conn.execute(select(findings.c.check_id, nodes.c.name, findings.c.finding_id, findings.c.level)
                             .join(nodes, nodes.c.id == findings.c.node_id)
                             .where(findings.c.run_id == run_id, findings.c.level.in_(["WARN", "FAIL", "ERROR"]))
                             ).all()
        order = {"ERROR": 0, "FAIL": 1, "WARN": 2}
        counted: dict[tuple[str, str, str, str], int] = defaultdict(int)
        for c, n, f, lvl in found:
            counted[(c, n, f, lvl)] += 1
        listed = sorted(({"check_id": c, "node": n, "id": f, "level": lvl, "count": k}
                         for (c, n, f, lvl), k in counted.items()),
                        key=lambda x: (x["id"] != OUTLIER_ID, order.get(x["level"], 3), x["check_id"], x["node"]))
        count = conn.execute(select(func.count()).select_from(figures).where(figures.c.run_id == run_id)).scalar_one()
    return RunDetail(row, fold([m.name for m in members]), images, statuses, listed, int(count))


def list_runs_by_id(conn: Connection, run_id: int) -> RunRow:
    r = conn.execute(select(runs).where(runs.c.id == run_id)).one()
    return RunRow(r.id, r.started, r.verdict, r.level, r.profile, r.preflight_version, r.node_count, r.command,
                  r.config_digest)


# ---------------------------------------------------------------------------------------------------
# Trend
# ---------------------------------------------------------------------------------------------------

@dataclass
class TrendRow:
    run_id: int
    started: datetime
    key: Key
    image: str  # digest, "" when unknown
    n: int  # node results behind the row (1 with per-node rows)
    median: float
    p05: float
    p95: float
    low: float
    high: float
    node: str = ""  # set on per-node rows


def trend(store: Store, *, figure: str | None = None, check: str | None = None, series: str | None = None,
          nodes_in: list[str] | None = None, image: str | None = None, since: datetime | None = None,
          until: datetime | None = None, per_node: bool = False) -> tuple[list[Key], list[TrendRow]]:
    """One row per run, figure and image (median and spread over the nodes), oldest first; with
    nodes_in or per_node, one row per node instead."""
    with store.connect() as conn:
        keys = find_keys(conn, figure=figure, check=check, series=series)
        by_id = {k.id: k for k in keys}
        digests = resolve_image(conn, image) if image else None
        if nodes_in or per_node:
            query = (select(runs.c.id, runs.c.started, figures.c.key_id, node_images.c.digest, nodes.c.name,
                            figures.c.value)
                     .select_from(figures.join(runs, runs.c.id == figures.c.run_id)
                                  .join(nodes, nodes.c.id == figures.c.node_id)
                                  .outerjoin(node_images, and_(node_images.c.run_id == figures.c.run_id,
                                                               node_images.c.node_id == figures.c.node_id)))
                     .where(figures.c.key_id.in_(list(by_id)), *_time_filters(runs.c.started, since, until)))
            if nodes_in:
                query = query.where(nodes.c.name.in_(nodes_in))
            if digests is not None:
                query = query.where(node_images.c.digest.in_(digests))
            rows = [TrendRow(r, s, by_id[k], d or "", 1, v, v, v, v, v, n)
                    for r, s, k, d, n, v in conn.execute(query.order_by(runs.c.started, runs.c.id, nodes.c.name))]
            return keys, rows
        query = (select(runs.c.id, runs.c.started, figure_stats)
                 .join(runs, runs.c.id == figure_stats.c.run_id)
                 .where(figure_stats.c.key_id.in_(list(by_id)), *_time_filters(runs.c.started, since, until)))
        if digests is not None:
            query = query.where(figure_stats.c.image.in_(digests))
        rows = [TrendRow(r.id, r.started, by_id[r.key_id], r.image, r.n, r.median, r.p05, r.p95, r.min, r.max)
                for r in conn.execute(query.order_by(runs.c.started, runs.c.id, figure_stats.c.key_id))]
    return keys, rows


# ---------------------------------------------------------------------------------------------------
# Compare two images
# ---------------------------------------------------------------------------------------------------

MIN_RUNS_EACH = 5  # with this many runs on each image, runs are the observations; else node results
ALPHA = 0.01
MIN_CHANGE = 0.01  # a relative change smaller than this is never called beyond noise


@dataclass
class Comparison:
    key: Key
    unit_of_observation: str  # "runs" (each run's median over its nodes) or "node results"
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    spread_a: float | None  # relative interquartile range of the observations
    spread_b: float | None
    change: float | None  # (median_b - median_a) / |median_a|
    p_value: float
    test: str
    beyond_noise: bool
    verdict: str  # "worse", "better", "changed" (no direction known) or "within noise"


def compare(store: Store, image_a: str, image_b: str, *, figure: str | None = None, check: str | None = None,
            series: str | None = None, since: datetime | None = None, until: datetime | None = None,
            alpha: float = ALPHA, min_change: float = MIN_CHANGE) -> tuple[set[str], set[str], list[Comparison]]:
    """Every figure measured on both images: medians, spread, change, and the Mann-Whitney U test."""
    with store.connect() as conn:
        side_a, side_b = resolve_image(conn, image_a), resolve_image(conn, image_b)
        if side_a & side_b:
            raise QueryError(f"{image_a!r} and {image_b!r} name the same image {sorted(side_a & side_b)[0]}")
        keys = {k.id: k for k in find_keys(conn, figure=figure, check=check, series=series)} \
            if (figure or check) else None
        query = (select(figure_stats.c.key_id, figure_stats.c.image, figure_stats.c.median)
                 .join(runs, runs.c.id == figure_stats.c.run_id)
                 .where(figure_stats.c.image.in_(side_a | side_b), *_time_filters(runs.c.started, since, until)))
        if keys is not None:
            query = query.where(figure_stats.c.key_id.in_(list(keys)))
        per_run: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for key_id, image, value in conn.execute(query):
            per_run[key_id][0 if image in side_a else 1].append(value)
        both = [k for k, (a, b) in per_run.items() if a and b]
        few = [k for k in both if min(len(per_run[k][0]), len(per_run[k][1])) < MIN_RUNS_EACH]
        per_node: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for i in range(0, len(few), CHUNK):
            raw = (select(figures.c.key_id, node_images.c.digest, figures.c.value)
                   .select_from(figures.join(node_images, and_(node_images.c.run_id == figures.c.run_id,
                                                               node_images.c.node_id == figures.c.node_id))
                                .join(runs, runs.c.id == figures.c.run_id))
                   .where(figures.c.key_id.in_(few[i:i + CHUNK]), node_images.c.digest.in_(side_a | side_b),
                          *_time_filters(runs.c.started, since, until)))
            for key_id, digest, value in conn.execute(raw):
                per_node[key_id][0 if digest in side_a else 1].append(value)
        if keys is None:
            keys = {r.id: _key_from(r) for r in conn.execute(select(figure_keys).where(figure_keys.c.id.in_(both)))} \
                if both else {}
    out = []
    for key_id in both:
        unit, (a, b) = ("node results", per_node[key_id]) if key_id in per_node else ("runs", per_run[key_id])
        out.append(_compare_one(keys[key_id], unit, a, b, alpha, min_change))
    rank = {"worse": 0, "changed": 1, "better": 2, "within noise": 3}
    out.sort(key=lambda c: (rank[c.verdict], -abs(c.change or 0), c.key.label))
    return side_a, side_b, out


def _relative_iqr(values: list[float]) -> float | None:
    centre = median(values)
    if len(values) < 2 or not centre:
        return None
    return (percentile(values, 75) - percentile(values, 25)) / abs(centre)


def _compare_one(key: Key, unit: str, a: list[float], b: list[float], alpha: float, min_change: float) -> Comparison:
    ma, mb = median(a), median(b)
    change = (mb - ma) / abs(ma) if ma else None
    test = mann_whitney_u(a, b)
    beyond = test.p_value < alpha and (change is None or abs(change) >= min_change) and ma != mb
    if not beyond:
        verdict = "within noise"
    elif not key.direction:
        verdict = "changed"
    else:
        verdict = "better" if (mb > ma) == (key.direction == "higher") else "worse"
    return Comparison(key, unit, len(a), len(b), ma, mb, _relative_iqr(a), _relative_iqr(b), change,
                      test.p_value, f"{MANN_WHITNEY} ({test.method})", beyond, verdict)


# ---------------------------------------------------------------------------------------------------
# Nodes and lemons
# ---------------------------------------------------------------------------------------------------

@dataclass
class NodeRow:
    name: str
    runs: int
    last_seen: datetime
    image: str  # the digest in its latest run
    outlier_runs: int = 0  # of the last `window` runs, how many named it a fleet outlier
    window: int = 0  # runs considered
    checks: list[str] = field(default_factory=list)  # the checks it lagged its peers in


def nodes_summary(store: Store, *, nodes_in: list[str] | None = None, window: int = 5) -> list[NodeRow]:
    """Every recorded node (of real nodes: links are not listed), with its outlier count over its last
    `window` runs."""
    with store.connect() as conn:
        ranked = (select(node_images.c.node_id, node_images.c.run_id, node_images.c.digest, runs.c.started,
                         func.row_number().over(partition_by=node_images.c.node_id,
                                                order_by=(runs.c.started.desc(), runs.c.id.desc())).label("recent"),
                         func.count().over(partition_by=node_images.c.node_id).label("total"))
                  .join(runs, runs.c.id == node_images.c.run_id))
        if nodes_in:
            ids = list(_node_ids(conn, nodes_in).values())
            ranked = ranked.where(node_images.c.node_id.in_(ids))
        sub = ranked.subquery()
        rows = conn.execute(select(sub, nodes.c.name).join(nodes, nodes.c.id == sub.c.node_id)
                            .where(sub.c.recent <= max(1, window))).all()
        recent: dict[int, list[Any]] = defaultdict(list)
        for r in rows:
            recent[r.node_id].append(r)
        bad = conn.execute(select(findings.c.node_id, findings.c.run_id, findings.c.check_id)
                           .where(findings.c.finding_id == OUTLIER_ID,
                                  findings.c.node_id.in_(select(sub.c.node_id).where(sub.c.recent <= window)))
                           ).all() if recent else []
    flagged: dict[tuple[int, int], set[str]] = defaultdict(set)
    for node_id, run_id, check_id in bad:
        flagged[(node_id, run_id)].add(check_id)
    out = []
    for node_id, members in recent.items():
        members.sort(key=lambda r: r.recent)
        hits = [flagged[(node_id, m.run_id)] for m in members if (node_id, m.run_id) in flagged]
        checks = sorted({c for h in hits for c in h})
        out.append(NodeRow(members[0].name, members[0].total, members[0].started, members[0].digest or "",
                           len(hits), len(members), checks))
    out.sort(key=lambda n: (-n.outlier_runs, n.name))
    return out


def lemons(store: Store, *, k: int = 3, n: int = 5, nodes_in: list[str] | None = None) -> list[NodeRow]:
    """Nodes named a fleet outlier in at least k of their last n runs, worst first."""
    if k < 1 or n < 1 or k > n:
        raise QueryError(f"lemons need 1 <= k <= n, not k={k}, n={n}")
    return [row for row in nodes_summary(store, nodes_in=nodes_in, window=n) if row.outlier_runs >= k]


__all__ = ["Comparison", "Key", "NodeRow", "QueryError", "RunDetail", "RunRow", "TrendRow", "compare", "find_keys",
           "image_fields", "lemons", "list_runs", "nodes_summary", "resolve_image", "run_id_of", "show_run",
           "trend"]
