"""Charts for the HTML report: pure functions RunReport -> inline SVG.

Two layers. The `*_data` functions read the figures a chart needs out of the run report (check facts
and measurements) and return plain data, or nothing when the data is not there; they import nothing
heavy and the findings sentences in view.py use them too. The drawing functions turn that data
into SVG with matplotlib, imported inside them, so a missing matplotlib costs the report its charts
and nothing else.

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
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from preflight.model import CheckResult, RunReport

INSTALL_HINT = "pip install 'preflight[charts]'"

# Beyond these, a chart turns into noise: show the worst few rather than every node.
MAX_SERIES = 8
MAX_GROUPS = 16
MAX_ANNOTATED_NODES = 12

COLOURS = {
    "measured": "#0969da", "ideal": "#8c959f", "bad": "#cf222e", "good": "#1a7f37", "warn": "#9a6700",
    "read": "#8250df", "demand": "#57606a",
}
SERIES_COLOURS = ["#0969da", "#bc4c00", "#1a7f37", "#8250df", "#cf222e", "#1b7c83", "#9a6700", "#57606a"]


class Chart(NamedTuple):
    title: str
    caption: str
    svg: str


# ---------------------------------------------------------------------------------------------------
# Data: what each chart needs, read from the report. Pure; no matplotlib.
# ---------------------------------------------------------------------------------------------------

def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _ok_results(report: RunReport, check_id: str) -> list[CheckResult]:
    return [r for r in report.results_for(check_id) if isinstance(r.facts, dict)]


@dataclass
class ScalingSeries:
    label: str  # "gpu01 torch DDP" or "torch DDP" on one node
    node: str
    framework: str
    device_kind: str  # "cuda" or "cpu", as the check records it
    points: list[tuple[int, float, float | None]]  # (devices, samples/s, efficiency or None)

    @property
    def noun(self) -> str:
        return "GPUs" if self.device_kind == "cuda" else "CPU processes"

    @property
    def top(self) -> tuple[int, float, float | None]:
        return self.points[-1]


@dataclass
class ScalingData:
    series: list[ScalingSeries]
    min_efficiency: float | None


def scaling_data(report: RunReport) -> ScalingData | None:
    """Throughput per device count from scaling.multi_gpu (torch DDP, and tf MirroredStrategy)."""
    results = _ok_results(report, "scaling.multi_gpu")
    several_nodes = len({r.node for r in results}) > 1
    series: list[ScalingSeries] = []
    for result in results:
        facts = result.facts
        kind = str(facts.get("device_kind") or "cpu")
        tables = [("torch DDP", facts.get("table"))]
        tf = facts.get("tensorflow")
        if isinstance(tf, dict):
            tables.append(("tf MirroredStrategy", tf.get("table")))
        for framework, table in tables:
            points = _scaling_points(table)
            if len(points) < 2:
                continue
            label = f"{result.node} {framework}" if several_nodes else framework
            series.append(ScalingSeries(label, result.node, framework, kind, points))
    if not series:
        return None
    threshold = _threshold(m for r in results for m in r.measurements if m.name.startswith("efficiency on"))
    return ScalingData(series, threshold)


def _scaling_points(table: Any) -> list[tuple[int, float, float | None]]:
    points = []
    for row in table if isinstance(table, list) else []:
        if not isinstance(row, dict):
            continue
        devices, rate = row.get("devices"), _number(row.get("samples_per_s"))
        if not isinstance(devices, int) or devices < 1 or rate is None:
            continue
        points.append((devices, rate, _number(row.get("efficiency"))))
    points.sort()
    if points and points[0][0] == 1 and points[0][1] > 0:
        base = points[0][1]
        points = [(n, rate, eff if eff is not None else rate / (n * base)) for n, rate, eff in points]
    return points


def _threshold(measurements: Any) -> float | None:
    for m in measurements:
        value = _number(m.threshold)
        if value is not None and m.comparison in (">=", ">", "<=", "<"):
            return value
    return None


@dataclass
class BandwidthGrid:
    nodes: list[str]
    gbps: list[list[float | None]]  # [sender][receiver]; None where not measured
    threshold: float | None
    unit: str

    def links(self) -> list[tuple[float, str, str]]:
        return sorted((value, self.nodes[i], self.nodes[j]) for i, row in enumerate(self.gbps)
                      for j, value in enumerate(row) if value is not None)


def bandwidth_data(report: RunReport) -> BandwidthGrid | None:
    """The node x node bandwidth matrix net.bandwidth measured, and the figure each link must reach."""
    for result in _ok_results(report, "net.bandwidth"):
        matrix = result.facts.get("matrix_gbps")
        if not isinstance(matrix, dict) or not matrix:
            continue
        nodes = [n for n in result.facts.get("nodes") or [] if isinstance(n, str)]
        for src, row in matrix.items():
            for name in [src, *(row if isinstance(row, dict) else {})]:
                if name not in nodes:
                    nodes.append(name)
        rows = {src: row for src, row in matrix.items() if isinstance(row, dict)}
        grid = [[_number(rows.get(src, {}).get(dst)) if src != dst else None for dst in nodes] for src in nodes]
        if not any(v is not None for row in grid for v in row):
            continue
        units = [m.unit for m in result.measurements if m.unit]
        return BandwidthGrid(nodes, grid, _threshold(result.measurements), units[0] if units else "Gbit/s")
    return None


@dataclass
class Link:
    src: str
    dst: str
    value: float
    unit: str
    threshold: float | None


def slowest_link(report: RunReport) -> Link | None:
    """The slowest measured link: from the matrix, or from the per-link measurements without one."""
    grid = bandwidth_data(report)
    if grid and grid.links():
        value, src, dst = grid.links()[0]
        return Link(src, dst, value, grid.unit, grid.threshold)
    links = []
    for result in report.results_for("net.bandwidth"):
        for m in result.measurements:
            value = _number(m.value)
            ends = (m.node or m.name).split(" -> ")
            if value is not None and len(ends) == 2:
                links.append(Link(ends[0], ends[1], value, m.unit, _number(m.threshold)))
    return min(links, key=lambda link: (link.value, link.src, link.dst)) if links else None


@dataclass
class LoaderNode:
    node: str
    supply: dict[str, float]  # loader label -> samples/s
    demand: float | None  # what the GPUs consume, samples/s
    margin: float | None  # demand x margin is what the loader should reach
    percent: float | None  # the best judged loader's supply as a percentage of demand


def loader_data(report: RunReport) -> list[LoaderNode]:
    """Per node: samples/s each data loader delivers, against what the GPUs consume."""
    nodes = []
    for result in _ok_results(report, "dataloader.throughput"):
        facts = result.facts
        supply = {}
        for key, label in (("torch", "torch DataLoader"), ("tensorflow", "tf.data")):
            loader = facts.get(key)
            rate = _number(loader.get("samples_per_s")) if isinstance(loader, dict) else None
            if rate is not None:
                supply[label] = rate
        demand_facts = facts.get("demand")
        demand = _number(demand_facts.get("samples_per_s")) if isinstance(demand_facts, dict) else None
        judged = [m for m in result.measurements if m.name.endswith("vs GPU demand")]
        percent = _number(judged[0].value) if judged else None
        margin_percent = _number(judged[0].threshold) if judged else None
        if supply:
            nodes.append(LoaderNode(result.node, supply, demand,
                                    margin_percent / 100 if margin_percent else None, percent))
    return nodes


@dataclass
class CheckpointNode:
    node: str
    formats: dict[str, dict[str, float]] = field(default_factory=dict)  # format -> {"write": GB/s, "read": GB/s}
    thresholds: dict[str, float] = field(default_factory=dict)  # "write"/"read" -> GB/s needed


_READ_WRITE = re.compile(r"^(?P<format>.+?) (?P<op>write|read)$")


def checkpoint_data(report: RunReport) -> list[CheckpointNode]:
    """Per node and checkpoint format, the write and read GB/s checkpoint.roundtrip measured."""
    nodes = []
    for result in report.results_for("checkpoint.roundtrip"):
        entry = CheckpointNode(result.node)
        for m in result.measurements:
            match = _READ_WRITE.match(m.name)
            value = _number(m.value)
            if not match or m.unit != "GB/s" or value is None:
                continue
            fmt = match["format"].replace("torch.distributed.checkpoint", "DCP").replace(" checkpoint", "")
            entry.formats.setdefault(fmt, {})[match["op"]] = value
            threshold = _number(m.threshold)
            if threshold is not None:
                entry.thresholds[match["op"]] = threshold
        if entry.formats:
            nodes.append(entry)
    return nodes


@dataclass
class BusbwSeries:
    label: str  # "gpu01 nccl (8 GPUs)", or without the node on one node
    points: list[tuple[int, float]]  # (bytes, bus bandwidth GB/s)
    node: str = ""
    backend: str = ""  # "nccl (8 GPUs)"
    primary: bool = True  # the backend the check judges (a gloo run beside nccl is a fallback)


@dataclass
class BusbwData:
    series: list[BusbwSeries]
    threshold: float | None


def collectives_data(report: RunReport) -> BusbwData | None:
    """All-reduce bus bandwidth against message size, per node and backend (collectives.local)."""
    results = _ok_results(report, "collectives.local")
    several_nodes = len({r.node for r in results}) > 1
    series = []
    for result in results:
        for run in result.facts.get("runs") or []:
            if not isinstance(run, dict) or not run.get("ok") or not isinstance(run.get("result"), dict):
                continue
            sizes = [s for s in run["result"].get("sizes") or [] if isinstance(s, dict)]
            points = sorted((int(s["bytes"]), float(s["busbw_gbps"])) for s in sizes
                            if _number(s.get("bytes")) and _number(s.get("busbw_gbps")) is not None)
            if len(points) < 2:
                continue
            unit = "GPUs" if run.get("device") == "cuda" else "processes"
            backend = f"{run.get('backend', '?')} ({run.get('world_size', '?')} {unit})"
            series.append(BusbwSeries(f"{result.node} {backend}" if several_nodes else backend, points, result.node,
                                      backend, run.get("role", "primary") == "primary"))
    if not series:
        return None
    threshold = _threshold(m for r in results for m in r.measurements if "busbw" in m.name)
    return BusbwData(series, threshold)


def has_chart_data(report: RunReport) -> bool:
    return bool(scaling_data(report) or bandwidth_data(report) or loader_data(report) or checkpoint_data(report)
                or collectives_data(report))


# ---------------------------------------------------------------------------------------------------
# Drawing. matplotlib is imported here only.
# ---------------------------------------------------------------------------------------------------

def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def unavailable_note(report: RunReport) -> str:
    """One line for the report when there is something to draw but nothing to draw it with."""
    if has_chart_data(report) and not matplotlib_available():
        return f"Charts are not drawn: matplotlib is not installed ({INSTALL_HINT})."
    return ""


def render_charts(report: RunReport) -> list[Chart]:
    """Every chart whose data the report holds, in reading order; none without matplotlib."""
    if not matplotlib_available():
        return []
    charts = []
    drawers: list[tuple[str, Callable[[Any], Chart], Any]] = [
        ("Scaling across devices", _draw_scaling, scaling_data(report)),
        ("Network bandwidth between nodes", _draw_bandwidth, bandwidth_data(report)),
        ("Data loader supply against GPU demand", _draw_loader, loader_data(report)),
        ("Checkpoint write and read throughput", _draw_checkpoint, checkpoint_data(report)),
        ("All-reduce bus bandwidth by message size", _draw_collectives, collectives_data(report)),
    ]
    for title, draw, data in drawers:
        if not data:
            continue
        try:
            charts.append(draw(data))
        except Exception as exc:  # noqa: BLE001 - a chart that cannot be drawn must not cost the whole report
            charts.append(Chart(title, f"This chart could not be drawn ({type(exc).__name__}: {exc}); the figures "
                                       "are in the tables below.", ""))
    return charts


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


def _svg(name: str, title: str, size: tuple[float, float], draw: Callable[[Any], None]) -> str:
    import matplotlib
    from matplotlib.figure import Figure

    # A bare Figure, not pyplot: no global state, no GUI backend, nothing to close. The style
    # must be active both while artists are made and while the SVG is written.
    with matplotlib.rc_context(_style(name)):
        fig = Figure(figsize=size, layout="constrained")
        draw(fig)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return clean_svg(buffer.getvalue(), name, title)


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


def _fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def human_bytes(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} B"


def _draw_scaling(data: ScalingData) -> Chart:
    # Worst efficiency first, so a capped chart still shows the nodes that matter.
    series = sorted(data.series, key=lambda s: (s.top[2] if s.top[2] is not None else 1.0, s.label))[:MAX_SERIES]
    noun = series[0].noun
    counts = sorted({n for s in series for n, _, _ in s.points})
    # Throughput relative to one device ("effective devices") puts every node on one scale, where
    # ideal scaling is the diagonal and "8 GPUs deliver the throughput of 6.9" can be read off.
    # Without a one-device run, the smallest run's per-device throughput stands in for it.
    relative = [s for s in series if s.points[0][1] > 0]

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.plot(counts, counts, linestyle="--", color=COLOURS["ideal"], linewidth=1.4, label="ideal (linear)")
        if data.min_efficiency is not None:
            ax.plot(counts, [n * data.min_efficiency for n in counts], linestyle=":", color=COLOURS["bad"],
                    linewidth=1.4, label=f"PASS needs {data.min_efficiency:.0%} efficiency")
        ends = []
        for i, s in enumerate(relative):
            colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
            base = s.points[0][1] / s.points[0][0]
            xs = [n for n, _, _ in s.points]
            ys = [rate / base for _, rate, _ in s.points]
            ax.plot(xs, ys, marker="o", color=colour, linewidth=1.8, label=f"{s.label} measured")
            if s.points[-1][2] is not None:
                ends.append((ys[-1], xs[-1], s.points[-1][2], colour))
        # Label each series' last point with its multiple and efficiency, spaced so labels never collide.
        ends.sort(reverse=True)
        step = counts[-1] * 0.055
        last_y = math.inf
        for y, x, eff, colour in ends:
            label_y = min(y, last_y - step)
            last_y = label_y
            ax.annotate(f"{y:.1f} ({eff:.0%})", (x, y), xytext=(x + counts[-1] * 0.04, label_y), fontsize=8.5,
                        color=colour, va="center")
        ax.set_xlim(0, counts[-1] * 1.22)
        ax.set_ylim(0, counts[-1] * 1.05)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_yticks(counts, [str(n) for n in counts])
        ax.set_xlabel(noun)
        ax.set_ylabel(f"throughput, in single {noun[:-1] if noun.endswith('s') else noun}")
        if len(relative) == 1:
            base = relative[0].points[0][1] / relative[0].points[0][0]
            right = ax.secondary_yaxis("right", functions=(lambda y: y * base, lambda v: v / base))
            right.set_ylabel("samples/s")
        ax.legend(loc="upper left")

    title = "Scaling across devices"
    caption = (f"Training throughput of data-parallel steps on 1 to {counts[-1]} {noun}, as a multiple of one "
               f"device's throughput (labels: that multiple and the efficiency). Ideal scaling is the grey diagonal")
    caption += (f"; below the red dotted line efficiency is under the {data.min_efficiency:.0%} a PASS needs."
                if data.min_efficiency is not None else ".")
    if len(data.series) > len(series):
        caption += f" The {len(series)} least efficient of {len(data.series)} series are shown."
    return Chart(title, caption, _svg("scaling", title, (6.0, 4.0), draw))


def _draw_bandwidth(grid: BandwidthGrid) -> Chart:
    import numpy as np
    from matplotlib.colors import Normalize, TwoSlopeNorm
    from matplotlib.patches import Rectangle

    n = len(grid.nodes)
    values = np.array([[np.nan if v is None else v for v in row] for row in grid.gbps], dtype=float)
    peak = float(np.nanmax(values))
    threshold = grid.threshold

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.grid(False)
        ax.set_facecolor("#eaeef2")  # links not measured show as grey
        if threshold and threshold > 0:
            norm: Any = TwoSlopeNorm(vmin=0.0, vcenter=threshold, vmax=max(peak * 1.05, threshold * 1.5))
        else:
            norm = Normalize(vmin=0.0, vmax=peak * 1.05 or 1.0)
        mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap="RdYlGn", norm=norm, edgecolors="white",
                             linewidth=1.0, rasterized=n > 32)
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        labelled = n <= 40
        ax.set_xticks([i + 0.5 for i in range(n)], grid.nodes if labelled else [""] * n,
                      rotation=45 if n > 4 else 0, ha="right" if n > 4 else "center")
        ax.set_yticks([i + 0.5 for i in range(n)], grid.nodes if labelled else [""] * n)
        ax.set_xlabel("receiver")
        ax.set_ylabel("sender")
        ax.tick_params(length=0)
        for i in range(n):
            for j in range(n):
                value = values[i, j]
                below = threshold is not None and not np.isnan(value) and value < threshold
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
                        ax.text(j + 0.5, i + 0.5, _fmt(float(value)), ha="center", va="center", fontsize=9,
                                fontweight="bold" if below else "normal", color="white" if dark else "#1f2328")
        bar = fig.colorbar(mesh, ax=ax, shrink=0.85, pad=0.02)
        bar.set_label(grid.unit + (f"; black line: {_fmt(threshold)} needed" if threshold else ""))
        if threshold:
            bar.ax.axhline(threshold, color="#1f2328", linewidth=2.5)

    side = min(9.0, 3.6 + 0.42 * n)
    title = "Network bandwidth between nodes"
    need = f"the {_fmt(threshold)} {grid.unit} the cluster needs" if threshold else "a threshold"
    caption = (f"Measured bandwidth of each link in {grid.unit}, sender (row) to receiver (column). Cells below "
               f"{need} are red and outlined; grey cells were not measured.")
    return Chart(title, caption, _svg("bandwidth", title, (side + 1.4, side), draw))


def _draw_loader(nodes: list[LoaderNode]) -> Chart:
    ordered = sorted(nodes, key=lambda d: (d.percent if d.percent is not None else math.inf, d.node))[:MAX_GROUPS]
    loaders = list(dict.fromkeys(label for d in ordered for label in d.supply))
    has_demand = any(d.demand for d in ordered)
    series = loaders + (["GPUs consume"] if has_demand else [])
    width = 0.8 / len(series)
    margins = sorted({d.margin for d in ordered if d.margin})

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.grid(axis="x", visible=False)
        for k, label in enumerate(series):
            xs, heights = [], []
            for g, d in enumerate(ordered):
                value = d.demand if label == "GPUs consume" else d.supply.get(label)
                if value is None:
                    continue
                xs.append(g - 0.4 + width * (k + 0.5))
                heights.append(value)
            colour = COLOURS["demand"] if label == "GPUs consume" else SERIES_COLOURS[k % len(SERIES_COLOURS)]
            bars = ax.bar(xs, heights, width * 0.92, color=colour, label=label)
            for rect, g_x, value in zip(bars, xs, heights):
                group = ordered[round(g_x)]
                text = _fmt(value)
                if label != "GPUs consume" and group.demand:
                    text += f"\n{value / group.demand:.0%}"
                ax.annotate(text, (rect.get_x() + rect.get_width() / 2, value), textcoords="offset points",
                            xytext=(0, 2), ha="center", va="bottom", fontsize=8)
        first = True
        for g, d in enumerate(ordered):
            if d.demand and d.margin:
                ax.hlines(d.demand * d.margin, g - 0.45, g + 0.45, colors=COLOURS["bad"], linestyles="--",
                          linewidth=1.3, label=f"needed (demand × {d.margin:g})" if first else None)
                first = False
        ax.set_xticks(range(len(ordered)), [d.node for d in ordered], rotation=30 if len(ordered) > 6 else 0)
        ax.set_ylabel("samples/s")
        ax.margins(y=0.2)
        ax.set_ylim(bottom=0)
        fig.legend(loc="outside lower center", ncols=min(4, len(series) + 1))

    title = "Data loader supply against GPU demand"
    caption = "Samples per second each data loader delivers"
    if has_demand:
        caption += (", beside what the GPUs consume in training (grey); the percentages are supply over demand"
                    + (f", and the dashed line is demand × {margins[0]:g}, the margin the check asks for." if margins
                       else "."))
    else:
        caption += "; no GPU demand figure was available to compare against."
    if len(nodes) > len(ordered):
        caption += f" The {len(ordered)} nodes with the least headroom of {len(nodes)} are shown."
    return Chart(title, caption, _svg("loader", title, (max(6.0, min(11.0, 2.5 + 1.1 * len(ordered))), 3.6), draw))


def _draw_checkpoint(nodes: list[CheckpointNode]) -> Chart:
    # Slowest writer first, so a capped chart keeps the nodes that matter.
    ordered = sorted(nodes, key=lambda d: (min((f.get("write", math.inf) for f in d.formats.values()),
                                               default=math.inf), d.node))[:MAX_GROUPS]
    if len(nodes) == 1:
        ordered = nodes
    formats = list(dict.fromkeys(fmt for d in ordered for fmt in d.formats))
    thresholds: dict[str, float] = {}
    for d in ordered:
        thresholds.update(d.thresholds)
    width = 0.8 / len(formats)

    def draw(fig: Any) -> None:
        panels = fig.subplots(1, 2)
        for ax, op in zip(panels, ("write", "read")):
            ax.grid(axis="x", visible=False)
            for k, fmt in enumerate(formats):
                xs, heights = [], []
                for g, d in enumerate(ordered):
                    value = d.formats.get(fmt, {}).get(op)
                    if value is not None:
                        xs.append(g - 0.4 + width * (k + 0.5))
                        heights.append(value)
                bars = ax.bar(xs, heights, width * 0.9, color=SERIES_COLOURS[k % len(SERIES_COLOURS)],
                              label=fmt if op == "write" else None)
                for rect, value in zip(bars, heights):
                    below = op in thresholds and value < thresholds[op]
                    ax.annotate(_fmt(value), (rect.get_x() + rect.get_width() / 2, value), textcoords="offset points",
                                xytext=(0, 2), ha="center", va="bottom", fontsize=8,
                                color=COLOURS["bad"] if below else "#1f2328", fontweight="bold" if below else "normal")
            if op in thresholds:
                ax.axhline(thresholds[op], color=COLOURS["bad"], linestyle="--", linewidth=1.2,
                           label="needed" if op == "write" else None)
                ax.annotate(f"≥ {_fmt(thresholds[op])}", (1.0, thresholds[op]), xycoords=("axes fraction", "data"),
                            xytext=(-2, 3), textcoords="offset points", ha="right", fontsize=8, color=COLOURS["bad"])
            ax.set_xticks(range(len(ordered)), [d.node for d in ordered], rotation=30 if len(ordered) > 5 else 0)
            ax.set_title(op.capitalize())
            ax.margins(y=0.18)
            ax.set_ylim(bottom=0)
        panels[0].set_ylabel("GB/s")
        fig.legend(*panels[0].get_legend_handles_labels(), loc="outside lower center", ncols=len(formats) + 1)

    title = "Checkpoint write and read throughput"
    caption = "Throughput of writing and reading back a training-state checkpoint in GB/s, per node and format"
    caption += "; dashed lines are what the check requires." if thresholds else "."
    if len(nodes) > len(ordered):
        caption += f" The {len(ordered)} slowest writers of {len(nodes)} nodes are shown."
    size = (max(6.5, min(11.0, 3.0 + 1.4 * len(ordered) * max(1, len(formats)) / 2)), 3.4)
    return Chart(title, caption, _svg("checkpoint", title, size, draw))


def _draw_collectives(data: BusbwData) -> Chart:
    series = data.series[:MAX_SERIES]
    sizes = sorted({b for s in series for b, _ in s.points})

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        for i, s in enumerate(series):
            ax.plot([b for b, _ in s.points], [v for _, v in s.points], marker="o", linewidth=1.8,
                    color=SERIES_COLOURS[i % len(SERIES_COLOURS)], label=s.label)
        if data.threshold is not None:
            ax.axhline(data.threshold, color=COLOURS["bad"], linestyle="--", linewidth=1.2,
                       label=f"needs ≥ {_fmt(data.threshold)} GB/s at the largest size")
        ax.set_xscale("log", base=2)
        shown = sizes if len(sizes) <= 8 else sizes[:: math.ceil(len(sizes) / 8)]
        ax.set_xticks(shown, [human_bytes(b) for b in shown])
        ax.minorticks_off()
        ax.set_xlabel("message size")
        ax.set_ylabel("bus bandwidth, GB/s")
        ax.set_ylim(bottom=0)
        ax.legend(loc="center left")

    title = "All-reduce bus bandwidth by message size"
    caption = ("Bus bandwidth of all-reduce (algorithm bandwidth × 2(n−1)/n, as nccl-tests reports it) for each "
               "message size")
    caption += "; the dashed line is what the largest message must reach." if data.threshold is not None else "."
    return Chart(title, caption, _svg("collectives", title, (6.5, 3.4), draw))
