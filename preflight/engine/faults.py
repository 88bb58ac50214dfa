"""Faults tests inject into real checks: never user parameters.

A test sets PREFLIGHT_TEST_FAULTS to a JSON object, check id -> {fault: value}, e.g.
`{"<check id>": {"absent_rank": 1}}`; the check reads it where the fault is injected. The
variable is inherited by the agent and worker processes, so a fault reaches a check in its own
process. preflight.toml, --set, `init`, `list` and `explain` know nothing of these switches.
"""

from __future__ import annotations

import json
import os
from typing import Any

from preflight.core.finite import dumps

ENV = "PREFLIGHT_TEST_FAULTS"


def fault(check_id: str, name: str, default: Any = None) -> Any:
    """The value a test set for this fault of this check, or `default`."""
    raw = os.environ.get(ENV)
    if not raw:
        return default
    try:
        table = json.loads(raw)
    except ValueError:
        return default
    value = (table.get(check_id) or {}).get(name, default) if isinstance(table, dict) else default
    return value


def env_value(faults: dict[str, dict[str, Any]]) -> str:
    """PREFLIGHT_TEST_FAULTS's value for these faults (for tests)."""
    return dumps(faults)
