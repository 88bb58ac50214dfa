"""What the fleet site shows, read from the store: the fleet's readiness now and over time, every run,
the key figures over time with their band of normal, the nodes that keep lagging, and what each
change of node image did (preflight.history.site_changes). Pure reads; preflight.history.site_page
renders it.

A node is ready in a run when nothing blocking is on it: none of its results FAILed or could not
measure, and no FAIL or ERROR finding names it (an isolation finding pinned on it included). The
fleet's readiness is the share of the recorded nodes (in the filters) that were ready in their
latest run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from preflight.core.nodeset import fold
from preflight.history.queries import NodeRow, _node_ids, _time_filters, lemons
from preflight.history.schema import figure_keys, figure_stats, findings, node_images, nodes, results, runs
from preflight.history.stats import percentile
from preflight.history.store import Store

BLOCKING = ("FAIL", "ERROR")
MAX_CHARTS = 12  # key figures drawn, the most often recorded first
MIN_BAND_RUNS = 5  # GO runs a figure needs before its band of normal is drawn
CHUNK = 500


@dataclass
class Filters:
    since: datetime | None = None
    until: datetime | None = None
    nodes_in: list[str] | None = None
    image: str | None = None

    def describe(self) -> str:
        parts = []
        if self.since:
            parts.append(f"since {self.since:%Y-%m-%d %H:%M}")
        if self.until:
            parts.append(f"until {self.until:%Y-%m-%d %H:%M}")
        if self.nodes_in:
            parts.append(f"nodes {fold(self.nodes_in)}")
        if self.image:
            parts.append(f"image {self.image}")
        return ", ".join(parts) or "every recorded run"


@dataclass
class RunEntry:
    id: int
    started: datetime
    verdict: str
    headline: str
    nodes: str  # folded
    node_count: int
    ready: int  # nodes of this run with nothing blocking on them
    report: Path | None  # report.html beside the run's results.json, while it is on disk


@dataclass
class Readiness:
    ready: int
    total: int
    not_ready: str  # folded
    series: list[tuple[datetime, float]]  # the share after each run, oldest first

    @property
    def share(self) -> float | None:
        return self.ready / self.total if self.total else None


@dataclass
class FigureSeries:
    """One key figure over time: each run's median over its nodes, with its 5th-95th percentile."""

    check_id: str
    label: str
    unit: str
    direction: str  # "higher", "lower" or ""
    points: list[tuple[datetime, float, float, float]] = field(default_factory=list)  # started, median, p05, p95
    band: tuple[float, float] | None = None  # 5th-95th percentile of the GO runs' medians
    band_runs: int = 0


@dataclass
class Site:
    filters: Filters
    runs: list[RunEntry]
    readiness: Readiness
    figures: list[FigureSeries]
    lagging: list[NodeRow]
    changes: list[Any]  # preflight.history.site_changes.ImageChange
    verdicts: dict[str, int]  # runs by verdict


def gather(store: Store, filters: Filters) -> Site:
    from preflight.history.site_changes import image_changes

    with store.connect() as conn:
        run_rows = _runs(conn, filters)
        members, ready_by_run = _members(conn, [r.id for r in run_rows], filters.nodes_in)
        entries = [_entry(r, members.get(r.id, {}), ready_by_run.get(r.id, set())) for r in run_rows]
        readiness = _readiness(run_rows, members, ready_by_run)
        series = _figures(conn, run_rows)
        changes = image_changes(conn, store, run_rows, members, filters)
    verdicts: dict[str, int] = defaultdict(int)
    for r in run_rows:
        verdicts[r.verdict] += 1
    return Site(filters, entries, readiness, series, lemons(store, nodes_in=filters.nodes_in), changes, dict(verdicts))


def _runs(conn: Any, filters: Filters) -> list[Any]:
    """The runs in the filters, newest first."""
    from preflight.history.queries import resolve_image

    query = select(runs).where(*_time_filters(runs.c.started, filters.since, filters.until))
    if filters.image:
        digests = resolve_image(conn, filters.image)
        query = query.where(runs.c.id.in_(select(node_images.c.run_id).where(node_images.c.digest.in_(digests))))
    if filters.nodes_in:
        ids = list(_node_ids(conn, filters.nodes_in).values())
        query = query.where(runs.c.id.in_(select(node_images.c.run_id).where(node_images.c.node_id.in_(ids))))
    return conn.execute(query.order_by(runs.c.started.desc(), runs.c.id.desc())).all()


