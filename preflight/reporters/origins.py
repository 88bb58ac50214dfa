"""Where the thresholds of a run came from, as the run recorded it (RunReport.judged_with: each value
beyond the checks' defaults with its origin, preflight.core.config.Config.origins): a profile, the
config file, --set, a flag. The reports name the origin of a threshold where they show one, so a
floor that --set changed over a profile says --set, not the profile."""

from __future__ import annotations

from preflight.core.model import Measurement, RunReport
from preflight.core.origin import Origin, OriginKind, read_sources


def _sources(report: RunReport) -> dict[str, Origin]:
    sources = read_sources((report.judged_with or {}).get("sources"))
    if report.rejudged:
        sources.update(read_sources((report.rejudged or {}).get("sources")))
    return sources


def by_check(report: RunReport) -> dict[str, dict[str, str]]:
    """check id -> {parameter: its origin as shown} of the parameters the run set beyond the defaults
    (a value the check prepared for itself, its pins, is no threshold anyone chose)."""
    sources = _sources(report)
    params = (report.judged_with or {}).get("params") or {}
    found: dict[str, dict[str, str]] = {}
    for check_id, values in params.items():
        for key in values or {}:
            origin = sources.get(f"{check_id}.{key}")
            if origin is not None and origin.kind is not OriginKind.PREPARED:
                found.setdefault(check_id, {})[key] = origin.shown
    return found


def threshold_origin(origins: dict[str, dict[str, str]], check_id: str, m: Measurement) -> str:
    """The origin of the parameter a figure's threshold is (Measurement.param), when the run set it."""
    if m.threshold is None or not m.param:
        return ""
    return origins.get(check_id, {}).get(m.param, "")


def thresholds_text(report: RunReport) -> str:
    """The at-a-glance line on thresholds: the profile, and the values set over it, by origin."""
    over: dict[str, list[str]] = {}
    for key, origin in sorted(_sources(report).items()):
        name = origin.shown
        if key.startswith("run.") or origin.kind in (OriginKind.PREPARED, OriginKind.DEFAULT) or \
                name == f"profile {report.profile}":
            continue
        over.setdefault(name, []).append(key)
    parts = [f"profile {report.profile}"] if report.profile else []
    parts += [f"{', '.join(keys)} from {origin}" for origin, keys in over.items()]
    return "; ".join(parts)
