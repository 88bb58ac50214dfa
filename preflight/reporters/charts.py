"""Charts for the HTML report: pure functions RunReport -> inline SVG, drawn from declared figures.

Which charts there are comes from the checks' figure declarations alone (see figures.py): a
"link" figure is a heatmap of sender x receiver with the threshold marked; "scaling" is throughput
against the device count with the ideal line (n x the figure at the smallest n); "size" is a
figure against message size on a log axis, one line per series; "rate" is grouped bars, one bar
per series; "step" is one line per series over the steps. Titles and axis labels come from the
check's title, the measurement's name and its unit. matplotlib is imported inside the drawing
functions only.

The SVG is made to sit inside an HTML page and to be byte-for-byte reproducible:
- a fixed hash salt per chart and no date metadata, so the same report draws the same bytes;
- text kept as <text> (svg.fonttype "none"): a fraction of the size of text drawn as paths;
- no XML prolog, DOCTYPE, comments or namespace URLs, and `href` in place of `xlink:href`, so the
  page carries no URL of any kind (the HTML parser puts <svg> in the SVG namespace by itself);
- every id prefixed with the chart's name, so several charts on one page never share an id.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any, Callable, NamedTuple

from preflight.core.model import FIGURE_LINK, FIGURE_RATE, FIGURE_SCALING, FIGURE_SIZE, FIGURE_STEP, RunReport
from preflight.reporters import figures
from preflight.reporters.figures import FigureGroup, Line, RateGroup
from preflight.reporters.numbers import number, percent, quantity, size

# Beyond these, a chart turns into noise: show the worst few rather than every node.
MAX_SERIES = 8
MAX_GROUPS = 16
MAX_ANNOTATED_NODES = 12
MAX_HEATMAP_NODES = 48  # more nodes than this: the worst links as bars, not a grid
MAX_WORST_LINKS = 24

COLOURS = {"ideal": "#8c959f", "bad": "#cf222e"}
SERIES_COLOURS = ["#0969da", "#bc4c00", "#1a7f37", "#8250df", "#cf222e", "#1b7c83", "#9a6700", "#57606a"]


class Chart(NamedTuple):
    title: str
    caption: str
    svg: str
    check_id: str = ""  # the check whose figures it draws: a check that leads its section shows it there


def render_charts(report: RunReport, groups: list[FigureGroup] | None = None) -> list[Chart]:
    """One chart per group of declared figures that holds enough to draw, in report order (`groups`:
    figures.figure_groups(report) when they were made already, as the report's view has them)."""
    groups = [g for g in (figures.figure_groups(report) if groups is None else groups) if figures.drawable(g)]
    per_check: dict[str, int] = {}
    for g in groups:
        per_check[g.check_id] = per_check.get(g.check_id, 0) + 1
    charts = []
    for index, group in enumerate(groups):
        title = group.title if per_check[group.check_id] == 1 else f"{group.title}: {group.quantity_label}"
        draw = DRAWERS[group.kind]
        try:
            caption, svg = draw(group, f"chart{index}", title)
            charts.append(Chart(title, caption, svg, group.check_id))
        except Exception as exc:  # noqa: BLE001 - a chart that cannot be drawn must not cost the whole report
            charts.append(Chart(title, f"This chart could not be drawn ({type(exc).__name__}: {exc}); the figures "
                                       "are in the tables below.", "", group.check_id))
    return charts


def has_chart_data(report: RunReport) -> bool:
    return any(figures.drawable(g) for g in figures.figure_groups(report))


def _style(name: str) -> dict[str, Any]:
    return {
        "svg.hashsalt": f"preflight-{name}",
        "svg.fonttype": "none",
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],
        "font.size": 9.5,
        "axes.titlesize": 10.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.color": "#d0d7de",
        "grid.linewidth": 0.6,
        "axes.axisbelow": True,
        "legend.frameon": False,
        "legend.fontsize": 8.5,
    }


def _svg(name: str, title: str, inches: tuple[float, float], draw: Callable[[Any], Any]) -> str:
    import matplotlib

    # The style must be active both while artists are made and while the SVG is written.
    with matplotlib.rc_context(_style(name)):
        fig = laid_out(inches, draw)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return clean_svg(buffer.getvalue(), name, title)


