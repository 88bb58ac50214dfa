"""Learn a profile's floors from the fleet's own healthy runs.

    toml_text, provenance = learn_baseline(store, image="driver=550.54.15", since=..., min_runs=5)

Each floor is a low percentile (the 5th by default) of what healthy nodes measured, in runs whose
verdict was GO, minus the figures' observed noise: half the spread of their repeated samples,
the median over the node results. A ceiling (a latency) is the high percentile plus the noise. The
text has the shape of the shipped profiles (preflight/profiles/*.toml), so `--profile FILE` reads
it; its comments and `[profile] _source` say how many runs and nodes it came from, and when.

Which figure feeds which parameter is declared by each check on the parameter itself
(`param(learn=Learnable(...))`, preflight.core.check): a parameter's name says nothing of the
measurements it judges, and nothing here names a check. A node's figure for a rule is its worst
matched figure (the slower copy direction, the lowest link), so that the floor holds for every
figure the parameter judges. Node
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
from preflight.history.stats import median, percentile, robust_sigma
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


NARROWING = {"": lambda keys: keys, "largest-at": _largest_at, "largest-count": _largest_count}


def rules(checks: dict[str, Any] | None = None) -> list[Rule]:
    """What can be learned, as the installed checks declare it on their parameters (`param(learn=...)`):
    one Rule per learnable parameter, in check id order."""
    if checks is None:
        from preflight.core.registry import discover

        checks = discover().checks
    found = []
    for check_id in sorted(checks):
        for name, learn in sorted(checks[check_id].learnable().items()):
            found.append(Rule(check_id, name, learn.bound,
                              lambda k, learn=learn: learn.matches(k.figure, k.series, k.unit, k.name),
                              NARROWING[learn.narrow], learn.size_param, learn.what))
    return found


def _round(value: float, bound: str, digits: int = 3) -> float:
    """To `digits` significant figures, down for a floor and up for a ceiling, so rounding never tightens it."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(value))))
    rounded = (math.floor if bound == "floor" else math.ceil)(value * scale) / scale
    return float(f"{rounded:.{digits}g}")


# A run, or a node result, whose figure lies beyond this many robust sigmas (1.4826 MAD) from the median
# on the bad side is left out before the percentile is taken: the modified z-score of Iglewicz and
# Hoaglin, the same cut the fleet outlier test uses. One slow run among healthy ones then moves no floor.
OUTLIER_Z = 3.5


def _query(store: Store, image: str | None, since: datetime | None, until: datetime | None, min_runs: int,
           learnable: list[Rule]) -> dict[str, Any]:
    """The healthy runs, the figure keys each rule matched, their rows, and the outlier findings."""
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
            figure_keys.c.check_id.in_(sorted({rule.check_id for rule in learnable}))))]
        chosen: dict[tuple[str, str], list[Key]] = {}
        for rule in learnable:
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
    return {"healthy": healthy, "scope": scope, "chosen": chosen, "rows": rows, "outliers": outliers,
            "described": described}


def _worst_per_node_result(rule: Rule, ks: list[Key], by_key: dict[int, list[Any]],
                           outliers: set[Any]) -> dict[tuple[int, int], tuple[float, float]]:
    """(run, node) -> (its worst matched figure, that figure's noise), fleet outliers left out."""
    worst: dict[tuple[int, int], tuple[float, float]] = {}
    for k in ks:
        for row in by_key.get(k.id, []):
            if (row.run_id, row.node_id, rule.check_id) in outliers:
                continue  # a node that lagged its peers in this run is not what healthy looks like
            noise = abs(row.value) * row.spread / 2 if row.spread is not None else 0.0
            old = worst.get((row.run_id, row.node_id))
            if old is None or (row.value < old[0] if rule.bound == "floor" else row.value > old[0]):
                worst[(row.run_id, row.node_id)] = (row.value, noise)
    return worst


