"""The run against fleet history, written out: where each headline figure stands among earlier runs of
its node type, and which nodes changed image since their previous run.

The numbers come from the report (RunReport.history, which `preflight run` fills from the history
store before it writes the reports); nothing here reads a database or judges anything. The HTML
report draws one row per figure with a sparkline of the latest runs, the Markdown report one line.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from preflight.core.nodeset import fold
from preflight.reporters.baseline import day
from preflight.reporters.numbers import count, quantity

MAX_ROWS = 40  # figures listed; past it, the ones furthest below their history come first
MAX_CHANGES = 10  # image-change lines; the rest are counted
MAX_STEADY = 8  # figures named in the line of those that never changed
LOW = 5.0  # a figure better than at most this share of its earlier runs is marked
IMAGE_LABELS = {"driver": "driver", "cuda": "CUDA", "cuda_driver": "driver CUDA", "nccl": "NCCL", "kernel": "kernel",
                "os": "OS", "torch": "torch", "tensorflow": "TensorFlow", "gpu_model": "GPU model",
                "gpu_count": "GPU count", "vbios": "VBIOS"}
SPARK_W, SPARK_H, SPARK_PAD = 120, 24, 3


@dataclass
class HistoryRow:
    check_id: str
    name: str
    kind: str
    value: str  # this run's median, with its unit
    standing: str  # "better than 83% of 41 earlier runs of this node type", its type named when several
    range: str  # "440 – 478 GB/s": the earlier runs' 5th to 95th percentile
    median: str
    sparkline: str  # inline SVG, numbers only; "" without recent runs
    low: bool  # better than at most LOW% of the earlier runs
    better_than: float | None


@dataclass
class HistoryView:
    rows: list[HistoryRow] = field(default_factory=list)
    left_out: int = 0  # placed figures not listed (past MAX_ROWS); results.json has them
    too_few: str = ""  # one line on the figures with too few earlier runs to be placed
    changes: list[str] = field(default_factory=list)  # one line per image change, nodes folded
    runs: int = 0  # earlier runs behind the placed figures
    kinds: list[str] = field(default_factory=list)  # the node types of the placed figures
    steady: list[str] = field(default_factory=list)  # figures the same in this run as in every earlier one

    @property
    def intro(self) -> str:
        """What the table compares: each figure's median over this run's nodes of a type, against earlier runs."""
        if not self.rows:
            return ""
        kinds = ", ".join(kind_text(k) for k in self.kinds)
        return (f"Each figure is this run's median over its nodes, placed among up to "
                f"{count(self.runs, 'earlier run')} of the same node type ({kinds})")

    @property
    def steady_text(self) -> str:
        if not self.steady:
            return ""
        listed = ", ".join(self.steady[:MAX_STEADY])
        more = f" and {len(self.steady) - MAX_STEADY} more" if len(self.steady) > MAX_STEADY else ""
        return f"The same as in every earlier run: {listed}{more}"

    @property
    def summary(self) -> str:
        """One line for the Markdown report."""
        placed = len(self.rows) + self.left_out + len(self.steady)
        parts = []
        if placed:
            text = f"{count(placed, 'figure')} placed among {count(self.runs, 'earlier run')} of their node type"
            low = [r for r in self.rows if r.low]
            if low:
                text += (f"; {count(len(low), 'figure')} worse than {100 - LOW:g}% of the earlier runs: "
                         f"{', '.join(f'{r.name} ({r.value})' for r in low[:3])}")
            parts.append(text)
        if self.too_few:
            parts.append(self.too_few[:1].lower() + self.too_few[1:] if parts else self.too_few)
        if self.changes:
            more = f" (and {len(self.changes) - 1} more)" if len(self.changes) > 1 else ""
            parts.append(f"image changed: {self.changes[0]}{more}")
        return "; ".join(parts)


def kind_text(kind: str) -> str:
    if not kind:
        return "type not recorded"
    return "without GPUs" if kind == "no GPU" else kind


def steady(entry: dict[str, Any]) -> bool:
    """This run's value is what every earlier run measured: nothing to place."""
    value = _finite(entry.get("value"))
    return value is not None and _finite(entry.get("history_p05")) == value == _finite(entry.get("history_p95"))


def standing(entry: dict[str, Any], name_kind: bool = False) -> str:
    runs = int(entry.get("runs") or 0)
    kind = "of this node type" + (f" ({kind_text(str(entry.get('kind') or ''))})" if name_kind else "")
    same = ", same image" if entry.get("same_image") else ""
    if steady(entry):
        return f"the same as {'the' if runs == 1 else 'all'} {count(runs, 'earlier run')} {kind}{same}"
    better = entry.get("better_than")
    share = better if isinstance(better, (int, float)) else entry.get("percentile")
    verb = "better than" if isinstance(better, (int, float)) else "above"
    return f"{verb} {share:.0f}% of {count(runs, 'earlier run')} {kind}{same}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def sparkline(entry: dict[str, Any]) -> str:
    """The latest earlier runs' medians as a line, their 5th-95th percentile as a band, and this run as
    a dot; inline SVG of numbers only (its title is escaped)."""
    recent = [v for v in map(_finite, entry.get("recent") or []) if v is not None]
    value = _finite(entry.get("value"))
    if not recent or value is None:
        return ""
    p05, p95 = _finite(entry.get("history_p05")), _finite(entry.get("history_p95"))
    points = recent + [value]
    low, high = min(points + [p for p in (p05, p95) if p is not None]), max(points + [p for p in (p05, p95)
                                                                                     if p is not None])
    span = high - low

    def y(v: float) -> float:
        if not span:
            return SPARK_H / 2  # every run the same: a level line through the middle
        return round(SPARK_H - SPARK_PAD - (v - low) / span * (SPARK_H - 2 * SPARK_PAD), 2)

    step = (SPARK_W - 2 * SPARK_PAD) / max(1, len(points) - 1)
    xs = [round(SPARK_PAD + i * step, 2) for i in range(len(points))]
    unit = str(entry.get("unit") or "")
    title = html.escape(f"the latest {count(len(recent), 'earlier run')}: "
                        f"{', '.join(quantity(v, unit) for v in recent)}; this run {quantity(value, unit)}")
    parts = [f'<svg class="spark" style="display: block" width="{SPARK_W}" height="{SPARK_H}" '
             f'viewBox="0 0 {SPARK_W} {SPARK_H}" role="img"><title>{title}</title>']
    if p05 is not None and p95 is not None:
        top, bottom = y(max(p05, p95)), y(min(p05, p95))
        parts.append(f'<rect x="0" y="{top}" width="{SPARK_W}" height="{round(max(bottom - top, 1.0), 2)}" '
                     'fill="#eaeef2"/>')
    line = " ".join(f"{x},{y(v)}" for x, v in zip(xs, points))
    parts.append(f'<polyline points="{line}" fill="none" stroke="#8c959f" stroke-width="1.5"/>')
    parts.append(f'<circle cx="{xs[-1]}" cy="{y(value)}" r="3" fill="#0969da"/></svg>')
    return "".join(parts)


