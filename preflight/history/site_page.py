"""`preflight history site --out DIR`: the fleet site (preflight.history.site) as one static page,
index.html, and the same fleet figures as Prometheus gauges, fleet.prom.

The page is self-contained: its style is inline, its charts are inline SVG drawn by matplotlib (no
script, font or style from elsewhere; a Content-Security-Policy that allows none), so it opens from
a file, works offline and is safe to attach or publish. Every text that comes from the store (node
names, figure names, headlines) is escaped by jinja2's autoescape; chart labels have matplotlib's
math markup escaped as well.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import markupsafe

from preflight.history.site import MIN_BAND_RUNS, FigureSeries, Site

MAX_RUNS_LISTED = 2000
PAGE = "index.html"
PROM = "fleet.prom"
INK, GO, BAND = "#0969da", "#1a7f37", "#dafbe1"


def _style() -> dict[str, Any]:
    from preflight.history.chart import _style as trend_style

    return {**trend_style(), "svg.hashsalt": "preflight-fleet-site"}


def _plain_text(text: str) -> str:
    """A label as matplotlib draws it literally: `$` would start math markup."""
    return text.replace("\\", "\\\\").replace("$", r"\$")


def _svg(fig: Any) -> markupsafe.Markup:
    from preflight.history.chart import inline_svg

    return markupsafe.Markup(inline_svg(fig))


def _chart(points: list[tuple[datetime, float, float, float]], title: str, unit: str,
           band: tuple[float, float] | None, percent: bool = False) -> markupsafe.Markup:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_style()):
        fig = Figure(figsize=(9.0, 2.4) if percent else (7.0, 3.2), layout="constrained")
        ax = fig.add_subplot()
        x = [p[0] for p in points]
        marker = "o" if len(points) <= 60 else None
        ax.plot(x, [p[1] for p in points], color=INK, marker=marker, markersize=3, linewidth=1.2, label="median")
        if any(p[2] != p[3] for p in points):
            ax.fill_between(x, [p[2] for p in points], [p[3] for p in points], color=INK, alpha=0.15, linewidth=0,
                            label="5th-95th percentile of nodes")
        if band is not None:
            ax.axhspan(band[0], band[1], color=BAND, alpha=0.9, zorder=0, label="normal (GO runs)")
        low = min(min(p[2] for p in points), band[0] if band else float("inf"))
        high = max(max(p[3] for p in points), band[1] if band else float("-inf"))
        pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
        ax.set_ylim(0 if percent else low - pad, (1.02 if percent else high + pad))
        if percent:
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title(_plain_text(title), loc="left")
        ax.set_ylabel(_plain_text(unit))
        if band is not None or any(p[2] != p[3] for p in points):
            ax.legend(loc="lower left", fontsize=7.5)
        fig.autofmt_xdate()
        return _svg(fig)


def _figure(series: FigureSeries) -> dict[str, Any]:
    caption = (f"{len(series.points)} runs; " + (f"normal band from {series.band_runs} GO runs" if series.band
                                                 else f"no band yet: {series.band_runs} GO runs, "
                                                      f"{MIN_BAND_RUNS} needed")
               + (f"; {series.direction} is better" if series.direction else ""))
    return {"svg": _chart(series.points, series.label, series.unit, series.band), "caption": caption}


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    return f"{value:.4g} {unit}".strip()


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def _change(change: Any) -> dict[str, Any]:
    rows = [{"label": r.label, "before": _number(r.median_before, r.unit), "after": _number(r.median_after, r.unit),
             "change": _signed(r.change),
             "interval": f"{_signed(r.low)} to {_signed(r.high)}" if r.low is not None else "",
             "p": f"{r.p_value:.2g}", "verdict": r.verdict, "verdict_class": r.verdict.replace(" ", "-")}
            for r in change.rows]
    moved = [r for r in change.rows if r.verdict != "within noise"]
    shown = moved or change.rows[:3]
    return {"title": change.title, "first_seen": f"{change.first_seen:%Y-%m-%d %H:%M}", "nodes": change.nodes,
            "node_count": change.node_count, "note": change.note, "moved": bool(moved), "rows": rows,
            "sentences": [{"text": r.sentence, "verdict": r.verdict, "verdict_class": r.verdict.replace(" ", "-")}
                          for r in shown]}


def _readiness(site: Site) -> dict[str, Any]:
    r = site.readiness
    if not r.total:
        return {"readiness_headline": "No recorded runs" + (" in these filters" if site.filters.describe() !=
                                                           "every recorded run" else ""),
                "readiness_detail": "Run preflight with fleet history on, or import earlier results.json files "
                                    "with `preflight history import`.", "tone": "", "readiness_chart": None}
    share = r.share or 0.0
    detail = (f"{r.ready} of {r.total} recorded nodes were ready in their latest run"
              + (f"; not ready: {r.not_ready}" if r.not_ready else "") + ".")
    chart = _chart([(when, s, s, s) for when, s in r.series], "Share of nodes ready", "", None, percent=True) \
        if len(r.series) >= 2 else None
    return {"readiness_headline": f"{share:.0%} of the fleet is ready", "readiness_detail": detail,
            "tone": "good" if r.ready == r.total else ("bad" if share < 0.9 else "some"), "readiness_chart": chart}


def _run(entry: Any, out: Path) -> dict[str, Any]:
    link = None
    if entry.report is not None:
        link = Path(os.path.relpath(entry.report, out)).as_posix()
    return {"started": f"{entry.started:%Y-%m-%d %H:%M}", "verdict": entry.verdict, "headline": entry.headline,
            "nodes": entry.nodes, "ready": f"{entry.ready} of {entry.node_count}", "link": link}


def page(site: Site, out: Path, store_label: str) -> str:
    import jinja2

    import preflight

    counts = ", ".join(f"{n} {v}" for v, n in sorted(site.verdicts.items(), key=lambda kv: -kv[1]))
    filtered = "" if site.filters.describe() == "every recorded run" else f" ({site.filters.describe()})"
    context = {
        **_readiness(site),
        "scope": f"From {len(site.runs)} recorded run{'s' if len(site.runs) != 1 else ''}{filtered or ''}.",
        "changes": [_change(c) for c in site.changes],
        "figures": [_figure(s) for s in site.figures],
        "min_band_runs": MIN_BAND_RUNS,
        "lagging": [{"name": n.name, "outlier_runs": n.outlier_runs, "window": n.window,
                     "checks": ", ".join(n.checks), "last_seen": f"{n.last_seen:%Y-%m-%d %H:%M}"}
                    for n in site.lagging],
        "runs": [_run(e, out) for e in site.runs[:MAX_RUNS_LISTED]],
        "runs_left_out": (f"{len(site.runs) - MAX_RUNS_LISTED} older runs are not listed."
                          if len(site.runs) > MAX_RUNS_LISTED else ""),
        "run_counts": f"{len(site.runs)} runs: {counts}." if site.runs else "No runs.",
        "filtered": filtered,
        "version": preflight.__version__,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "store": store_label,
    }
    env = jinja2.Environment(loader=jinja2.PackageLoader("preflight_templates", ""), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("fleet_site.html.j2").render(site=context)


def gauges(site: Site) -> str:
    """The fleet's readiness and its runs by verdict, in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    share = Gauge("preflight_fleet_ready_ratio", "Share of recorded nodes ready in their latest run",
                  registry=registry)
    share.set(site.readiness.share if site.readiness.share is not None else float("nan"))
    nodes = Gauge("preflight_fleet_nodes", "Recorded nodes by their state in their latest run", ["state"],
                  registry=registry)
    nodes.labels("ready").set(site.readiness.ready)
    nodes.labels("not_ready").set(site.readiness.total - site.readiness.ready)
    runs = Gauge("preflight_fleet_runs", "Recorded runs by verdict", ["verdict"], registry=registry)
    for verdict in ("GO", "NO-GO", "INCOMPLETE", "UNKNOWN"):
        runs.labels(verdict).set(site.verdicts.get(verdict, 0))
    changes = Gauge("preflight_fleet_image_changes_worse", "Figures an image change made worse beyond noise",
                    ["before", "after"], registry=registry)
    for c in site.changes:
        changes.labels(c.before, c.after).set(sum(r.verdict == "worse" for r in c.rows))
    return generate_latest(registry).decode()


def write(site: Site, out: Path, store_label: str) -> list[Path]:
    """index.html and fleet.prom in `out` (made if missing), each written whole or not at all."""
    from preflight.core.files import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in ((PAGE, page(site, out.resolve(), store_label)), (PROM, gauges(site))):
        write_atomic(out / name, text)
        written.append(out / name)
    return written