def _bad_side(values: list[float], bound: str) -> set[int]:
    """Indexes of the values beyond OUTLIER_Z robust sigmas from their median on the bad side (below it
    for a floor, above for a ceiling); none when they do not spread at all."""
    if len(values) < 3:
        return set()
    centre = median(values)
    sigma = robust_sigma(values, centre)
    if sigma == 0:
        return set()
    sign = -1 if bound == "floor" else 1
    return {i for i, v in enumerate(values) if sign * (v - centre) / sigma > OUTLIER_Z}


def robust_screen(worst: dict[tuple[int, int], tuple[float, float]],
                  bound: str) -> tuple[dict[tuple[int, int], tuple[float, float]], list[int], int]:
    """(the node results kept, the runs left out, how many node results were left out): first whole runs
    whose median lies beyond OUTLIER_Z robust sigmas of the other runs' medians on the bad side (a bad
    day), then single node results beyond it among those that are left."""
    by_run: dict[int, list[float]] = defaultdict(list)
    for (run_id, _), (value, _) in worst.items():
        by_run[run_id].append(value)
    run_ids = sorted(by_run)
    medians = [median(by_run[r]) for r in run_ids]
    dropped_runs = sorted(run_ids[i] for i in _bad_side(medians, bound))
    kept = {key: v for key, v in worst.items() if key[0] not in dropped_runs}
    keys = list(kept)
    dropped = _bad_side([kept[k][0] for k in keys], bound)
    screened = {k: kept[k] for i, k in enumerate(keys) if i not in dropped}
    return screened, dropped_runs, len(dropped)


def _learn_one(rule: Rule, ks: list[Key], by_key: dict[int, list[Any]], outliers: set[Any],
               pct: float) -> dict[str, Any] | None:
    """The learned entry of one rule (or None when nothing was recorded for it). A floor that comes out
    at zero or below is not a floor: the entry says so in `refused` and carries no value."""
    worst = _worst_per_node_result(rule, ks, by_key, outliers)
    if not worst:
        return None
    kept, dropped_runs, dropped_results = robust_screen(worst, rule.bound)
    values = [v for v, _ in kept.values()]
    noises = sorted(n for _, n in kept.values())
    noise = noises[len(noises) // 2]
    edge = percentile(values, pct if rule.bound == "floor" else 100 - pct)
    raw = edge - noise if rule.bound == "floor" else edge + noise
    entry: dict[str, Any] = {
        "check_id": rule.check_id, "param": rule.param, "bound": rule.bound, "value": _round(raw, rule.bound),
        "percentile_value": edge, "noise": noise, "observations": len(values),
        "runs": len({r for r, _ in kept}), "nodes": len({n for _, n in kept}), "unit": ks[0].unit,
        "figures": sorted({k.name for k in ks}), "what": rule.what, "statistic": STATISTIC,
        "left_out_runs": len(dropped_runs), "left_out_results": dropped_results}
    if not (math.isfinite(raw) and raw > 0):
        entry["refused"] = (f"the {pct:g}th percentile {_quantity(edge, ks[0].unit)} less the noise "
                            f"{_quantity(noise, ks[0].unit)} is {_quantity(raw, ks[0].unit)}: a floor at or below "
                            "zero lets anything pass, so none is written")
        entry["value"] = None
    if rule.size_param and ks[0].at.isdigit():
        entry["size"] = int(ks[0].at)
        entry["size_param"] = rule.size_param
    return entry


STATISTIC = (f"median/MAD screen (modified z-score over {OUTLIER_Z:g}: whole runs, then node results), then a "
             "low percentile less the figures' noise")


def learn_baseline(store: Store, image: str | None = None, since: datetime | None = None,
                   min_runs: int = DEFAULT_MIN_RUNS, *, pct: float = DEFAULT_PERCENTILE,
                   until: datetime | None = None) -> tuple[str, dict[str, Any]]:
    """(profile TOML text, provenance) from the GO runs that match; LearnError with fewer than min_runs,
    or when nothing could be learned (each refused floor is named with its reason)."""
    if not 0 < pct < 50:
        raise LearnError(f"the percentile must be between 0 and 50, not {pct}")
    learnable = rules()
    found = _query(store, image, since, until, min_runs, learnable)
    healthy, rows = found["healthy"], found["rows"]
    by_key: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        by_key[row.key_id].append(row)
    learned: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    for rule in learnable:
        ks = found["chosen"].get((rule.check_id, rule.param))
        entry = _learn_one(rule, ks, by_key, found["outliers"], pct) if ks else None
        if entry is None:
            continue
        if entry.get("refused"):
            refused[f"{rule.check_id}.{rule.param}"] = entry["refused"]
            continue
        learned[f"{rule.check_id}.{rule.param}"] = entry
    if not learned:
        why = "; ".join(f"{name}: {reason}" for name, reason in refused.items())
        raise LearnError(f"{len(healthy)} healthy run(s){found['scope']}, but " + (
            f"no floor could be learned ({why})" if refused else
            f"none recorded a figure a floor applies to ({', '.join(sorted({r.check_id for r in learnable}))})"))
    counts = {row.gpu_count for row in rows if row.gpu_count}
    provenance = {"runs": len(healthy), "node_results": len({(r.run_id, r.node_id) for r in rows}),
                  "nodes": len({row.node_id for row in rows}), "from": healthy[0].started.isoformat(),
                  "to": healthy[-1].started.isoformat(), "image": image or "", "percentile": pct,
                  "images": {d: describe_image(f) for d, f in found["described"].items()},
                  "gpus_per_node": counts.pop() if len(counts) == 1 else None,
                  "floors": learned, "refused": refused, "statistic": STATISTIC}
    return render_profile(provenance), provenance


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False, allow_nan=False)


