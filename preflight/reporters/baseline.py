"""The comparison with a baseline run, written out: one line per change, text and Markdown.

preflight.core.compare compares; this module only words the comparison, for `preflight diff` and for the
baseline section of every report.
"""

from __future__ import annotations

from typing import Any

from preflight.core.compare import NODE_ENTRY, Diff, FigureChange, StatusChange, VersionChange
from preflight.core.model import CLUSTER_NODE, FIGURE_STEP
from preflight.core.nodeset import fold
from preflight.reporters.markdown_text import md_escape
from preflight.reporters.safe_text import single_line
from preflight.reporters.numbers import change as signed, count, percent, quantity


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def day(timestamp: str) -> str:
    return timestamp[:16].replace("T", " ") if timestamp else "an unknown date"


def _where(node: str, cluster: bool) -> str:
    return "across the cluster" if cluster else f"on {node}"


def headline(diff: Diff) -> str:
    """One sentence for the first screen of a report."""
    against = f"against the baseline run of {day(diff.old_started_at)}"
    if diff.context:
        against += f" ({'; '.join(diff.context)})"
    regressions = diff.regressions
    if not regressions:
        extra = f" ({len(diff.improvements)} improved)" if diff.improvements else ""
        return (f"no regression {against}: {count(diff.compared_results, 'result')} and "
                f"{count(diff.compared_figures, 'figure')} compared within {percent(diff.tolerance)}{extra}")
    parts = []
    statuses = [c for c in regressions if isinstance(c, StatusChange)]
    figures = [c for c in regressions if isinstance(c, FigureChange)]
    versions = [c for c in regressions if isinstance(c, VersionChange)]
    if statuses:
        parts.append(count(len(statuses), "status got worse", "statuses got worse"))
    if figures:
        parts.append(count(len(figures), "figure regressed", "figures regressed")
                     + f" by more than {percent(diff.tolerance)}")
    if versions:
        parts.append(count(len(versions), "version changed", "versions changed"))
    return f"{_join(parts)} {against}; first: {describe(regressions[0])}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _value(value: Any, unit: str) -> str:
    return "not measured" if value is None else quantity(value, unit)


def describe(change: StatusChange | FigureChange | VersionChange) -> str:
    """One line for one change, the same in every report."""
    if isinstance(change, StatusChange) and change.check_id == NODE_ENTRY and not change.new:
        return f"node {change.node} is not in the new run (lost coverage)"
    if isinstance(change, StatusChange):
        old = change.old or "no result"
        new = change.new or "no result"
        text = f"{change.check_id} {_where(change.node, change.cluster)}: {old} -> {new}"
        if change.level_skip:
            return text + " (the run levels differ: not run at one of them)"
        lost = not change.new and change.kind == "regression"
        return text + (f" ({change.summary})" if change.summary and (lost or change.new in ("FAIL", "ERROR", "WARN"))
                       else "")
    if isinstance(change, FigureChange):
        shown_node = change.node not in (CLUSTER_NODE, change.name)
        text = f"{change.check_id} {change.name}" + (f" ({change.node})" if shown_node else "")
        text += f": {_value(change.old, change.unit)} -> {_value(change.new, change.unit)}"
        if change.change is not None:
            text += f" ({signed(change.change)})"
        if change.noisy:
            text += " [noisy]"
        return text
    nodes = "all nodes" if not change.nodes else fold(change.nodes)
    return f"{change.package} {change.old or 'absent'} -> {change.new or 'absent'} on {nodes}"


def folded_steps(changes: list[FigureChange]) -> list[str]:
    """Per-step figures that moved (one point each of a training run's step series), one line per check,
    node and series: noise a reader need not read point by point."""
    groups: dict[tuple[str, str, str], list[FigureChange]] = {}
    for c in changes:
        series = c.name.rsplit(" at ", 1)[0]
        groups.setdefault((c.check_id, c.node, series), []).append(c)
    lines = []
    for (check_id, node, series), found in groups.items():
        where = "" if node in (CLUSTER_NODE, series) else f" ({node})"
        lines.append(f"{check_id} {series}{where}: {count(len(found), 'per-step figure')} moved by more than the "
                     "tolerance, per-step noise (not judged one by one)")
    return lines


def sections(diff: Diff) -> list[tuple[str, list[str]]]:
    """What got worse first; then how the runs were made, what got better, and the rest (per-step figures
    folded into one line per series)."""
    other = [c for c in [*diff.statuses, *diff.figures, *diff.versions] if c.kind == "info"]
    steps = [c for c in other if isinstance(c, FigureChange) and c.figure == FIGURE_STEP]
    step_ids = {id(c) for c in steps}
    return [
        ("Regressions", [describe(c) for c in diff.regressions]),
        ("How the runs differ", [_capital(sentence) for sentence in diff.context]),
        ("Improvements", [describe(c) for c in diff.improvements]),
        ("Other changes", [describe(c) for c in other if id(c) not in step_ids] + folded_steps(steps)),
    ]


def render_text(diff: Diff) -> str:
    label = f" ({diff.old_label})" if diff.old_label else ""
    lines = [f"preflight diff: {diff.old_started_at}{label} -> {diff.new_started_at}, tolerance "
             f"{percent(diff.tolerance)}", f"  {headline(diff)}"]
    for title, items in sections(diff):
        if items:
            lines.append(f"{title}:")
            lines += [f"  {item}" for item in items]
    return "\n".join(single_line(line) for line in lines) + "\n"  # summaries and versions are machine text


def render_markdown(diff: Diff, heading: str = "###") -> str:
    icon = "❌" if diff.regressions else "✅"
    label = f" (`{single_line(diff.old_label).replace('`', '')}`)" if diff.old_label else ""
    text = headline(diff)
    lines = [f"{heading} {icon} Against the baseline run of {md_escape(day(diff.old_started_at))}{label}", "",
             md_escape(text[:1].upper() + text[1:]) + ".", ""]
    for title, items in sections(diff):
        if items:
            lines.append(f"**{title}**")
            lines.append("")
            lines += [f"- {md_escape(item)}" for item in items]
            lines.append("")
    return "\n".join(lines)


def render_json(diff: Diff) -> str:
    return diff.to_json()
