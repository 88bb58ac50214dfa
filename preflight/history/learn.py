"""Learn a profile's floors from the fleet's own healthy runs.

    toml_text, provenance = learn_baseline(store, image="driver=550.54.15", since=..., min_runs=5)

Each floor is a low percentile (the 5th by default) of what healthy nodes measured, in runs whose
verdict was GO, minus the figures' observed noise: half the spread of their repeated samples,
the median over the node results. A ceiling (a latency) is the high percentile plus the noise. The
text has the shape of the shipped profiles (preflight/profiles/*.toml), so `--profile FILE` reads
it; its comments and `[profile] _source` say how many runs and nodes it came from, and when.

Which figure feeds which parameter is stated once, in RULES: a parameter's name says nothing of the
measurements it judges. A node's figure for a rule is its worst matched figure (the slower copy
direction, the lowest link), so that the floor holds for every figure the parameter judges. Node
results that were named fleet outliers for the check in their run are left out: a node lagging
identical peers is not what healthy looks like, even in a GO run.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import and_, select

from preflight.history.extract import describe_image
from preflight.history.queries import Key, _key_from, image_fields, resolve_image
from preflight.history.outliers import FAIL_SLOW_ID, OUTLIER_ID
from preflight.history.schema import figure_keys, figures, findings, node_images, runs
from preflight.history.stats import percentile
from preflight.history.store import Store

DEFAULT_PERCENTILE = 5.0
DEFAULT_MIN_RUNS = 5


class LearnError(ValueError):
    """Not enough healthy history to learn from; the message says what there is and how to get on."""


def _largest_at(keys: list[Key]) -> list[Key]:
    """The keys at the largest recorded condition (message size): the one a busbw floor holds at."""
    sized = [k for k in keys if k.at.isdigit()]
    if not sized:
        return keys
    top = max(int(k.at) for k in sized)
    return [k for k in sized if int(k.at) == top]


def _largest_count(keys: list[Key]) -> list[Key]:
    """The keys of the largest device or node count named in them ("efficiency on 8 GPUs")."""
    counted = [(int(m.group(1)), k) for k in keys if (m := re.search(r"(\d+)\D*$", k.name))]
    if not counted:
        return keys
    top = max(n for n, _ in counted)
    return [k for n, k in counted if n == top]


@dataclass(frozen=True)
class Rule:
    check_id: str
    param: str
    bound: str  # "floor" (value >= it) or "ceiling" (value <= it)
    matches: Callable[[Key], bool]
    narrow: Callable[[list[Key]], list[Key]] = lambda keys: keys
    size_param: str | None = None  # also emit the condition the floor holds at
    what: str = ""


RULES = [
    Rule("collectives.local", "min_busbw_gbps", "floor",
         lambda k: k.figure == "size" and "busbw" in k.name and k.unit == "GB/s", _largest_at, "busbw_size_bytes",
         "all-reduce bus bandwidth across the node's GPUs at the largest message size"),
    Rule("collectives.local", "max_latency_us", "ceiling", lambda k: "latency at" in k.name and k.unit == "us",
         what="small-message all-reduce latency"),
    Rule("collectives.cluster", "min_busbw_gbps", "floor",
         lambda k: k.figure == "size" and "busbw" in k.name and k.unit == "GB/s" and not k.name.startswith("pair "),
         _largest_at, None, "all-reduce bus bandwidth across the nodes at the largest message size"),
    Rule("gpu.visibility", "min_host_device_gbps", "floor",
         lambda k: k.name in ("slowest host-to-device copy", "slowest device-to-host copy"),
         what="pinned host<->device copy bandwidth, the slower direction"),
    Rule("net.bandwidth", "min_gbps", "floor", lambda k: k.figure == "link" and k.unit == "Gbit/s",
         what="iperf3 bandwidth of each link"),
    Rule("checkpoint.roundtrip", "min_write_gbps", "floor",
         lambda k: k.figure == "rate" and k.series == "write" and k.unit == "GB/s", what="checkpoint write rate"),
    Rule("checkpoint.roundtrip", "min_read_gbps", "floor",
         lambda k: k.figure == "rate" and k.series == "read" and k.unit == "GB/s", what="checkpoint read rate"),
    Rule("scaling.multi_gpu", "min_efficiency", "floor", lambda k: k.name.startswith("efficiency on "),
         _largest_count, what="training scaling efficiency at the most GPUs"),
    Rule("scaling.multi_node", "min_efficiency", "floor", lambda k: k.name.startswith("efficiency on "),
         _largest_count, what="training scaling efficiency at the most nodes"),
]


def _round(value: float, bound: str, digits: int = 3) -> float:
    """To `digits` significant figures, down for a floor and up for a ceiling, so rounding never tightens it."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(value))))
    rounded = (math.floor if bound == "floor" else math.ceil)(value * scale) / scale
    return float(f"{rounded:.{digits}g}")


