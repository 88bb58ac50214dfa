"""Where the thresholds of a run came from, as the run recorded it (RunReport.judged_with: each value
beyond the checks' defaults with its origin, preflight.core.config.Config.origins): a profile, the
config file, --set, a flag. The reports name the origin of a threshold where they show one, so a
floor that --set changed over a profile says --set, not the profile."""

from __future__ import annotations

from typing import Any

from preflight.core.model import Measurement, RunReport
from preflight.core.values import is_number

# Values a check prepared for itself (its pins): not a threshold anyone chose.
PREPARED = "prepared by the check on the coordinator"


def _sources(report: RunReport) -> dict[str, str]:
    recorded = report.judged_with or {}
    sources = dict(recorded.get("sources") or {})
    if report.rejudged:
        sources.update((report.rejudged or {}).get("sources") or {})
    return sources


def shown(origin: str) -> str:
    """An origin as a report names it: `profile h100-8x`, `--set`, `--config preflight.toml`."""
    inner = origin[len("the run ("):-1] if origin.startswith("the run (") and origin.endswith(")") else origin
    return "profile " + inner[len("--profile "):] if inner.startswith("--profile ") else inner


def by_check(report: RunReport) -> dict[str, list[tuple[Any, str]]]:
    """check id -> [(value, origin)] of its numeric parameters the run set beyond the defaults."""
    sources = _sources(report)
    params = (report.judged_with or {}).get("params") or {}
    found: dict[str, list[tuple[Any, str]]] = {}
    for check_id, values in params.items():
        for key, value in (values or {}).items():
            origin = sources.get(f"{check_id}.{key}", "")
            if origin and PREPARED not in origin and is_number(value):
                found.setdefault(check_id, []).append((value, shown(origin)))
    return found


def threshold_origin(origins: dict[str, list[tuple[Any, str]]], check_id: str, m: Measurement) -> str:
    """The origin of the parameter a figure's threshold is, when exactly one origin has that value."""
    if m.threshold is None or not is_number(m.threshold):
        return ""
    matches = {origin for value, origin in origins.get(check_id, ()) if value == m.threshold}
    return matches.pop() if len(matches) == 1 else ""


def thresholds_text(report: RunReport) -> str:
    """The at-a-glance line on thresholds: the profile, and the values set over it, by origin."""
    sources = _sources(report)
    over: dict[str, list[str]] = {}
    for key, origin in sorted(sources.items()):
        name = shown(origin)
        if key.startswith("run.") or key == "note" or PREPARED in origin or name == "default" or \
                name == f"profile {report.profile}":
            continue
        over.setdefault(name, []).append(key)
    parts = [f"profile {report.profile}"] if report.profile else []
    parts += [f"{', '.join(keys)} from {origin}" for origin, keys in over.items()]
    return "; ".join(parts)
