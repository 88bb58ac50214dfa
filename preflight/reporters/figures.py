"""The figures a report can draw, read from the checks' own declarations.

A check declares what kind of figure each measurement is (`Measurement.figure`: link, scaling,
size, rate, step), the line or group it belongs to (`series`), the condition it was measured at
(`at`) and which way is better (`direction`). This module groups the declared measurements into
one `FigureGroup` per (check, kind, unit) and reads out what a chart and a key-finding sentence
need. It names no check: a third-party check that declares its figures gets charts and sentences
like a built-in one. Pure: no matplotlib here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from preflight.core.model import (
    FIGURE_KINDS,
    FIGURE_LINK,
    FIGURE_RATE,
    FIGURE_SCALING,
    FIGURE_SIZE,
    FIGURE_STEP,
    CheckResult,
    Measurement,
    RunReport,
    Scope,
)
from preflight.reporters.numbers import number, percent, quantity, size


def finite(value: Any) -> float | None:
    if type(value) is float:  # most figures
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class Point:
    result: CheckResult
    m: Measurement
    node: str  # the node the figure was measured on (the result's, or the measurement's own)
    value: float

    @property
    def series(self) -> str:
        return self.m.series or ""

    @property
    def threshold(self) -> float | None:
        return finite(self.m.threshold) if self.m.comparison in (">=", "<=", ">", "<") else None

    def short_of(self) -> bool | None:
        """Whether this figure alone falls short of what it is judged against; None when judged against nothing."""
        return None if self.m.ok is None else not self.m.ok


@dataclass
class FigureGroup:
    """Every declared measurement of one kind and unit from one check, over all nodes.

    Its derived lists are computed once, when first read: read them only after every point is in."""

    kind: str
    check_id: str
    title: str  # the check's title
    unit: str
    points: list[Point] = field(default_factory=list)

    @cached_property
    def names(self) -> list[str]:
        return list(dict.fromkeys(p.m.name for p in self.points))

    @cached_property
    def nodes(self) -> list[str]:
        return list(dict.fromkeys(p.node for p in self.points))

    @cached_property
    def higher_is_better(self) -> bool:
        directions = [p.m.direction for p in self.points if p.m.direction]
        return not directions or directions[0] != "lower"

    @property
    def counted(self) -> str:
        """What a scaling figure's `at` counts: as its figures declare it (Measurement.counts), else nodes
        for a cluster-scope check and devices on one node."""
        declared = next((p.m.counts for p in self.points if p.m.counts), None)
        if declared:
            return declared
        return "nodes" if any(p.result.scope is Scope.CLUSTER for p in self.points) else "devices"

    @property
    def quantity_label(self) -> str:
        """'busbw (GB/s)' when every figure has one name, else the unit."""
        names = self.names
        return f"{names[0]} ({self.unit})" if len(names) == 1 and self.unit else (self.unit or names[0])

    def label(self, point: Point) -> str:
        """The line or bar a point belongs to, with its node when the chart spans several."""
        series = point.series or (self.names[0] if len(self.names) == 1 else point.m.name)
        return f"{point.node} {series}".strip() if len(self.nodes) > 1 else series

    def score(self, point: Point) -> float:
        """Lower is worse: the figure over its threshold (or itself), turned so that higher is better."""
        base = point.threshold or 1.0
        ratio = point.value / base if base else point.value
        return ratio if self.higher_is_better else -ratio


def figure_groups(report: RunReport) -> list[FigureGroup]:
    """The declared figures, grouped per (check, kind, unit), in report order."""
    groups: dict[tuple[str, str, str], FigureGroup] = {}
    for result in report.results:
        for m in result.measurements:
            if m.figure not in FIGURE_KINDS:
                continue
            value = finite(m.value)
            if value is None:
                continue
            node = m.node if m.node and m.figure != FIGURE_LINK else result.node
            key = (result.check_id, m.figure, m.unit)
            group = groups.setdefault(key, FigureGroup(m.figure, result.check_id, result.title or result.check_id,
                                                       m.unit))
            group.points.append(Point(result, m, node, value))
    return list(groups.values())


# ---------------------------------------------------------------------------------------------------
# What each kind of chart needs
# ---------------------------------------------------------------------------------------------------

@dataclass
class LinkGrid:
    nodes: list[str]
    threshold: float | None
    points: list[tuple[str, str, Point]]  # (src, dst, point)

    @cached_property
    def values(self) -> list[list[float | None]]:
        """[sender][receiver]; None where not measured. Made when first read: a million cells at 1,000
        nodes, which neither the drawable test nor the chart of the worst links reads."""
        index = {n: i for i, n in enumerate(self.nodes)}
        values: list[list[float | None]] = [[None] * len(self.nodes) for _ in self.nodes]
        for src, dst, p in self.points:
            values[index[src]][index[dst]] = p.value
        return values


def link_grid(group: FigureGroup) -> LinkGrid | None:
    """Pairs "src -> dst" as a sender x receiver grid; None with fewer than two links."""
    pairs = []
    for p in group.points:
        ends = str(p.m.at if p.m.at is not None else p.m.node or "").split(" -> ")
        if len(ends) == 2 and all(ends):
            pairs.append((ends[0].strip(), ends[1].strip(), p))
    if len(pairs) < 2:
        return None
    nodes = list(dict.fromkeys(n for src, dst, _ in pairs for n in (src, dst)))
    thresholds = [p.threshold for _, _, p in pairs if p.threshold is not None]
    return LinkGrid(nodes, thresholds[0] if thresholds else None, pairs)


@dataclass
class Line:
    label: str
    node: str
    points: list[tuple[float, float, Point]]  # (x, y, point), sorted by x

    @property
    def last(self) -> Point:
        return self.points[-1][2]


def _once(group: FigureGroup, name: str, make: Callable[[FigureGroup], list[Any]]) -> list[Any]:
    """A list derived from the group's points, made the first time it is asked for (the drawable test,
    the chart and the sentence all ask): a copy each time, so that no reader reorders another's."""
    made = group.__dict__.get(name)
    if made is None:
        made = group.__dict__[name] = make(group)
    return list(made)


