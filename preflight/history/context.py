"""What history says about one run, for its report: where each headline figure stands among earlier
runs of the same node type, and which nodes run a different image than the last time they were seen.

`context_for_report(store, report_dict)` returns plain JSON-able data:

    {"history_runs": 41,                       # earlier runs behind the figures placed
     "min_runs": 3,                            # earlier runs a figure needs to be placed
     "image": {"digest": "3f2a...", "description": "driver 550.54.15, CUDA 12.4, ..."},
     "figures": [{"check_id", "name", "series", "at", "unit", "direction",
                  "kind",           # the node type: "8 x NVIDIA H100 80GB HBM3", "no GPU"
                  "nodes",          # this run's nodes of that type behind the value
                  "value",          # this run's median over them
                  "runs",           # earlier runs of that node type with the figure
                  "percentile",     # its rank among those runs' medians, 0-100; None with too few runs
                  "better_than",    # the share of earlier runs it beats, by the figure's direction
                  "same_image", "history_median", "history_p05", "history_p95",
                  "recent"}],       # the latest earlier runs' medians, oldest first (at most 20)
     "image_changes": [{"node", "before", "after", "changed": {"driver": ["535.x", "550.x"]},
                        "before_started"}]}

Headline figures are the ones the report draws or judges: those with a figure declaration or a
numeric threshold, links excepted (one figure per pair; the report draws them as a matrix).

A figure is placed among runs of its node type only: nodes of the same GPU model and count (the
hardware part of the image, extract.node_kind). A run with two node types has one entry per figure
and type. A figure of no node (a cluster check's) belongs to the type most of the run's nodes have.
Earlier runs of the same image are preferred when there are enough of them. A node's previous image
is its image in its latest run among the fleet's 50 latest earlier runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, NamedTuple

from sqlalchemy import and_, func, select

from preflight.history.extract import (IMAGE_FIELDS, Extracted, FigureKey, NotAReport, describe_image, extract,
                                      node_kind)
from preflight.history.schema import figure_keys, figure_stats, node_images, nodes, runs
from preflight.history.stats import median, percentile, rank_of
from preflight.history.store import RECORD_TIMEOUT_S, HistoryError, Store, StoreMissing

MIN_HISTORY = 3  # earlier runs a figure needs before a percentile means anything
MAX_HISTORY = 200  # the most recent earlier runs considered per figure
RECENT_RUNS = 50  # a node's previous image is looked for in the fleet's latest earlier runs
RECENT_VALUES = 20  # run medians kept for the report's sparkline
UNKNOWN_KIND = ""  # nodes whose checks recorded nothing of their image
CHUNK = 500  # ids per IN (...) lookup


class Earlier(NamedTuple):
    """One figure_stats row of an earlier run: the figure on the nodes of one image."""

    run_id: int
    image: str
    value: float  # the median over those nodes
    n: int


class Observed(NamedTuple):
    """What this run measured of the headline figures, by figure and node type."""

    values: dict[tuple[FigureKey, str], list[tuple[str, float]]]  # (key, kind) -> (node, value)
    images: dict[str, str | None]  # kind -> this run's commonest image digest among nodes of that kind


def kind_of(image: dict[str, Any]) -> str:
    """A node's type for history: GPU model and count; UNKNOWN_KIND when nothing of its image is known."""
    return node_kind(image) if image.get("digest") else UNKNOWN_KIND


def observe(ex: Extracted) -> Observed:
    kinds = {n: kind_of(img) for n, img in ex.images.items()}
    run_kind = dominant(Counter(k for k in kinds.values() if k != UNKNOWN_KIND))
    values: dict[tuple[FigureKey, str], list[tuple[str, float]]] = defaultdict(list)
    for row in ex.figures:
        # Links are figures of a pair, one name each: the report shows them as a matrix, not here.
        if ex.keys[row.key].figure == "link":
            continue
        if ex.keys[row.key].figure or row.threshold is not None:
            values[(row.key, kinds.get(row.node) or run_kind)].append((row.node, row.value))
    digests: dict[str, Counter[str]] = defaultdict(Counter)
    for node, img in ex.images.items():
        if img.get("digest"):
            digests[kinds[node]][img["digest"]] += 1
    images = {kind: dominant(counter) or None for kind, counter in digests.items()}
    return Observed(values, images)


def dominant(counter: Counter[str]) -> str:
    """The commonest entry (the first seen among equals); UNKNOWN_KIND for none."""
    return counter.most_common(1)[0][0] if counter else UNKNOWN_KIND


def context_for_report(store: Store, report: dict[str, Any], *, min_runs: int = MIN_HISTORY,
                       max_runs: int = MAX_HISTORY, recent: int = RECENT_VALUES) -> dict[str, Any]:
    ex = extract(report)
    seen = observe(ex)
    with store.connect() as conn:
        this_run = conn.execute(select(runs.c.id).where(runs.c.run_key == ex.run_key)).scalar()
        history = _history(conn, ex, {key for key, _ in seen.values}, this_run)
        kinds = _kinds_of_rows(conn, [row for rows in history.values() for row in rows])
        changes = _image_changes(conn, ex, this_run)
    return place(ex, seen, history, kinds, changes, min_runs=min_runs, max_runs=max_runs, recent=recent)


