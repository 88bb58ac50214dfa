"""What history says about one run, for its report: where each headline figure stands among earlier
runs, and which nodes run a different image than the last time they were seen.

`context_for_report(store, report_dict)` returns plain JSON-able data:

    {"history_runs": 41,                       # earlier runs with any of these figures
     "image": {"digest": "3f2a...", "description": "driver 550.54.15, CUDA 12.4, ..."},
     "figures": [{"check_id", "name", "series", "at", "unit", "direction",
                  "value",          # this run's median over its nodes
                  "percentile",     # its rank among earlier runs' medians, 0-100
                  "better_than",    # the share of earlier runs it beats, by the figure's direction
                  "runs", "same_image", "history_median", "history_p05", "history_p95"}],
     "image_changes": [{"node", "before", "after", "changed": {"driver": ["535.x", "550.x"]},
                        "before_started"}]}

Headline figures are the ones the report draws or judges: those with a figure declaration or a
numeric threshold, links excepted (one figure per pair; the report draws them as a matrix). Earlier
runs of the same image are preferred when there are enough of them. A node's previous image is its
image in its latest run among the fleet's 50 latest earlier runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sqlalchemy import and_, func, select

from preflight.history.extract import IMAGE_FIELDS, FigureKey, describe_image, extract
from preflight.history.schema import figure_keys, figure_stats, node_images, nodes, runs
from preflight.history.stats import median, percentile, rank_of
from preflight.history.store import Store

MIN_HISTORY = 3  # earlier runs a figure needs before a percentile means anything
MAX_HISTORY = 200  # the most recent earlier runs considered per figure
RECENT_RUNS = 50  # a node's previous image is looked for in the fleet's latest earlier runs


def context_for_report(store: Store, report: dict[str, Any], *, min_runs: int = MIN_HISTORY,
                       max_runs: int = MAX_HISTORY) -> dict[str, Any]:
    ex = extract(report)
    values: dict[FigureKey, list[float]] = defaultdict(list)
    for row in ex.figures:
        # Links are figures of a pair, one name each: the report shows them as a matrix, not here.
        if ex.keys[row.key].figure == "link":
            continue
        if ex.keys[row.key].figure or row.threshold is not None:
            values[row.key].append(row.value)
    digests = Counter(img["digest"] for img in ex.images.values() if img.get("digest"))
    this_image = digests.most_common(1)[0][0] if digests else None
    with store.connect() as conn:
        this_run = conn.execute(select(runs.c.id).where(runs.c.run_key == ex.run_key)).scalar()
        checks = sorted({k.check_id for k in values})
        key_rows = conn.execute(select(figure_keys.c.id, figure_keys.c.check_id, figure_keys.c.name,
                                       figure_keys.c.series, figure_keys.c.at, figure_keys.c.unit)
                                .where(figure_keys.c.check_id.in_(checks))).all() if checks else []
        ids = {FigureKey(c, n, s, a, u): i for i, c, n, s, a, u in key_rows if FigureKey(c, n, s, a, u) in values}
        history: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
        if ids:
            query = (select(figure_stats.c.key_id, figure_stats.c.run_id, figure_stats.c.image, figure_stats.c.median)
                     .join(runs, runs.c.id == figure_stats.c.run_id)
                     .where(figure_stats.c.key_id.in_(list(ids.values())), runs.c.started <= ex.started)
                     .order_by(runs.c.started.desc()))
            if this_run is not None:
                query = query.where(figure_stats.c.run_id != this_run)
            for key_id, run_id, image, value in conn.execute(query):
                history[key_id].append((run_id, image, value))
        changes = _image_changes(conn, ex, this_run)
    figures_out = []
    runs_seen: set[int] = set()
    for key, observed in values.items():
        earlier = history.get(ids.get(key, -1), [])
        same = [(r, v) for r, img, v in earlier if this_image and img == this_image]
        pool = same if len({r for r, _ in same}) >= min_runs else [(r, v) for r, _, v in earlier]
        run_ids = list(dict.fromkeys(r for r, _ in pool))[:max_runs]
        if len(run_ids) < min_runs:
            continue
        keep = set(run_ids)
        medians = [v for r, v in pool if r in keep]
        runs_seen |= keep
        value = median(observed)
        rank = rank_of(value, medians)
        info = ex.keys[key]
        better = rank if info.direction == "higher" else (100 - rank if info.direction == "lower" else None)
        figures_out.append({"check_id": key.check_id, "name": key.name, "series": key.series, "at": key.at,
                            "unit": key.unit, "direction": info.direction, "value": value, "percentile": rank,
                            "better_than": better, "runs": len(keep), "same_image": pool is same,
                            "history_median": median(medians), "history_p05": percentile(medians, 5),
                            "history_p95": percentile(medians, 95)})
    return {"history_runs": len(runs_seen),
            "image": {"digest": this_image,
                      "description": describe_image(next(img for img in ex.images.values()
                                                         if img.get("digest") == this_image)) if this_image else ""},
            "figures": figures_out, "image_changes": changes}


def _image_changes(conn: Any, ex: Any, this_run: int | None) -> list[dict[str, Any]]:
    """Nodes of this run whose image differs from the one they ran in their latest earlier run."""
    names = [n for n in ex.nodes if ex.images[n].get("digest")]
    if not names:
        return []
    ids: dict[str, int] = {}
    for i in range(0, len(names), 500):
        ids.update({name: node_id for node_id, name in conn.execute(
            select(nodes.c.id, nodes.c.name).where(nodes.c.name.in_(names[i:i + 500])))})
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