def _quantity(value: float, unit: str) -> str:
    return f"{value:.4g} {unit}".strip()


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    """A TOML key: bare when it can be, else a quoted string."""
    return name if _BARE_KEY.match(name) else _toml(name)


def _comment(text: str) -> str:
    """Text for a TOML comment: every control character (a newline would end the comment and let
    recorded text, a figure's name say, write keys of its own) written as an escape instead."""
    return "".join(c if c == "\t" or (ord(c) >= 0x20 and ord(c) != 0x7F and c not in "\u2028\u2029")
                   else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" for c in text)


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
        _comment(f"# Learned from fleet history: {runs_n} healthy (GO) runs, {nodes_n} nodes, {span}{image}."),
        "# Whole runs, then node results, whose figure lies more than 3.5 robust sigmas (1.4826 MAD) from the",
        "# median on the bad side are left out first (modified z-score); then each floor is the",
        f"# {pct}th percentile of the healthy figures minus their noise (half the spread of repeated samples);",
        f"# each ceiling the {100 - p['percentile']:g}th percentile plus it. Review before use:",
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
        lines += ["", f"[checks.{_toml(check_id)}]"]
        for e in entries:
            bound = "floor" if e["bound"] == "floor" else "ceiling"
            edge = f"{pct}th" if e["bound"] == "floor" else f"{100 - p['percentile']:g}th"
            left_out = ""
            if e.get("left_out_runs") or e.get("left_out_results"):
                left_out = (f" ({e.get('left_out_runs', 0)} runs and {e.get('left_out_results', 0)} node results left "
                            "out as outliers)")
            lines.append(_comment(f"# {e['what']} ({'; '.join(e['figures'][:3])}): {edge} percentile "
                                  f"{_quantity(e['percentile_value'], e['unit'])} over {e['observations']} node "
                                  f"results in {e['runs']} runs{left_out}, noise {_quantity(e['noise'], e['unit'])}: "
                                  f"the {bound}"))
            lines.append(f"{_key(e['param'])} = {_toml(e['value'])}")
            if e.get("size_param"):
                lines.append(f"{_key(e['size_param'])} = {int(e['size'])}")
    for name, reason in (p.get("refused") or {}).items():
        lines.append(_comment(f"# not learned: {name}: {reason}"))
    return "\n".join(lines) + "\n"
