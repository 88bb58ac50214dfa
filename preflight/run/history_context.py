"""Fleet history around one run, for `preflight run` and `preflight healthcheck --history`: the place of
the run's headline figures among earlier runs, attached to its report before the reports are written,
and the run recorded after them. Both are best effort: a store that is missing, locked, corrupt or
unreachable is one warning (handed to `warn`), never a different verdict or exit code."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def history_url(config: Any) -> str | None:
    """[history] url, else $PREFLIGHT_HISTORY_URL, else None (the default SQLite file)."""
    return config.history_url or os.environ.get("PREFLIGHT_HISTORY_URL") or None


def attach_context(report: Any, config: Any, warn: Callable[[str], None]) -> None:
    """Set report.history from the earlier runs in the store (this run is not recorded yet, so it is
    not among them); on a problem, warn and leave it unset."""
    from preflight.history import report_context

    context, warning = report_context(report.to_dict(), history_url(config))
    if warning:
        warn(warning)
    report.history = context


def record(report: Any, config: Any, warn: Callable[[str], None], verdict: str | None = None,
           headline: str | None = None, source: str = "") -> None:
    """Record the run in fleet history; a store problem is a warning. `verdict`: what the run was
    judged in this process (its reports' verdict), recorded without judging the results again."""
    from preflight.history import record_run

    warning = record_run(report.to_dict(), history_url(config), verdict=verdict, headline=headline, source=source)
    if warning:
        warn(warning)
