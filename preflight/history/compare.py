"""What moving from one node image to another did to each figure: medians, spread, change, and
whether the change is beyond noise by the Mann-Whitney U test.

The observations are each run's median over its nodes (figure_stats) when both images have at least
five runs, so that nodes measured in the same run do not count as independent evidence; with fewer
runs, every node result of each image's latest four runs is an observation. "Beyond noise" needs both a p-value
below alpha and a relative change of at least min_change, so that a large fleet does not make a
0.1% shift significant.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select

from preflight.history.queries import CHUNK, Key, QueryError, _key_from, _time_filters, find_keys, resolve_image
from preflight.history.schema import figure_keys, figure_stats, figures, node_images, runs
from preflight.history.stats import MANN_WHITNEY, mann_whitney_u, median, percentile
from preflight.history.store import Store


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
            alpha: float = ALPHA, min_change: float = MIN_CHANGE,
            kept: dict[int, tuple[list[float], list[float]]] | None = None) -> tuple[set[str], set[str], list[Comparison]]:
    """Every figure measured on both images: medians, spread, change, and the Mann-Whitney U test.
    `kept`, when given, receives each figure's observations on either side, by key id."""
    with store.connect() as conn:
        side_a, side_b = resolve_image(conn, image_a), resolve_image(conn, image_b)
        if side_a & side_b:
            raise QueryError(f"{image_a!r} and {image_b!r} name the same image {sorted(side_a & side_b)[0]}")
        keys = {k.id: k for k in find_keys(conn, figure=figure, check=check, series=series)} \
            if (figure or check) else None
        query = (select(figure_stats.c.key_id, figure_stats.c.image, figure_stats.c.median, runs.c.id, runs.c.started)
                 .join(runs, runs.c.id == figure_stats.c.run_id)
                 .where(figure_stats.c.image.in_(side_a | side_b), *_time_filters(runs.c.started, since, until)))
        if keys is not None:
            query = query.where(figure_stats.c.key_id.in_(list(keys)))
        query = query.order_by(runs.c.started, runs.c.id)  # oldest first: `kept` is in time order
        per_run: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        side_runs: tuple[dict[int, datetime], dict[int, datetime]] = ({}, {})
        for key_id, image, value, run_id, started in conn.execute(query):
            side = 0 if image in side_a else 1
            per_run[key_id][side].append(value)
            side_runs[side][run_id] = started
        both = [k for k, (a, b) in per_run.items() if a and b]
        few = [k for k in both if min(len(per_run[k][0]), len(per_run[k][1])) < MIN_RUNS_EACH]
        per_node: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        if few:
            # Node results of each image's latest few runs only: bounded, however long the other's history.
            latest = [sorted(runs_of, key=lambda r: (runs_of[r], r), reverse=True)[:MIN_RUNS_EACH - 1]
                      for runs_of in side_runs]
            run_ids = sorted(set(latest[0]) | set(latest[1]))
            raw = (select(figures.c.key_id, node_images.c.digest, figures.c.value)
                   .select_from(figures.join(node_images, and_(node_images.c.run_id == figures.c.run_id,
                                                               node_images.c.node_id == figures.c.node_id)))
                   .where(figures.c.run_id.in_(run_ids), node_images.c.digest.in_(side_a | side_b)))
            if len(few) <= CHUNK:
                raw = raw.where(figures.c.key_id.in_(few))
            wanted = set(few)
            for key_id, digest, value in conn.execute(raw):
                if key_id in wanted:
                    per_node[key_id][0 if digest in side_a else 1].append(value)
        if keys is None:
            keys = {r.id: _key_from(r) for r in conn.execute(select(figure_keys).where(figure_keys.c.id.in_(both)))} \
                if both else {}
    out = []
    for key_id in both:
        a, b = per_node.get(key_id, ([], []))
        unit = "node results"
        if not (a and b):
            unit, (a, b) = "runs", per_run[key_id]
        out.append(_compare_one(keys[key_id], unit, a, b, alpha, min_change))
        if kept is not None:
            kept[key_id] = (list(a), list(b))
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