def laid_out(inches: tuple[float, float], draw: Callable[[Any], Any]) -> Any:
    """A bare Figure (not pyplot: no global state, no GUI backend, nothing to close) drawn by `draw`
    and laid out once, by tight_layout: the axes and their labels measured in one pass, and no layout
    engine left to run when the SVG is written (constrained layout measured twice and drew the whole
    figure once more before writing it: half of a chart's cost). `draw` may return a legend it put at
    the figure's foot; the axes are fitted above it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=inches)
    foot = draw(fig)
    bottom = foot.get_window_extent().y1 / fig.bbox.height if foot is not None else 0.0
    fig.tight_layout(pad=0.3, rect=(0.0, bottom, 1.0, 1.0))
    fig.set_layout_engine(None)
    return fig


_ID = re.compile(r'\bid="([^"]+)"')


def clean_svg(text: str, prefix: str, label: str) -> str:
    """matplotlib's SVG document -> an element fit to inline in HTML (see the module docstring)."""
    text = text[text.index("<svg"):]
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text)
    text = text.replace("xlink:href=", "href=")
    ids = set(_ID.findall(text))
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r'href="#([^"]+)"',
                  lambda m: f'href="#{prefix}-{m.group(1)}"' if m.group(1) in ids else m.group(0), text)
    text = re.sub(r"url\(#([^)]+)\)",
                  lambda m: f"url(#{prefix}-{m.group(1)})" if m.group(1) in ids else m.group(0), text)
    escaped = label.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    text = text.replace("<svg ", f'<svg role="img" aria-label="{escaped}" ', 1)
    return text.strip() + "\n"


def _colour(i: int) -> str:
    return SERIES_COLOURS[i % len(SERIES_COLOURS)]


# A tick label's width per character and its height, in inches, at the charts' tick font size.
LABEL_CHAR_IN, LABEL_HEIGHT_IN = 0.075, 0.17


def _x_labels(ax: Any, positions: list[float], labels: list[str], slot_in: float) -> None:
    """Tick labels under `positions`, `slot_in` inches apart: level when the longest fits its slot, else
    at 45 degrees, anchored at their right end under the tick, so neighbours never overlap."""
    longest = max((len(label) for label in labels), default=0) * LABEL_CHAR_IN
    if longest <= slot_in * 0.9:
        ax.set_xticks(positions, labels)
    else:
        ax.set_xticks(positions, labels, rotation=45, ha="right", rotation_mode="anchor")


def _headroom(ax: Any, tops: list[float], room: float = 0.12) -> None:
    """The value axis from 0 to above its highest point (`tops`: values and thresholds drawn), by
    `room` of it: a marker, a label or a threshold dash at the top is never cut by the frame."""
    finite = [v for v in tops if v is not None and math.isfinite(v)]
    high = max(finite, default=0.0)
    current = ax.get_ylim()[1]
    ax.set_ylim(0, max(current, high * (1 + room)) or 1.0)


