"""`preflight history trend --html`: a figure over time as an SVG chart (matplotlib), in one page.

One line per figure and image: the median over the run's nodes, with the band from the 5th to the
95th percentile; per-node rows draw one line per node (the most recent eight). The SVG is made as
the HTML report makes its charts: a bare matplotlib Figure (no pyplot state), text kept as text,
no dates in the metadata (the same history draws the same bytes), and no namespace URLs.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from typing import Any

import jinja2

from preflight.history.queries import Key, TrendRow

COLOURS = ["#0969da", "#bc4c00", "#1a7f37", "#8250df", "#cf222e", "#1b7c83", "#9a6700", "#57606a"]
MAX_LINES = 8

PAGE = jinja2.Environment(autoescape=True).from_string("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:sans-serif;margin:2em;color:#1f2328}table{border-collapse:collapse;font-size:90%}
td,th{padding:2px 10px;border-bottom:1px solid #d0d7de;text-align:right}th:first-child,td:first-child{text-align:left}
</style></head><body>
<h1>{{ title }}</h1>
<p>{{ caption }}</p>
{{ svg }}
<table><tr><th>run</th><th>started (UTC)</th><th>figure</th><th>image</th><th>node(s)</th><th>median</th>
<th>5th-95th percentile</th></tr>
{% for r in rows %}<tr><td>{{ r.run_id }}</td><td>{{ r.started }}</td><td>{{ r.label }}</td><td>{{ r.image }}</td>
<td>{{ r.nodes }}</td><td>{{ r.median }}</td><td>{{ r.band }}</td></tr>
{% endfor %}</table>
</body></html>
""")


def _style() -> dict[str, Any]:
    return {"svg.hashsalt": "preflight-history-trend", "svg.fonttype": "none", "font.family": "sans-serif",
            "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"], "font.size": 9.5, "axes.titlesize": 10.5,
            "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#d0d7de",
            "grid.linewidth": 0.6, "axes.axisbelow": True, "legend.frameon": False, "legend.fontsize": 8}


def trend_svg(keys: list[Key], rows: list[TrendRow], title: str) -> str:
    import matplotlib
    from matplotlib.figure import Figure

    lines: dict[tuple[str, str], list[TrendRow]] = defaultdict(list)
    for row in rows:
        lines[(row.key.label, row.node or row.image[:8])].append(row)
    # Most recent lines first when there are too many to tell apart.
    ordered = sorted(lines.items(), key=lambda kv: kv[1][-1].started, reverse=True)[:MAX_LINES]
    with matplotlib.rc_context(_style()):
        fig = Figure(figsize=(8.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
        for i, ((label, which), points) in enumerate(sorted(ordered)):
            x = [p.started for p in points]
            colour = COLOURS[i % len(COLOURS)]
            name = (f"node {which}" if points[0].node else f"image {which or 'unknown'}") if len(keys) == 1 \
                else (f"{label} ({which})" if which else label)
            ax.plot(x, [p.median for p in points], marker="o", markersize=3, color=colour, label=name)
            if any(p.p05 != p.p95 for p in points):
                ax.fill_between(x, [p.p05 for p in points], [p.p95 for p in points], color=colour, alpha=0.15,
                                linewidth=0)
        units = sorted({k.unit for k in keys if k.unit})
        ax.set_ylabel(", ".join(units))
        ax.set_title(title)
        ax.legend(loc="best")
        fig.autofmt_xdate()
        return inline_svg(fig) + "\n"


def inline_svg(fig: Any) -> str:
    """A matplotlib Figure as SVG to put inline in a page: no dates in its metadata (the same figures
    draw the same bytes), no comments, and no namespace URLs (inline in HTML the parser puts <svg> in
    the SVG namespace itself: the page carries no URL)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg).replace("xlink:href=", "href=")
    return svg.strip()


def trend_page(keys: list[Key], rows: list[TrendRow], title: str, caption: str) -> str:
    import markupsafe

    svg = trend_svg(keys, rows, title) if rows else "<p>No recorded runs match.</p>"
    table = [{"run_id": r.run_id, "started": r.started.strftime("%Y-%m-%d %H:%M"), "label": r.key.label,
              "image": r.image[:12], "nodes": r.node or r.n, "median": f"{r.median:.4g} {r.key.unit}".strip(),
              "band": "" if r.node else f"{r.p05:.4g}-{r.p95:.4g}"} for r in rows]
    return PAGE.render(title=title, caption=caption, svg=markupsafe.Markup(svg), rows=table)