def lines(group: FigureGroup) -> list[Line]:
    """One line per (node, series) over a numeric `at`, with at least two points."""
    return _once(group, "_lines", _lines)


def _lines(group: FigureGroup) -> list[Line]:
    found: dict[str, Line] = {}
    for p in group.points:
        x = finite(p.m.at)
        if x is None:
            continue
        label = group.label(p)
        line = found.get(label)
        if line is None:
            line = found[label] = Line(label, p.node, [])
        line.points.append((x, p.value, p))
    result = []
    for line in found.values():
        line.points.sort(key=lambda item: item[0])
        if len(line.points) >= 2:
            result.append(line)
    return result


def efficiency(line: Line) -> list[tuple[float, float, float]]:
    """(n, ideal, efficiency) per point of a scaling line: ideal is n x the value at the smallest n."""
    n0, v0, _ = line.points[0]
    if n0 <= 0 or v0 <= 0:
        return []
    return [(n, v0 * n / n0, value / (v0 * n / n0)) for n, value, _ in line.points]


@dataclass
class RateGroup:
    label: str  # the `at` label, with its node when the chart spans several
    node: str
    bars: dict[str, Point]  # series -> point


def rate_groups(group: FigureGroup) -> list[RateGroup]:
    """Bars side by side: one group per (node, at), one bar per series."""
    return _once(group, "_rate_groups", _rate_groups)


def _rate_groups(group: FigureGroup) -> list[RateGroup]:
    several = len(group.nodes) > 1
    found: dict[tuple[str, str], RateGroup] = {}
    for p in group.points:
        at = str(p.m.at) if p.m.at is not None else p.m.name
        rate = found.get((p.node, at))
        if rate is None:
            rate = found[(p.node, at)] = RateGroup(f"{p.node} {at}" if several else at, p.node, {})
        rate.bars[p.series or p.m.name] = p
    return list(found.values())


def drawable(group: FigureGroup) -> bool:
    """Whether the group holds enough to draw: two links, a line of two points, two bars."""
    if group.kind == FIGURE_LINK:
        return link_grid(group) is not None
    if group.kind in (FIGURE_SCALING, FIGURE_SIZE, FIGURE_STEP):
        return bool(lines(group))
    if group.kind == FIGURE_RATE:
        return sum(len(g.bars) for g in rate_groups(group)) >= 2
    return False