def context_without_history(report: dict[str, Any], *, min_runs: int = MIN_HISTORY) -> dict[str, Any]:
    """The context of a run when the store holds no run yet: every figure, none placed."""
    ex = extract(report)
    return place(ex, observe(ex), {}, {}, [], min_runs=min_runs)


def place(ex: Extracted, seen: Observed, history: dict[FigureKey, list[Earlier]],
          kinds: dict[tuple[int, str], str], changes: list[dict[str, Any]], *, min_runs: int = MIN_HISTORY,
          max_runs: int = MAX_HISTORY, recent: int = RECENT_VALUES) -> dict[str, Any]:
    """Each headline figure of this run among the earlier runs of its node type (pure).
    `history`: the figure's earlier rows, newest run first; `kinds`: (run, image) -> node type."""
    figures_out = []
    runs_seen: set[int] = set()
    for (key, kind), observed in seen.values.items():
        earlier = [e for e in history.get(key, ()) if kinds.get((e.run_id, e.image), UNKNOWN_KIND) == kind]
        this_image = seen.images.get(kind)
        same = [e for e in earlier if this_image and e.image == this_image]
        pool = same if len({e.run_id for e in same}) >= min_runs else earlier
        per_run = run_values(pool)[:max_runs]
        info = ex.keys[key]
        value = median([v for _, v in observed])
        entry: dict[str, Any] = {
            "check_id": key.check_id, "name": key.name, "series": key.series, "at": key.at, "unit": key.unit,
            "direction": info.direction, "kind": kind, "nodes": len({n for n, _ in observed}), "value": value,
            "runs": len(per_run), "percentile": None, "better_than": None, "same_image": bool(same) and pool is same,
            "history_median": None, "history_p05": None, "history_p95": None, "recent": []}
        if len(per_run) >= min_runs:
            medians = [v for _, v in per_run]
            runs_seen |= {r for r, _ in per_run}
            rank = rank_of(value, medians)
            better = rank if info.direction == "higher" else (100 - rank if info.direction == "lower" else None)
            entry.update(percentile=rank, better_than=better, history_median=median(medians),
                         history_p05=percentile(medians, 5), history_p95=percentile(medians, 95),
                         recent=medians[:recent][::-1])
        figures_out.append(entry)
    this_image = dominant(Counter(img["digest"] for img in ex.images.values() if img.get("digest"))) or None
    return {"history_runs": len(runs_seen), "min_runs": min_runs,
            "image": {"digest": this_image,
                      "description": describe_image(next(img for img in ex.images.values()
                                                         if img.get("digest") == this_image)) if this_image else ""},
            "figures": figures_out, "image_changes": changes}


def run_values(rows: list[Earlier]) -> list[tuple[int, float]]:
    """(run, its median) per run, in the order the runs first appear. A run whose nodes of this type
    ran several images has one row per image: its median is the one its nodes' weighted middle falls in."""
    by_run: dict[int, list[Earlier]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row)
    out = []
    for run_id, group in by_run.items():
        if len(group) == 1:
            out.append((run_id, group[0].value))
            continue
        ordered = sorted(group, key=lambda e: e.value)
        half, total = sum(e.n for e in ordered) / 2, 0
        for e in ordered:
            total += e.n
            if total >= half:
                out.append((run_id, e.value))
                break
    return out


def _history(conn: Any, ex: Extracted, keys: set[FigureKey], this_run: int | None) -> dict[FigureKey, list[Earlier]]:
    """Every earlier figure_stats row of these figures, newest run first."""
    checks = sorted({k.check_id for k in keys})
    if not checks:
        return {}
    key_rows = conn.execute(select(figure_keys.c.id, figure_keys.c.check_id, figure_keys.c.name,
                                   figure_keys.c.series, figure_keys.c.at, figure_keys.c.unit)
                            .where(figure_keys.c.check_id.in_(checks))).all()
    ids = {i: FigureKey(c, n, s, a, u) for i, c, n, s, a, u in key_rows if FigureKey(c, n, s, a, u) in keys}
    if not ids:
        return {}
    query = (select(figure_stats.c.key_id, figure_stats.c.run_id, figure_stats.c.image, figure_stats.c.median,
                    figure_stats.c.n)
             .join(runs, runs.c.id == figure_stats.c.run_id)
             .where(figure_stats.c.key_id.in_(list(ids)), runs.c.started <= ex.started)
             .order_by(runs.c.started.desc(), runs.c.id.desc()))
    if this_run is not None:
        query = query.where(figure_stats.c.run_id != this_run)
    out: dict[FigureKey, list[Earlier]] = defaultdict(list)
    for key_id, run_id, image, value, n in conn.execute(query):
        out[ids[key_id]].append(Earlier(run_id, image or "", value, n))
    return out


