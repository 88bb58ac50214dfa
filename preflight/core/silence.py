"""[silence] of preflight.toml: findings the team accepts, by id, with a reason and an end date.

    [silence]
    "site.check.finding" = {reason = "no RDMA on this partition", until = 2027-01-31}

The verdict (preflight.core.verdict.active_silences) lists a silenced finding as acknowledged and
never lets it block; past its date a silence silences nothing and a warning says it ran out.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from preflight.core.check import Check
from preflight.core.suggest import suggest


def parse_silence(body: dict[str, Any], checks: dict[str, type[Check]], fail: Any) -> dict[str, dict[str, str]]:
    """[silence]: `"finding.id" = {reason = "...", until = 2027-01-31}`; a reason is required, a date is not."""
    silences = {}
    for finding_id, entry in body.items():
        key = f"silence.{finding_id}"
        owner = next((cid for cid in checks if finding_id.startswith(cid + ".")), None)
        if owner is None:
            fail("not the id of a finding of any check (the reports and docs/findings.md show the ids)"
                 + suggest(finding_id.rsplit(".", 1)[0], checks), key)
        if not isinstance(entry, dict):
            fail('expected a table: {reason = "why", until = 2027-01-31}', key)
        unknown = sorted(set(entry) - {"reason", "until"})
        if unknown:
            fail(f"unknown key {unknown[0]!r}; a silence has reason and until" + suggest(unknown[0], ["reason", "until"]),
                 key)
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            fail("a silence needs a reason (reason = \"why this finding is accepted\")", key)
        until = entry.get("until", "")
        if isinstance(until, (dt.date, dt.datetime)):
            until = until.isoformat()[:10]
        if until:
            try:
                dt.date.fromisoformat(str(until))
            except ValueError:
                fail(f"until must be a date (2027-01-31), got {until!r}", key)
        silences[finding_id] = {"reason": reason.strip(), "until": str(until)}
    return silences