# ---------------------------------------------------------------------------------------------------
# Key findings: one sentence per group of figures, about its worst figure
# ---------------------------------------------------------------------------------------------------

@dataclass
class Sentence:
    text: str
    point: Point
    short_of_need: bool | None  # the figure falls short of its own threshold (None: judged against nothing)
    nodes: int = 1  # how many nodes the worst was chosen among
    node: str = ""


def need_clause(value: float, need: float | None, unit: str, higher: bool = True) -> str:
    if need is None:
        return ""
    short = value < need if higher else value > need
    if short:
        return f", {'below' if higher else 'above'} the {quantity(need, unit)} needed"
    return f", {'at least' if higher else 'at most'} the {quantity(need, unit)} needed"


def sentence(group: FigureGroup) -> Sentence | None:
    """The one sentence a reader needs about this group: its worst figure, against what it needs."""
    writer = {FIGURE_LINK: _link_sentence, FIGURE_SCALING: _scaling_sentence, FIGURE_SIZE: _size_sentence,
              FIGURE_RATE: _rate_sentence}.get(group.kind)
    return writer(group) if writer else None


def _link_sentence(group: FigureGroup) -> Sentence | None:
    pairs = []
    for p in group.points:
        ends = str(p.m.at if p.m.at is not None else p.m.node or "").split(" -> ")
        if len(ends) == 2:
            pairs.append((group.score(p), ends[0], ends[1], p))
    if not pairs:
        return None
    _, src, dst, p = min(pairs, key=lambda item: (item[0], item[1], item[2]))
    worst = "slowest" if group.higher_is_better else "worst"
    text = f"the {worst} link, {src} -> {dst}, carries {quantity(p.value, group.unit)}"
    text += need_clause(p.value, p.threshold, group.unit, group.higher_is_better).replace(" needed", " the cluster needs")
    return Sentence(text, p, p.short_of(), node="")


def _scaling_sentence(group: FigureGroup) -> Sentence | None:
    found = lines(group)
    scored = []
    for line in found:
        figures = efficiency(line)
        if figures:
            n, ideal, eff = figures[-1]
            scored.append((eff, line.node, line, n, ideal))
    if not scored:
        return None
    eff, node, line, n, ideal = min(scored, key=lambda item: (item[0], item[1]))
    n0, v0, _ = line.points[0]
    effective = line.points[-1][1] / (v0 / n0)
    series = line.last.series
    text = f"{number(n)} {group.counted} deliver the throughput of {effective:.1f} ({percent(eff)} efficiency)"
    if series and len({ln.last.series for ln in found}) > 1:
        text = f"with {series}, {text}"
    return Sentence(text, line.last, line.last.short_of(), len({ln.node for ln in found}), node)


def _size_sentence(group: FigureGroup) -> Sentence | None:
    found = lines(group)
    if not found:
        return None
    # The series the check judges (a threshold at its largest size) speak for the group.
    judged = [ln for ln in found if ln.last.threshold is not None] or found
    line = min(judged, key=lambda ln: (group.score(ln.last), ln.node))
    x, value, p = line.points[-1]
    series = p.series or p.m.name
    text = f"{series} reaches {quantity(value, group.unit)} at {size(x)}"
    text += need_clause(value, p.threshold, group.unit, group.higher_is_better)
    return Sentence(text, p, p.short_of(), len({ln.node for ln in judged}), line.node)


def _rate_sentence(group: FigureGroup) -> Sentence | None:
    groups = rate_groups(group)
    candidates = [(group.score(p), g.node, g, p) for g in groups for p in g.bars.values() if p.threshold is not None]
    if not candidates:
        candidates = [(group.score(p), g.node, g, p) for g in groups for p in g.bars.values()]
    if not candidates:
        return None
    _, node, worst, p = min(candidates, key=lambda item: (item[0], item[1]))
    at = str(p.m.at) if p.m.at is not None else p.m.name
    figures = [f"{series} {quantity(q.value, group.unit)}" for series, q in worst.bars.items() if q is not p]
    text = f"{at} {p.series or p.m.name} is {quantity(p.value, group.unit)}"
    text += need_clause(p.value, p.threshold, group.unit, group.higher_is_better)
    if figures:
        text += f" ({', '.join(figures)})"
    return Sentence(text, p, p.short_of(), len({g.node for g in groups}), node)