def _kinds_of_rows(conn: Any, rows: list[Earlier]) -> dict[tuple[int, str], str]:
    """(run, image digest) -> node type of the nodes behind the row. An image names its GPUs; a row of
    no image (a cluster check's figure, nodes that recorded no image) gets its run's commonest type."""
    digests = sorted({r.image for r in rows if r.image})
    by_digest: dict[str, str] = {}
    for i in range(0, len(digests), CHUNK):
        query = (select(node_images.c.digest, node_images.c.gpu_model, node_images.c.gpu_count)
                 .where(node_images.c.digest.in_(digests[i:i + CHUNK])).distinct())
        for digest, model, count in conn.execute(query):
            by_digest.setdefault(digest, node_kind({"gpu_model": model, "gpu_count": count}))
    plain_runs = sorted({r.run_id for r in rows if not r.image})
    run_kind: dict[int, str] = {}
    for i in range(0, len(plain_runs), CHUNK):
        query = (select(node_images.c.run_id, node_images.c.gpu_model, node_images.c.gpu_count,
                        func.count().label("n"))
                 .where(node_images.c.run_id.in_(plain_runs[i:i + CHUNK]), node_images.c.digest.is_not(None))
                 .group_by(node_images.c.run_id, node_images.c.gpu_model, node_images.c.gpu_count))
        counts: dict[int, Counter[str]] = defaultdict(Counter)
        for run_id, model, count, n in conn.execute(query):
            counts[run_id][node_kind({"gpu_model": model, "gpu_count": count})] += n
        run_kind.update({run_id: dominant(c) for run_id, c in counts.items()})
    return {(r.run_id, r.image): by_digest.get(r.image, UNKNOWN_KIND) if r.image else run_kind.get(r.run_id,
                                                                                                      UNKNOWN_KIND)
            for r in rows}


def _image_changes(conn: Any, ex: Any, this_run: int | None) -> list[dict[str, Any]]:
    """Nodes of this run whose image differs from the one they ran in their latest earlier run."""
    names = [n for n in ex.nodes if ex.images[n].get("digest")]
    if not names:
        return []
    ids: dict[str, int] = {}
    for i in range(0, len(names), CHUNK):
        ids.update({name: node_id for node_id, name in conn.execute(
            select(nodes.c.id, nodes.c.name).where(nodes.c.name.in_(names[i:i + CHUNK])))})
    if not ids:
        return []
    earlier = select(runs.c.id).where(runs.c.started <= ex.started)
    if this_run is not None:
        earlier = earlier.where(runs.c.id != this_run)
    earlier = earlier.order_by(runs.c.started.desc(), runs.c.id.desc()).limit(RECENT_RUNS).subquery()
    ranked = (select(node_images, runs.c.started,
                     func.row_number().over(partition_by=node_images.c.node_id,
                                            order_by=(runs.c.started.desc(), runs.c.id.desc())).label("recent"))
              .join(runs, runs.c.id == node_images.c.run_id)
              .where(node_images.c.node_id.in_(list(ids.values())), node_images.c.digest.is_not(None),
                     node_images.c.run_id.in_(select(earlier.c.id))))
    sub = ranked.subquery()
    previous = {r.node_id: r for r in conn.execute(select(sub).where(and_(sub.c.recent == 1)))}
    by_id = {v: k for k, v in ids.items()}
    out = []
    for node_id, before in sorted(previous.items(), key=lambda kv: by_id[kv[0]]):
        node = by_id[node_id]
        after = ex.images[node]
        if before.digest == after.get("digest"):
            continue
        old = {f: getattr(before, f) for f in IMAGE_FIELDS}
        changed = {f: [old[f], after.get(f)] for f in IMAGE_FIELDS if old[f] != after.get(f)}
        out.append({"node": node, "before": before.digest, "after": after.get("digest"), "changed": changed,
                    "before_started": before.started.isoformat()})
    return out


def report_context(report: dict[str, Any], url: Any = None, *,
                   timeout_s: float = RECORD_TIMEOUT_S) -> tuple[dict[str, Any] | None, str | None]:
    """(the context for this run's report, None), or (None, the warning to show); never raises. A store
    that holds no run yet gives the context of no history: every figure, none placed."""
    try:
        try:
            with Store(url, create=False, timeout_s=timeout_s) as store:
                return context_for_report(store, report), None
        except StoreMissing:
            return context_without_history(report), None
    except (HistoryError, NotAReport) as exc:
        return None, f"fleet history left out of the report: {exc}"
    except Exception as exc:  # noqa: BLE001 - the report is written without it, whatever went wrong
        return None, f"fleet history left out of the report: {type(exc).__name__}: {exc}"
