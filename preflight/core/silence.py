"""[silence] of preflight.toml: findings the team accepts, by id, with a reason and an end date.

    [silence]
    "site.check.finding" = {reason = "no RDMA on this partition", until = 2027-01-31}

The verdict (preflight.core.verdict.active_silences) lists a silenced finding as acknowledged and
never lets it block; past its date a silence silences nothing and a warning says it ran out.

Only what a check measured and found can be accepted: an id the check declares (its `fixes`), never one
that says nothing was measured (`.could-not-measure`, `.crashed`, `.error`, a transport's), and never
an id of a check that declares no finding kinds (whatever it is named, it would silence nothing).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from preflight.core.check import Check
from preflight.core.findings import COULD_NOT_MEASURE, CRASHED, ERROR, is_transport
from preflight.core.suggest import suggest

# The stand-in findings of an ERROR result (preflight.core.findings): nothing was measured, so nothing
# there can be accepted.
STAND_INS = (CRASHED, COULD_NOT_MEASURE, ERROR)
MEASURED_NOTHING = ("measured nothing (it could not measure, crashed or failed), so there is nothing to "
                    "accept: fix what stopped it, or leave the check out with --skip")


def declared_ids(check: type[Check]) -> set[str]:
    """The finding ids a check declares (its `fixes`, by kind), less those that say it measured nothing;
    empty for a check that declares none (a third party's may not)."""
    return {f"{check.id}.{kind}" for kind in check.fixes if not f".{kind}".endswith(STAND_INS)}


def _owner(finding_id: str, checks: dict[str, type[Check]]) -> str | None:
    owners = [cid for cid in checks if finding_id.startswith(cid + ".")]
    return max(owners, key=len) if owners else None


def _until(value: Any, key: str, fail: Any) -> str:
    """The end date of a silence as YYYY-MM-DD: a TOML date or date-time, or a string holding an ISO
    date or date-time; anything else (a number, a boolean, an empty string, "next year") is refused."""
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str) and value.strip():
        text = value.strip()
        for parse in (dt.date.fromisoformat, dt.datetime.fromisoformat):
            try:
                parsed = parse(text)
            except ValueError:
                continue
            return (parsed.date() if isinstance(parsed, dt.datetime) else parsed).isoformat()
    fail(f"until must be an ISO date (2027-01-31) or date-time (2027-01-31T18:00:00), got {value!r}; leave it "
         "out for a silence with no end date", key)
    return ""


def parse_silence(body: dict[str, Any], checks: dict[str, type[Check]], fail: Any) -> dict[str, dict[str, str]]:
    """[silence]: `"finding.id" = {reason = "...", until = 2027-01-31}`; a reason is required, a date is not.
    The id must be one a check declares (preflight list / docs/findings.md), never a transport's."""
    silences = {}
    declared = {cid: declared_ids(c) for cid, c in checks.items()}
    known = sorted(i for ids in declared.values() for i in ids if not is_transport(i))
    for finding_id, entry in body.items():
        key = f"silence.{finding_id}"
        owner = _owner(finding_id, checks)
        skipped = getattr(checks, "not_imported", None) or {}
        if owner is None and any(finding_id.startswith(cid + ".") for cid in skipped):
            continue  # a finding of a plugin --skip kept from being imported: it cannot fire in this run
        if owner is None:
            fail("not the id of a finding of any check (the reports and docs/findings.md show the ids)"
                 + (suggest(finding_id.rsplit(".", 1)[0], checks) or suggest(finding_id, known)), key)
        if is_transport(finding_id):
            fail("a node that could not be reached or a check that timed out measured nothing there; it cannot "
                 "be silenced (fix the node or raise the check's timeout, or leave the node out of --nodes)", key)
        if finding_id.endswith(STAND_INS):
            fail(f"{finding_id} cannot be silenced: the check {MEASURED_NOTHING}", key)
        ids = declared.get(owner or "") or set()
        if not ids:
            fail(f"{owner} declares no finding kinds, so no id of it can be silenced (a silence there would "
                 "silence nothing)" + (suggest(finding_id, known) or f"; see `preflight explain {owner}`"), key)
        if finding_id not in ids:
            fail(f"{owner} declares no finding {finding_id!r}"
                 + (suggest(finding_id, ids) or f"; its findings: `preflight explain {owner}`"), key)
        if not isinstance(entry, dict):
            fail('expected a table: {reason = "why", until = 2027-01-31}', key)
        unknown = sorted(set(entry) - {"reason", "until"})
        if unknown:
            fail(f"unknown key {unknown[0]!r}; a silence has reason and until" + suggest(unknown[0], ["reason", "until"]),
                 key)
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            fail("a silence needs a reason (reason = \"why this finding is accepted\")", key)
        until = _until(entry["until"], key + ".until", fail) if "until" in entry else ""
        silences[finding_id] = {"reason": reason.strip(), "until": until}
    return silences
