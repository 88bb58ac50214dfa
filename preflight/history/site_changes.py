"""What each change of node image did, for the fleet site: the changes the store has seen (a node's
image digest differing from its image in its previous run), and for each, every figure measured
before and after (preflight.history.compare: Mann-Whitney U on each run's median) with the relative
change and its 95% interval (a bootstrap over the runs), said in words a product manager reads:

    driver 550.54.15 -> 550.90.07: collectives.local: nccl busbw at 1 GiB 7% lower [5%, 9%],
    12 runs before and 12 after

With fewer than MIN_RUNS runs on either side, the change is listed and says there are too few runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight.core.nodeset import fold
from preflight.history.compare import MIN_RUNS_EACH, compare
from preflight.history.queries import image_fields
from preflight.history.stats import bootstrap_change
from preflight.history.store import Store

MIN_RUNS = MIN_RUNS_EACH  # runs on each image before a change is judged
MAX_CHANGES = 10  # the latest image changes shown
LABELS = {"driver": "driver", "cuda": "CUDA", "cuda_driver": "driver CUDA", "nccl": "NCCL", "kernel": "kernel",
          "os": "OS", "torch": "torch", "tensorflow": "tensorflow", "gpu_model": "GPU", "gpu_count": "GPUs",
          "vbios": "VBIOS"}


@dataclass
class ChangeRow:
    label: str
    unit: str
    median_before: float
    median_after: float
    change: float | None  # relative, (after - before) / |before|
    low: float | None  # 95% interval of the change
    high: float | None
    p_value: float
    verdict: str  # "worse", "better", "changed" or "within noise"
    sentence: str


@dataclass
class ImageChange:
    before: str  # digests
    after: str
    title: str  # "driver 550.54.15 -> 550.90.07, NCCL 2.20.5 -> 2.21.5"
    first_seen: datetime
    nodes: str  # folded: the nodes seen making the change
    node_count: int
    runs_before: int
    runs_after: int
    judged: bool  # enough runs on both sides
    note: str  # why it is not judged, or how many figures moved
    rows: list[ChangeRow] = field(default_factory=list)


def _seen_changes(run_rows: list[Any], members: dict[int, dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(before, after) -> when first seen and which nodes, from each node's images in run order."""
    last: dict[str, str] = {}
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for row in reversed(run_rows):  # oldest first
        for name, digest in members.get(row.id, {}).items():
            if not digest:
                continue
            previous = last.get(name)
            last[name] = digest
            if previous is None or previous == digest:
                continue
            entry = seen.setdefault((previous, digest), {"first": row.started, "nodes": set()})
            entry["nodes"].add(name)
    return seen


def _runs_on(run_rows: list[Any], members: dict[int, dict[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for row in run_rows:
        for digest in set(members.get(row.id, {}).values()):
            counts[digest] += 1
    return counts


def title_of(before: dict[str, Any], after: dict[str, Any]) -> str:
    parts = [f"{LABELS.get(f, f)} {before.get(f) or 'none'} -> {after.get(f) or 'none'}"
             for f in LABELS if before.get(f) != after.get(f)]
    return ", ".join(parts) or "the same software, another fingerprint"


def image_changes(conn: Any, store: Store, run_rows: list[Any], members: dict[int, dict[str, str]],
                  filters: Any) -> list[ImageChange]:
    seen = _seen_changes(run_rows, members)
    if not seen:
        return []
    latest = sorted(seen.items(), key=lambda kv: kv[1]["first"], reverse=True)[:MAX_CHANGES]
    fields = image_fields(conn, {d for pair, _ in latest for d in pair})
    counts = _runs_on(run_rows, members)
    out = []
    for (before, after), entry in latest:
        change = ImageChange(before, after, title_of(fields.get(before, {}), fields.get(after, {})), entry["first"],
                             fold(sorted(entry["nodes"])), len(entry["nodes"]), counts.get(before, 0),
                             counts.get(after, 0), False, "")
        _judge(store, change, filters)
        out.append(change)
    return out


def _judge(store: Store, change: ImageChange, filters: Any) -> None:
    if min(change.runs_before, change.runs_after) < MIN_RUNS:
        change.note = (f"too few runs to say: {change.runs_before} before and {change.runs_after} after "
                       f"({MIN_RUNS} on each side are needed)")
        return
    kept: dict[int, tuple[list[float], list[float]]] = {}
    _, _, comparisons = compare(store, change.before, change.after, since=filters.since, until=filters.until,
                                kept=kept)
    change.judged = True
    for c in comparisons:
        if c.unit_of_observation != "runs":
            continue  # a figure with too few runs on one side: not judged
        low, high = bootstrap_change(*kept[c.key.id])
        change.rows.append(ChangeRow(c.key.label, c.key.unit, c.median_a, c.median_b, c.change, low, high,
                                     c.p_value, c.verdict, sentence(change.title, c.key.label, c.change, low, high,
                                                                    c.n_a, c.n_b, c.verdict)))
    moved = [r for r in change.rows if r.verdict != "within noise"]
    change.note = (f"{len(moved)} of {len(change.rows)} figures moved beyond noise" if change.rows
                   else "no figure was measured on both images")


def _pct(value: float) -> str:
    return f"{abs(value) * 100:.0f}%" if abs(value) >= 0.01 else f"{abs(value) * 100:.1f}%"


def sentence(title: str, label: str, change: float | None, low: float | None, high: float | None, n_a: int,
             n_b: int, verdict: str) -> str:
    """"driver 550 -> 560: all-reduce bus bandwidth 7% lower [5%, 9%], 12 runs before and 12 after"."""
    runs = f"{n_a} runs before and {n_b} after"
    if change is None:
        return f"{title}: {label} changed from zero, {runs}"
    if low is None or high is None:
        return f"{title}: {label} {_pct(change)} {'lower' if change < 0 else 'higher'}, {runs}"
    if verdict == "within noise" or low <= 0 <= high:
        return (f"{title}: {label} within noise ({low * 100:+.1f}% to {high * 100:+.1f}%), {runs}")
    word = "lower" if change < 0 else "higher"
    ends = sorted((abs(low), abs(high)))
    shown = [_pct(e) for e in ends]
    if shown[0] == shown[1]:  # a narrow interval: one decimal tells its ends apart
        shown = [f"{e * 100:.1f}%" for e in ends]
    return f"{title}: {label} {_pct(change)} {word} [{shown[0]}, {shown[1]}], {runs}"