def _members(conn: Any, run_ids: list[int], nodes_in: list[str] | None
             ) -> tuple[dict[int, dict[str, str]], dict[int, set[str]]]:
    """Each run's nodes (name -> image digest) and the nodes that were ready in it."""
    wanted = set(nodes_in) if nodes_in else None
    members: dict[int, dict[str, str]] = defaultdict(dict)
    blocked: dict[int, set[str]] = defaultdict(set)
    for i in range(0, len(run_ids), CHUNK):
        chunk = run_ids[i:i + CHUNK]
        for run_id, name, digest in conn.execute(
                select(node_images.c.run_id, nodes.c.name, node_images.c.digest)
                .join(nodes, nodes.c.id == node_images.c.node_id).where(node_images.c.run_id.in_(chunk))):
            if wanted is None or name in wanted:
                members[run_id][name] = digest or ""
        for table, column in ((results, results.c.status), (findings, findings.c.level)):
            for run_id, name in conn.execute(
                    select(table.c.run_id, nodes.c.name).join(nodes, nodes.c.id == table.c.node_id)
                    .where(table.c.run_id.in_(chunk), column.in_(BLOCKING)).distinct()):
                blocked[run_id].add(name)
    ready = {run_id: {n for n in names if n not in blocked.get(run_id, set())} for run_id, names in members.items()}
    return members, ready


def _entry(row: Any, members: dict[str, str], ready: set[str]) -> RunEntry:
    report = None
    if row.source:
        beside = Path(row.source).parent / "report.html"
        report = beside if beside.is_file() else None
    return RunEntry(row.id, row.started, row.verdict, row.headline or "", fold(sorted(members)) if members else "",
                    row.node_count, len(ready), report)


def _readiness(run_rows: list[Any], members: dict[int, dict[str, str]], ready: dict[int, set[str]]) -> Readiness:
    """Each node's state in its latest run, and the share of ready nodes after each run, oldest first."""
    state: dict[str, bool] = {}
    ready_count = 0
    series = []
    for row in reversed(run_rows):
        for name in members.get(row.id, {}):
            now = name in ready.get(row.id, set())
            before = state.get(name)
            ready_count += int(now) - int(bool(before))
            state[name] = now
        if state:
            series.append((row.started, ready_count / len(state)))
    not_ready = sorted(n for n, ok in state.items() if not ok)
    return Readiness(ready_count, len(state), fold(not_ready) if not_ready else "", series)


def _chart_keys(conn: Any) -> dict[tuple[str, str, str], list[Any]]:
    """The keys drawn, grouped into one chart each: the figures a check declares with a direction
    (per-step figures aside); the pairs of a link figure drawn as one line; of a sweep over sizes or
    device counts, the largest condition."""
    rows = conn.execute(select(figure_keys).where(figure_keys.c.figure != "", figure_keys.c.direction != "",
                                                  figure_keys.c.figure != "step")).all()
    groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for row in rows:
        if row.figure in ("size", "scaling"):  # a sweep: its names may carry the condition ("busbw at 1 GiB")
            groups[(row.check_id, row.unit, f"{row.series}|{row.figure}")].append(row)
        elif row.figure == "link":
            groups[(row.check_id, row.name, row.series)].append(row)
        else:
            groups[(row.check_id, row.name, f"{row.series}|{row.at}")].append(row)
    for key, members in groups.items():
        if members[0].figure in ("size", "scaling"):
            groups[key] = [max(members, key=lambda r: _number(r.at))]
    return groups


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("-inf")


