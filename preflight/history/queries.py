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
from preflight.core.nodeset import fold
from preflight.history.outliers import FAIL_SLOW_ID, OUTLIER_ID
from preflight.history.schema import (figure_keys, figure_stats, figures, findings, node_images, nodes, results,
                                      runs)
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
        count = conn.execute(select(func.coalesce(func.sum(figure_stats.c.n), 0))
                             .where(figure_stats.c.run_id == run_id)).scalar_one()
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
            return keys, _trend_per_node(conn, by_id, nodes_in, digests, since, until)
        query = (select(runs.c.id, runs.c.started, figure_stats)
                 .join(runs, runs.c.id == figure_stats.c.run_id)
                 .where(figure_stats.c.key_id.in_(list(by_id)), *_time_filters(runs.c.started, since, until)))
        if digests is not None:
            query = query.where(figure_stats.c.image.in_(digests))
        rows = [TrendRow(r.id, r.started, by_id[r.key_id], r.image, r.n, r.median, r.p05, r.p95, r.min, r.max)
                for r in conn.execute(query.order_by(runs.c.started, runs.c.id, figure_stats.c.key_id))]
    return keys, rows


def _trend_per_node(conn: Connection, by_id: dict[int, Key], nodes_in: list[str] | None, digests: set[str] | None,
                    since: datetime | None, until: datetime | None) -> list[TrendRow]:
    """Per-node rows. With named nodes, looked up run by run through the figures' primary key (run,
    node, figure), which costs the same whatever the size of the fleet."""
    run_rows = conn.execute(select(runs.c.id, runs.c.started).where(*_time_filters(runs.c.started, since, until))
                            .order_by(runs.c.started, runs.c.id)).all()
    started = dict(run_rows)
    names: dict[int, str] = {}
    if nodes_in:
        names = {i: n for n, i in _node_ids(conn, nodes_in).items()}
        if not names:
            return []
    out: list[TrendRow] = []
    run_ids = [r for r, _ in run_rows]
    for i in range(0, len(run_ids), CHUNK):
        query = (select(figures.c.run_id, figures.c.key_id, figures.c.node_id, node_images.c.digest, figures.c.value)
                 .select_from(figures.outerjoin(node_images, and_(node_images.c.run_id == figures.c.run_id,
                                                                  node_images.c.node_id == figures.c.node_id)))
                 .where(figures.c.run_id.in_(run_ids[i:i + CHUNK]), figures.c.key_id.in_(list(by_id))))
        if names:
            query = query.where(figures.c.node_id.in_(list(names)))
        if digests is not None:
            query = query.where(node_images.c.digest.in_(digests))
        for run_id, key_id, node_id, digest, value in conn.execute(query):
            out.append(TrendRow(run_id, started[run_id], by_id[key_id], digest or "", 1, value, value, value, value,
                                value, names.get(node_id) or str(node_id)))
    if not names:  # every node: name them once
        ids = sorted({int(r.node) for r in out})
        for j in range(0, len(ids), CHUNK):
            names.update(dict(conn.execute(select(nodes.c.id, nodes.c.name)
                                            .where(nodes.c.id.in_(ids[j:j + CHUNK]))).all()))
        out = [TrendRow(r.run_id, r.started, r.key, r.image, 1, r.median, r.p05, r.p95, r.low, r.high,
                        names[int(r.node)]) for r in out]
    out.sort(key=lambda r: (r.started, r.run_id, r.node, r.key.id))
    return out


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


RECENT_SPAN = 10  # a node's last n runs are looked for among the fleet's latest 10 n runs (at least 50)