def _too_few(entries: list[dict[str, Any]], min_runs: int) -> str:
    if not entries:
        return ""
    most = max(int(e.get("runs") or 0) for e in entries)
    figures = count(len(entries), "figure")
    if most == 0:
        return (f"{figures} {'has' if len(entries) == 1 else 'have'} no earlier run of this node type in fleet "
                f"history yet ({count(min_runs, 'run')} {'is' if min_runs == 1 else 'are'} needed to place a figure)")
    return (f"Too few earlier runs of this node type to place {figures}: at most {most} recorded, "
            f"{min_runs} needed")


def change_lines(changes: list[dict[str, Any]], limit: int = MAX_CHANGES) -> list[str]:
    """'driver 535.104.05 → 550.54.15 on gpu[01-02] since the run of 2026-11-28 10:00', one per
    change and previous run, the nodes that share it folded."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for c in changes:
        changed = c.get("changed") if isinstance(c.get("changed"), dict) else {}
        what = tuple((f, *(list(v) + [None, None])[:2]) for f, v in changed.items() if isinstance(v, (list, tuple)))
        groups.setdefault((what, str(c.get("before_started") or "")), []).append(str(c.get("node") or ""))
    lines = []
    for (what, before), names in groups.items():
        said = ", ".join(f"{IMAGE_LABELS.get(f, f)} {old if old is not None else 'none'} → "
                         f"{new if new is not None else 'none'}" for f, old, new in what) or "image"
        lines.append(f"{said} on {fold(names)} since the run of {day(before)}")
    if len(lines) > limit:
        rest = sum(len(names) for names in list(groups.values())[limit:])
        lines = lines[:limit] + [f"{count(rest, 'more node')} changed image (results.json lists them)"]
    return lines


def build(history: dict[str, Any] | None) -> HistoryView | None:
    """The view of RunReport.history; None when the run read no history, or it has nothing to show
    (no headline figure, no image change)."""
    if not isinstance(history, dict):
        return None
    entries = _dicts(history.get("figures"))
    if not entries and not history.get("image_changes"):
        return None
    placed = [e for e in entries if _finite(e.get("percentile")) is not None]
    placed_ids = {id(e) for e in placed}
    kinds = list(dict.fromkeys(str(e.get("kind") or "") for e in placed))
    rows = [_row(e, name_kind=len(kinds) > 1) for e in placed if not steady(e)]
    shown = _rows_shown(rows)
    return HistoryView(rows=shown, left_out=len(rows) - len(shown),
                       too_few=_too_few([e for e in entries if id(e) not in placed_ids],
                                        _int(history.get("min_runs"), 3)),
                       changes=change_lines(_dicts(history.get("image_changes"))),
                       runs=_int(history.get("history_runs"), 0), kinds=kinds,
                       steady=list(dict.fromkeys(str(e.get("name") or "") for e in placed if steady(e))))


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a recorded list, anything else in it (or a missing list) left out."""
    return [e for e in value or [] if isinstance(e, dict)]


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) else default


def _row(e: dict[str, Any], name_kind: bool) -> HistoryRow:
    """One figure placed among its history, written out."""
    unit = str(e.get("unit") or "")
    better = _finite(e.get("better_than"))
    p05, p95 = _finite(e.get("history_p05")), _finite(e.get("history_p95"))
    return HistoryRow(
        check_id=str(e.get("check_id") or ""), name=str(e.get("name") or ""), kind=str(e.get("kind") or ""),
        value=quantity(_finite(e.get("value")), unit), standing=standing(e, name_kind=name_kind),
        range=f"{quantity(p05, '')} – {quantity(p95, unit)}" if p05 is not None and p95 is not None else "",
        median=quantity(_finite(e.get("history_median")), unit), sparkline=sparkline(e),
        low=better is not None and better <= LOW, better_than=better)


def _rows_shown(rows: list[HistoryRow]) -> list[HistoryRow]:
    """At most MAX_ROWS rows, in report order still, the ones furthest below their history kept first."""
    if len(rows) <= MAX_ROWS:
        return rows
    first = sorted(rows, key=lambda r: r.better_than if r.better_than is not None else 50.0)[:MAX_ROWS]
    keep = {id(r) for r in first}
    return [r for r in rows if id(r) in keep]