def _figures(conn: Any, run_rows: list[Any]) -> list[FigureSeries]:
    if not run_rows:
        return []
    groups = _most_recorded(conn, _chart_keys(conn))
    started = {r.id: r.started for r in run_rows}
    verdict = {r.id: r.verdict for r in run_rows}
    out = []
    for group, members in groups.items():
        by_run = _group_values(conn, [m.id for m in members], list(started))
        if not by_run:
            continue
        first = members[0]
        label = first.name
        if first.figure == "size" and _size(first.at) not in first.name:
            label = f"{first.name} at {_size(first.at)}"
        if len(members) > 1:
            label += f", mean over {len(members)} {'links' if first.figure == 'link' else 'figures'}"
        series = FigureSeries(first.check_id, f"{first.check_id}: {label}" + (f" ({_series(first)})" if
                              _series(first) else ""), first.unit, first.direction)
        ordered = sorted(by_run, key=lambda r: (started[r], r))
        series.points = [(started[r], *by_run[r]) for r in ordered]
        good = sorted(by_run[r][0] for r in ordered if verdict[r] == "GO")
        if len(good) >= MIN_BAND_RUNS:
            series.band = (percentile(good, 5, ordered=True), percentile(good, 95, ordered=True))
        series.band_runs = len(good)
        out.append(series)
    out.sort(key=lambda s: (-len(s.points), s.label))
    return out[:MAX_CHARTS]


def _most_recorded(conn: Any, groups: dict[tuple[str, str, str], list[Any]]) -> dict[tuple[str, str, str], list[Any]]:
    """The MAX_CHARTS groups recorded in the most runs (the whole store's count, one query)."""
    from sqlalchemy import func

    ids = [m.id for members in groups.values() for m in members]
    runs_of: dict[int, int] = {}
    for i in range(0, len(ids), CHUNK):
        runs_of.update(conn.execute(select(figure_stats.c.key_id, func.count(func.distinct(figure_stats.c.run_id)))
                                    .where(figure_stats.c.key_id.in_(ids[i:i + CHUNK]))
                                    .group_by(figure_stats.c.key_id)).all())
    ranked = sorted(groups, key=lambda g: (-max(runs_of.get(m.id, 0) for m in groups[g]), g))
    return {g: groups[g] for g in ranked[:MAX_CHARTS]}


def _group_values(conn: Any, key_ids: list[int], run_ids: list[int]) -> dict[int, tuple[float, float, float]]:
    """Run -> (centre, low, high) of one chart: for one figure, its median over the run's nodes (over
    each image's nodes, the median of those) and its 5th-95th percentile; for the pairs of a link
    figure, the mean of the pairs' medians, from the lowest 5th to the highest 95th percentile. The
    many-pairs case is summed up in the database: a 1,000-node ring is 1,000 rows a run."""
    from sqlalchemy import func

    out: dict[int, tuple[float, float, float]] = {}
    many = len(key_ids) > 1
    for i in range(0, len(run_ids), CHUNK):
        chunk = run_ids[i:i + CHUNK]
        if many:
            query = (select(figure_stats.c.run_id, func.avg(figure_stats.c.median), func.min(figure_stats.c.p05),
                            func.max(figure_stats.c.p95))
                     .where(figure_stats.c.run_id.in_(chunk), figure_stats.c.key_id.in_(key_ids))
                     .group_by(figure_stats.c.run_id))
            out.update({run_id: (float(m), float(lo), float(hi)) for run_id, m, lo, hi in conn.execute(query)})
            continue
        rows: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
        for run_id, m, lo, hi in conn.execute(
                select(figure_stats.c.run_id, figure_stats.c.median, figure_stats.c.p05, figure_stats.c.p95)
                .where(figure_stats.c.run_id.in_(chunk), figure_stats.c.key_id == key_ids[0])):
            rows[run_id].append((m, lo, hi))
        out.update({run_id: (_mid([r[0] for r in rs]), min(r[1] for r in rs), max(r[2] for r in rs))
                    for run_id, rs in rows.items()})
    return out


def _series(key: Any) -> str:
    parts = [key.series] if key.series and key.series not in key.name else []
    if key.figure == "rate" and key.at:
        parts.append(key.at)
    return ", ".join(parts)


def _size(at: str) -> str:
    value = _number(at)
    if value == float("-inf"):
        return at
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B" if value > 1 else at


def _mid(values: list[float]) -> float:
    ordered = sorted(values)
    return percentile(ordered, 50, ordered=True)