def nodes_summary(store: Store, *, nodes_in: list[str] | None = None, window: int = 5) -> list[NodeRow]:
    """Every recorded node (links are not nodes), with how many of its last `window` runs named it a
    fleet outlier. Those runs are looked for among the fleet's most recent max(10 window, 50) runs,
    so that the answer costs the same at 20 runs or 20,000; a node absent from all of them shows 0/0."""
    span = max(window * RECENT_SPAN, 50)
    with store.connect() as conn:
        ids = list(_node_ids(conn, nodes_in).values()) if nodes_in else None
        totals = (select(node_images.c.node_id, func.count(), func.max(node_images.c.run_id))
                  .group_by(node_images.c.node_id))
        recent_runs = select(runs.c.id).order_by(runs.c.started.desc(), runs.c.id.desc()).limit(span).subquery()
        ranked = (select(node_images.c.node_id, node_images.c.run_id, node_images.c.digest, runs.c.started,
                         func.row_number().over(partition_by=node_images.c.node_id,
                                                order_by=(runs.c.started.desc(), runs.c.id.desc())).label("recent"))
                  .join(runs, runs.c.id == node_images.c.run_id)
                  .where(node_images.c.run_id.in_(select(recent_runs.c.id))))
        bad = (select(findings.c.node_id, findings.c.run_id, findings.c.check_id)
               .where(findings.c.finding_id.in_((OUTLIER_ID, FAIL_SLOW_ID)), findings.c.run_id.in_(select(recent_runs.c.id))))
        if ids is not None:
            totals = totals.where(node_images.c.node_id.in_(ids))
            ranked = ranked.where(node_images.c.node_id.in_(ids))
            bad = bad.where(findings.c.node_id.in_(ids))
        sub = ranked.subquery()
        rows = select(sub).where(sub.c.recent <= window)
        counts = {node_id: (count, last_id) for node_id, count, last_id in conn.execute(totals)}
        recent: dict[int, list[Any]] = defaultdict(list)
        for r in conn.execute(rows):
            recent[r.node_id].append(r)
        flagged: dict[tuple[int, int], set[str]] = defaultdict(set)
        for node_id, run_id, check_id in conn.execute(bad):
            flagged[(node_id, run_id)].add(check_id)
        wanted = sorted(counts)
        names: dict[int, str] = {}
        for i in range(0, len(wanted), CHUNK):
            names.update(dict(conn.execute(select(nodes.c.id, nodes.c.name)
                                            .where(nodes.c.id.in_(wanted[i:i + CHUNK]))).all()))
        # Last seen: from the recent runs, or for a node absent from them, its highest run id's start.
        absent = sorted({last for node_id, (_, last) in counts.items() if node_id not in recent})
        when: dict[int, datetime] = {}
        for i in range(0, len(absent), CHUNK):
            when.update(dict(conn.execute(select(runs.c.id, runs.c.started)
                                           .where(runs.c.id.in_(absent[i:i + CHUNK]))).all()))
    out = []
    for node_id, (count, last_id) in counts.items():
        members = sorted(recent.get(node_id, []), key=lambda r: (r.started, r.run_id), reverse=True)[:window]
        hits = [flagged[(node_id, m.run_id)] for m in members if (node_id, m.run_id) in flagged]
        last = members[0].started if members else when[last_id]
        out.append(NodeRow(names[node_id], int(count), last, (members[0].digest or "") if members else "",
                           len(hits), len(members), sorted({c for h in hits for c in h})))
    out.sort(key=lambda n: (-n.outlier_runs, n.name))
    return out


def lemons(store: Store, *, k: int = 3, n: int = 5, nodes_in: list[str] | None = None) -> list[NodeRow]:
    """Nodes named a fleet outlier in at least k of their last n runs, worst first."""
    if k < 1 or n < 1 or k > n:
        raise QueryError(f"lemons need 1 <= k <= n, not k={k}, n={n}")
    return [row for row in nodes_summary(store, nodes_in=nodes_in, window=n) if row.outlier_runs >= k]


__all__ = ["Key", "NodeRow", "QueryError", "RunDetail", "RunRow", "TrendRow", "find_keys",
           "image_fields", "lemons", "list_runs", "nodes_summary", "resolve_image", "run_id_of", "show_run",
           "trend"]