def _draw_worst_links(group: FigureGroup, name: str, title: str, grid: figures.LinkGrid) -> tuple[str, str]:
    """Past MAX_HEATMAP_NODES a sender x receiver grid is a smear: the slowest links as bars instead."""
    higher = group.higher_is_better
    ranked = sorted(grid.points, key=lambda item: (item[2].value if higher else -item[2].value, item[0], item[1]))
    shown = ranked[:MAX_WORST_LINKS]
    threshold = grid.threshold

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.grid(axis="y", visible=False)
        labels = [f"{src} -> {dst}" for src, dst, _ in shown]
        values = [p.value for _, _, p in shown]
        short = [threshold is not None and (v < threshold if higher else v > threshold) for v in values]
        ax.barh(range(len(shown)), values, color=[COLOURS["bad"] if s else SERIES_COLOURS[0] for s in short])
        ax.set_yticks(range(len(shown)), labels)
        ax.invert_yaxis()
        if threshold is not None:
            ax.axvline(threshold, color="#1f2328", linewidth=1.5, label=f"{quantity(threshold, group.unit)} needed")
            ax.legend(loc="lower right")
        ax.set_xlabel(group.quantity_label)
        ax.set_xlim(left=0)

    all_values = [p.value for _, _, p in grid.points]
    median = sorted(all_values)[len(all_values) // 2]
    caption = (f"The {len(shown)} {'slowest' if higher else 'worst'} of {len(grid.points)} links between "
               f"{len(grid.nodes)} nodes (the median link: {quantity(median, group.unit)}); red bars miss "
               f"{'the ' + quantity(threshold, group.unit) + ' needed' if threshold is not None else 'nothing'}.")
    return caption, _svg(name, title, (6.5, 1.2 + 0.22 * len(shown)), draw)


def _draw_link(group: FigureGroup, name: str, title: str) -> tuple[str, str]:
    import numpy as np
    from matplotlib.colors import Normalize, TwoSlopeNorm
    from matplotlib.patches import Rectangle

    grid = figures.link_grid(group)
    assert grid is not None
    n = len(grid.nodes)
    if n > MAX_HEATMAP_NODES:
        return _draw_worst_links(group, name, title, grid)
    values = np.array([[np.nan if v is None else v for v in row] for row in grid.values], dtype=float)
    peak = float(np.nanmax(values))
    threshold = grid.threshold
    higher = group.higher_is_better

    side = min(9.0, 3.6 + 0.42 * n)

    def short(value: float) -> bool:
        return threshold is not None and (value < threshold if higher else value > threshold)

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.grid(False)
        ax.set_facecolor("#eaeef2")  # links not measured show as grey
        cmap = "RdYlGn" if higher else "RdYlGn_r"
        if threshold and threshold > 0:
            norm: Any = TwoSlopeNorm(vmin=0.0, vcenter=threshold, vmax=max(peak * 1.05, threshold * 1.5))
        else:
            norm = Normalize(vmin=0.0, vmax=peak * 1.05 or 1.0)
        mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap=cmap, norm=norm, edgecolors="white",
                             linewidth=1.0, rasterized=n > 32)
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        labelled = n <= 40
        _x_labels(ax, [i + 0.5 for i in range(n)], grid.nodes if labelled else [""] * n, side / (n + 1))
        ax.set_yticks([i + 0.5 for i in range(n)], grid.nodes if labelled else [""] * n)
        ax.set_xlabel("receiver")
        ax.set_ylabel("sender")
        ax.tick_params(length=0)
        for i in range(n):
            for j in range(n):
                value = values[i, j]
                below = not np.isnan(value) and short(float(value))
                if below:
                    ax.add_patch(Rectangle((j + 0.06, i + 0.06), 0.88, 0.88, fill=False,
                                           edgecolor="#82071e", linewidth=2.0))
                if n <= MAX_ANNOTATED_NODES:
                    if np.isnan(value):
                        ax.text(j + 0.5, i + 0.5, "—" if i != j else "", ha="center", va="center",
                                fontsize=8, color="#57606a")
                    else:
                        red, green, blue, _ = mesh.cmap(norm(value))
                        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                        ax.text(j + 0.5, i + 0.5, number(float(value)), ha="center", va="center", fontsize=9,
                                fontweight="bold" if below else "normal", color="white" if dark else "#1f2328")
        bar = fig.colorbar(mesh, ax=ax, shrink=0.85, pad=0.02)
        bar.set_label(group.quantity_label + (f"; black line: {quantity(threshold, group.unit)} needed"
                                              if threshold else ""))
        if threshold:
            bar.ax.axhline(threshold, color="#1f2328", linewidth=2.5)

    need = f"the {quantity(threshold, group.unit)} needed" if threshold else "a threshold"
    relation = "below" if higher else "above"
    caption = (f"{group.quantity_label} of each link, sender (row) to receiver (column). Cells {relation} "
               f"{need} are red and outlined; grey cells were not measured.")
    return caption, _svg(name, title, (side + 1.4, side), draw)


def _worst_lines(group: FigureGroup, found: list[Line], key: Callable[[Line], float]) -> list[Line]:
    """Worst first, capped, so a crowded chart keeps the lines that matter."""
    return sorted(found, key=lambda line: (key(line), line.label))[:MAX_SERIES]


