"""[history] of preflight.toml: whether a run is recorded in fleet history, and where.

    [history]
    enabled = true                                        # default
    url = "postgresql+psycopg://preflight@db/fleet"      # default: the SQLite file in XDG_DATA_HOME

A URL whose port is no number (or a bracket never closed) is refused naming history.url, with its
password masked (preflight.core.redact).
"""

from __future__ import annotations

from typing import Any

from preflight.core.redact import url_problem

HISTORY_KEYS = {"enabled": (bool,), "url": (str,)}


def parse_history(body: dict[str, Any], fail: Any) -> tuple[bool, str | None]:
    """(enabled, url or None) of a [history] table; `fail(message, key)` for a bad one."""
    for key, value in body.items():
        if key not in HISTORY_KEYS:
            fail(f"unknown key; [history] accepts {', '.join(sorted(HISTORY_KEYS))}", f"history.{key}")
        if key == "enabled" and not isinstance(value, bool):
            fail(f"expected true or false, got {type(value).__name__} {value!r}", "history.enabled")
        if key == "url" and (not isinstance(value, str) or isinstance(value, bool)):
            fail(f"expected str, got {type(value).__name__} {value!r}", "history.url")
        if key == "url" and url_problem(value):
            fail(url_problem(value), "history.url")
    return bool(body.get("enabled", True)), body.get("url") or None
