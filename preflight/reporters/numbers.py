"""Every number in every report, written one way: one function per kind of figure.

The key findings, the measurement tables, the chart labels and the baseline comparison all call
these, so a figure reads the same wherever it appears (4.2 Gbit/s, 1 GiB, 3m 05s, 86%, 1 warning).
"""

from __future__ import annotations

import math
from typing import Any


def number(value: float | int) -> str:
    """A figure as a person would say it: 4.2, 0.42, 1.9, 29.9, 182, 20,010."""
    if type(value) is bool:
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.3g}"
    if magnitude >= 1:
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.2g}"


def quantity(value: Any, unit: str = "") -> str:
    """A figure with its unit (bandwidth, rates, times as measured); text figures as they are."""
    if value is None:
        return "—"
    kind = type(value)
    if kind is float or kind is int or (isinstance(value, (int, float)) and kind is not bool):
        text = number(value) if math.isfinite(value) else str(value)
    else:
        text = str(value)
    if unit == "%":
        return f"{text}%"
    return f"{text} {unit}".strip()


def size(count: float | int) -> str:
    """Bytes in binary units: 1 KiB, 256 MiB, 1 GiB, 1.5 GiB."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor:
            return f"{number(count / factor)} {unit}"
    return f"{number(count)} B"


def duration(seconds: float) -> str:
    """0.4s, 2.5s, 12s, 3m 05s, 1h 02m."""
    if seconds < 9.95:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def percent(fraction: float) -> str:
    """A fraction as a whole percentage: 0.863 -> 86%."""
    return f"{fraction:.0%}"


def change(fraction: float) -> str:
    """A relative change with its sign: -25%, +12%."""
    return f"{fraction:+.0%}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 warning', '2 warnings', '1 status', '3 statuses' (give the plural when it is not noun + s)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def spread(fraction: float | None, runs: int) -> str:
    """The spread of repeated samples, (max - min) / median, the same in every table and sentence."""
    if fraction is None:
        return ""
    return f"spread {percent(fraction)} over {count(runs, 'run')}"