def _draw_scaling(group: FigureGroup, name: str, title: str) -> tuple[str, str]:
    found = figures.lines(group)
    shown = _worst_lines(group, found, lambda line: (figures.efficiency(line) or [(0, 0, 1.0)])[-1][2])
    counts = sorted({x for line in shown for x, _, _ in line.points})

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ends = []
        for i, line in enumerate(shown):
            colour = _colour(i)
            xs = [x for x, _, _ in line.points]
            ax.plot(xs, [y for _, y, _ in line.points], marker="o", color=colour, linewidth=1.8, label=line.label)
            ideal = figures.efficiency(line)
            if ideal:
                ax.plot(xs, [i_value for _, i_value, _ in ideal], linestyle="--", color=colour, alpha=0.45,
                        linewidth=1.1, label="ideal (dashed)" if i == 0 else None)
                ends.append((line.points[-1][1], xs[-1], ideal[-1][2], colour))
        # Label each line's last point with its efficiency, spaced so that labels never collide.
        ends.sort(reverse=True)
        top = max((y for _, y, _ in (p for line in shown for p in line.points)), default=1.0)
        step, last_y = top * 0.05, math.inf
        for y, x, eff, colour in ends:
            label_y = min(y, last_y - step)
            last_y = label_y
            ax.text(x + counts[-1] * 0.03, label_y, percent(eff), fontsize=8.5, color=colour, va="center")
        ax.set_xlim(0, counts[-1] * 1.15)
        _headroom(ax, [y for line in shown for _, y, _ in line.points]
                  + [i_value for line in shown for _, i_value, _ in (figures.efficiency(line) or [])])
        ax.set_xticks(counts, [number(n) for n in counts])
        ax.set_xlabel(group.counted)
        ax.set_ylabel(group.quantity_label)
        ax.legend(loc="upper left")

    solid = ", ".join(dict.fromkeys(line.label for line in shown))
    caption = (f"{group.quantity_label} by the number of {group.counted}: {solid} (solid) and ideal (dashed: n times the "
               f"figure at the smallest count); labels are the efficiency at the largest count.")
    if len(found) > len(shown):
        caption += f" The {len(shown)} least efficient of {len(found)} series are shown."
    return caption, _svg(name, title, (6.0, 4.0), draw)


def _threshold_marks(ax: Any, points: list[tuple[float, float | None]], first: bool = True) -> None:
    """A short red dash at each (x, threshold): what the figure measured there must reach."""
    xs = [x for x, t in points if t is not None]
    ys = [t for _, t in points if t is not None]
    if xs:
        ax.scatter(xs, ys, marker="_", s=260, linewidths=2.2, color=COLOURS["bad"], zorder=3,
                   label="needed" if first else None)


def _draw_size(group: FigureGroup, name: str, title: str) -> tuple[str, str]:
    found = figures.lines(group)
    shown = _worst_lines(group, found, lambda line: group.score(line.last))
    sizes = sorted({x for line in shown for x, _, _ in line.points})
    judged = any(p.threshold is not None for line in shown for _, _, p in line.points)

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        for i, line in enumerate(shown):
            ax.plot([x for x, _, _ in line.points], [y for _, y, _ in line.points], marker="o", linewidth=1.8,
                    color=_colour(i), label=line.label)
        _threshold_marks(ax, [(x, p.threshold) for line in shown for x, _, p in line.points])
        ax.set_xscale("log", base=2)
        ticks = sizes if len(sizes) <= 8 else sizes[:: math.ceil(len(sizes) / 8)]
        ax.set_xticks(ticks, [size(b) for b in ticks])
        ax.minorticks_off()
        ax.set_xlabel("message size")
        ax.set_ylabel(group.quantity_label)
        _headroom(ax, [y for line in shown for _, y, _ in line.points]
                  + [p.threshold for line in shown for _, _, p in line.points])
        ax.legend(loc="best")

    caption = f"{group.quantity_label} at each message size, one line per series"
    caption += "; red dashes are what the figure must reach at that size." if judged else "."
    if len(found) > len(shown):
        caption += f" The {len(shown)} worst of {len(found)} series are shown."
    return caption, _svg(name, title, (6.5, 3.6), draw)