def learn_baseline(store: Store, image: str | None = None, since: datetime | None = None,
                   min_runs: int = DEFAULT_MIN_RUNS, *, pct: float = DEFAULT_PERCENTILE,
                   until: datetime | None = None) -> tuple[str, dict[str, Any]]:
    """(profile TOML text, provenance) from the GO runs that match; LearnError with fewer than min_runs."""
    if not 0 < pct < 50:
        raise LearnError(f"the percentile must be between 0 and 50, not {pct}")
    with store.connect() as conn:
        digests = resolve_image(conn, image) if image else None
        where = [runs.c.verdict == "GO"]
        if since is not None:
            where.append(runs.c.started >= since)
        if until is not None:
            where.append(runs.c.started <= until)
        if digests is not None:
            where.append(runs.c.id.in_(select(node_images.c.run_id).where(node_images.c.digest.in_(digests))))
        healthy = conn.execute(select(runs.c.id, runs.c.started).where(*where).order_by(runs.c.started)).all()
        scope = (f" of image {image}" if image else "") + (f" since {since:%Y-%m-%d %H:%M}" if since else "")
        if len(healthy) < min_runs:
            raise LearnError(f"{len(healthy)} healthy (GO) run(s){scope} in {store.location}; learning floors "
                             f"needs at least {min_runs} (lower it with --min-runs, or record more runs)")
        run_ids = [r.id for r in healthy]
        keys = [_key_from(r) for r in conn.execute(select(figure_keys).where(
            figure_keys.c.check_id.in_(sorted({rule.check_id for rule in RULES}))))]
        chosen: dict[tuple[str, str], list[Key]] = {}
        for rule in RULES:
            matched = [k for k in keys if k.check_id == rule.check_id and rule.matches(k)]
            if matched:
                chosen[(rule.check_id, rule.param)] = rule.narrow(matched)
        wanted = sorted({k.id for ks in chosen.values() for k in ks})
        rows = []
        for i in range(0, len(wanted), 200):
            query = (select(figures.c.key_id, figures.c.run_id, figures.c.node_id, figures.c.value, figures.c.spread,
                            node_images.c.digest, node_images.c.gpu_count)
                     .select_from(figures.outerjoin(node_images, and_(node_images.c.run_id == figures.c.run_id,
                                                                      node_images.c.node_id == figures.c.node_id)))
                     .where(figures.c.key_id.in_(wanted[i:i + 200]), figures.c.run_id.in_(run_ids)))
            if digests is not None:
                query = query.where(node_images.c.digest.in_(digests))
            rows.extend(conn.execute(query).all())
        outliers = set(conn.execute(select(findings.c.run_id, findings.c.node_id, findings.c.check_id)
                                    .where(findings.c.finding_id.in_((OUTLIER_ID, FAIL_SLOW_ID)), findings.c.run_id.in_(run_ids))).all())
        described = image_fields(conn, digests) if digests else {}
    by_key: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        by_key[row.key_id].append(row)
    learned: dict[str, dict[str, Any]] = {}
    for rule in RULES:
        ks = chosen.get((rule.check_id, rule.param))
        if not ks:
            continue
        worst: dict[tuple[int, int], tuple[float, float]] = {}  # (run, node) -> (value, its noise)
        for k in ks:
            for row in by_key.get(k.id, []):
                if (row.run_id, row.node_id, rule.check_id) in outliers:
                    continue  # a node that lagged its peers in this run is not what healthy looks like
                noise = abs(row.value) * row.spread / 2 if row.spread is not None else 0.0
                old = worst.get((row.run_id, row.node_id))
                if old is None or (row.value < old[0] if rule.bound == "floor" else row.value > old[0]):
                    worst[(row.run_id, row.node_id)] = (row.value, noise)
        if not worst:
            continue
        values = [v for v, _ in worst.values()]
        noises = sorted(n for _, n in worst.values())
        noise = noises[len(noises) // 2]
        edge = percentile(values, pct if rule.bound == "floor" else 100 - pct)
        value = _round(max(edge - noise, 0.0) if rule.bound == "floor" else edge + noise, rule.bound)
        entry = {"check_id": rule.check_id, "param": rule.param, "bound": rule.bound, "value": value,
                 "percentile_value": edge, "noise": noise, "observations": len(values),
                 "runs": len({r for r, _ in worst}), "nodes": len({n for _, n in worst}), "unit": ks[0].unit,
                 "figures": sorted({k.name for k in ks}), "what": rule.what}
        if rule.size_param and ks[0].at.isdigit():
            entry["size"] = int(ks[0].at)
            entry["size_param"] = rule.size_param
        learned[f"{rule.check_id}.{rule.param}"] = entry
    if not learned:
        raise LearnError(f"{len(healthy)} healthy run(s){scope}, but none recorded a figure a floor applies to "
                         f"({', '.join(sorted({r.check_id for r in RULES}))})")
    node_ids = {row.node_id for row in rows}
    counts = {row.gpu_count for row in rows if row.gpu_count}
    provenance = {"runs": len(healthy), "node_results": len({(r.run_id, r.node_id) for r in rows}),
                  "nodes": len(node_ids), "from": healthy[0].started.isoformat(),
                  "to": healthy[-1].started.isoformat(), "image": image or "", "percentile": pct,
                  "images": {d: describe_image(f) for d, f in described.items()},
                  "gpus_per_node": counts.pop() if len(counts) == 1 else None,
                  "floors": learned}
    return render_profile(provenance), provenance


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def _quantity(value: float, unit: str) -> str:
    return f"{value:.4g} {unit}".strip()


def render_profile(p: dict[str, Any]) -> str:
    span = f"{p['from'][:16].replace('T', ' ')} to {p['to'][:16].replace('T', ' ')}"
    image = ""
    if p["image"]:
        image = f", image {p['image']}"
        if p["images"]:
            image += " (" + "; ".join(p["images"].values()) + ")"
    pct = f"{p['percentile']:g}"
    runs_n, nodes_n = p["runs"], p["nodes"]
    description = f"learned from {runs_n} healthy runs on {nodes_n} nodes ({span})"
    source_line = f"preflight fleet history: {runs_n} GO runs, {nodes_n} nodes, {span}{image}"
    lines = [
        f"# Learned from fleet history: {runs_n} healthy (GO) runs, {nodes_n} nodes, {span}{image}.",
        f"# Each floor is the {pct}th percentile of the healthy figures minus their noise (half the spread of",
        f"# repeated samples); each ceiling the {100 - p['percentile']:g}th percentile plus it. Review before use:",
        "# a fleet that was slow all along learns a floor that lets it stay slow.",
        "[profile]",
        f"description = {_toml(description)}",
        f"sources = [{_toml(source_line)}]",
    ]
    source = {"runs": p["runs"], "nodes": p["nodes"], "node_results": p["node_results"], "from": p["from"],
              "to": p["to"], "image": p["image"], "percentile": p["percentile"]}
    lines.append("_source = { " + ", ".join(f"{k} = {_toml(v)}" for k, v in source.items()) + " }")
    if p.get("gpus_per_node"):
        lines += ["", "[expect]", f"gpus_per_node = {p['gpus_per_node']}"]
    by_check: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in p["floors"].values():
        by_check[entry["check_id"]].append(entry)
    for check_id, entries in by_check.items():
        lines += ["", f'[checks."{check_id}"]']
        for e in entries:
            bound = "floor" if e["bound"] == "floor" else "ceiling"
            edge = f"{pct}th" if e["bound"] == "floor" else f"{100 - p['percentile']:g}th"
            lines.append(f"# {e['what']} ({'; '.join(e['figures'][:3])}): {edge} percentile "
                         f"{_quantity(e['percentile_value'], e['unit'])} over {e['observations']} node results in "
                         f"{e['runs']} runs, noise {_quantity(e['noise'], e['unit'])}: the {bound}")
            lines.append(f"{e['param']} = {_toml(e['value'])}")
            if e.get("size_param"):
                lines.append(f"{e['size_param']} = {e['size']}")
    return "\n".join(lines) + "\n"