def _draw_rate(group: FigureGroup, name: str, title: str) -> tuple[str, str]:
    from matplotlib.transforms import ScaledTranslation

    all_groups = figures.rate_groups(group)
    ordered: list[RateGroup] = sorted(all_groups, key=lambda g: (min(group.score(p) for p in g.bars.values()),
                                                                 g.label))[:MAX_GROUPS]
    if len(all_groups) <= MAX_GROUPS:
        ordered = all_groups  # keep the report's order when nothing is left out
    series = list(dict.fromkeys(s for g in ordered for s in g.bars))
    width = 0.8 / len(series)
    width_in = max(6.0, min(11.0, 2.5 + 0.9 * len(ordered) * len(series)))
    judged = any(p.threshold is not None for g in ordered for p in g.bars.values())

    def draw(fig: Any) -> Any:
        ax = fig.subplots()
        ax.grid(axis="x", visible=False)
        marks: list[tuple[float, float | None]] = []
        # Each bar's figure 2 points above its top: plain text on a shifted transform costs a third
        # of an annotation.
        above = ax.transData + ScaledTranslation(0, 2 / 72, fig.dpi_scale_trans)
        for k, label in enumerate(series):
            xs, heights, points = [], [], []
            for g_index, g in enumerate(ordered):
                p = g.bars.get(label)
                if p is not None:
                    xs.append(g_index - 0.4 + width * (k + 0.5))
                    heights.append(p.value)
                    points.append(p)
            bars = ax.bar(xs, heights, width * 0.92, color=_colour(k), label=label)
            for rect, p in zip(bars, points):
                short = p.short_of() is True
                ax.text(rect.get_x() + rect.get_width() / 2, p.value, number(p.value), transform=above, ha="center",
                        va="bottom", fontsize=8, color=COLOURS["bad"] if short else "#1f2328",
                        fontweight="bold" if short else "normal")
                marks.append((rect.get_x() + rect.get_width() / 2, p.threshold))
        _threshold_marks(ax, marks)
        _x_labels(ax, list(range(len(ordered))), [g.label for g in ordered], width_in / max(1, len(ordered)))
        ax.set_ylabel(group.quantity_label)
        ax.margins(y=0.2)
        _headroom(ax, [p.value for g in ordered for p in g.bars.values()] + [t for _, t in marks], room=0.2)
        return fig.legend(loc="lower center", ncols=min(4, len(series) + 1))

    caption = f"{group.quantity_label} side by side: {', '.join(series)}"
    caption += "; red dashes are what each bar must reach." if judged else "."
    unjudged = [g.label for g in ordered if all(p.threshold is None for p in g.bars.values())]
    if judged and unjudged:
        # Bars beside judged ones with no mark of their own: say so rather than leave a reader to guess.
        caption += f" {', '.join(unjudged)}: reported, not judged (no threshold applies to {'it' if len(unjudged) == 1 else 'them'})."
    if len(all_groups) > len(ordered):
        caption += f" The {len(ordered)} worst of {len(all_groups)} groups are shown."
    return caption, _svg(name, title, (width_in, 3.6), draw)


def _draw_step(group: FigureGroup, name: str, title: str) -> tuple[str, str]:
    found = figures.lines(group)
    shown = found[:MAX_SERIES]

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        for i, line in enumerate(shown):
            ax.plot([x for x, _, _ in line.points], [y for _, y, _ in line.points], linewidth=1.5,
                    color=_colour(i), label=line.label)
        _threshold_marks(ax, [(x, p.threshold) for line in shown for x, _, p in line.points])
        ax.set_xlabel("step")
        ax.set_ylabel(group.quantity_label)
        _headroom(ax, [y for line in shown for _, y, _ in line.points]
                  + [p.threshold for line in shown for _, _, p in line.points])
        ax.legend(loc="best")

    caption = f"{group.quantity_label} at each step, one line per series."
    if len(found) > len(shown):
        caption += f" The first {len(shown)} of {len(found)} series are shown."
    return caption, _svg(name, title, (6.5, 3.4), draw)


DRAWERS: dict[str, Callable[[FigureGroup, str, str], tuple[str, str]]] = {
    FIGURE_LINK: _draw_link, FIGURE_SCALING: _draw_scaling, FIGURE_SIZE: _draw_size, FIGURE_RATE: _draw_rate,
    FIGURE_STEP: _draw_step,
}
