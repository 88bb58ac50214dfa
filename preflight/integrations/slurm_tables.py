"""The tables Slurm's client commands print by default: `sinfo` (and -N, -R, -s, --long), `squeue`
(and -s), `sacct`. Pure.

sinfo and squeue print a header line and one row per line, fields separated by blanks; the free-text
column (REASON of `sinfo -R`, NODELIST(REASON) of squeue, NAME) may itself hold blanks. A node list
is read by preflight.core.nodeset.expand (NodeSetError, a ValueError, names one it cannot read). sacct prints a
header, then a line of dashes that gives each column's width; an empty field (a step's JobName) is
blank within its width. A prompt line a transcript keeps (`$ sinfo`, `adev0: squeue`,
`user@host:~$ squeue`, `(base) user@node:/scratch$ squeue -u $USER`), or the command alone
(`sacct --format=...`), is skipped, and so is the time `--long` prints first.
"""

from __future__ import annotations

import re
from typing import Any

from preflight.core.nodeset import expand
from preflight.integrations.slurm_state import NodeState

_PROMPT = re.compile(r"^(?:[$#]\s|[\w.-]+:\s+(?:sinfo|squeue|sacct)\b|(?:\(\S+\)\s+)?\S+[$#]\s*(?:sinfo|squeue|sacct)\b"
                     r"|(?:sinfo|squeue|sacct)(?:\s|$)"
                     r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$)")  # --long's first line
_DASHES = re.compile(r"^[-\s]+$")
_FREE_TEXT = ("REASON", "NODELIST(REASON)", "NAME", "COMMENT")


def _spans(dashes: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"-+", dashes)]


def parse_table(text: str) -> dict[str, Any]:
    """{"columns": [header names as printed], "rows": [{NAME: value}]} (names upper-cased); an empty
    table for text with no header."""
    lines = [line.rstrip() for line in text.splitlines()]
    lines = [line for line in lines if line.strip() and not _PROMPT.match(line.strip())]
    if not lines:
        return {"columns": [], "rows": []}
    columns = lines[0].split()
    names = [c.upper() for c in columns]
    rows: list[dict[str, str]] = []
    if len(lines) > 1 and _DASHES.match(lines[1]) and "-" in lines[1]:
        spans = _spans(lines[1])
        for line in lines[2:]:
            cells = []
            for number, (start, end) in enumerate(spans):
                # a value may run past its dashes on the right (right-aligned numbers do not; long
                # names are cut by sacct with '+'), so a cell ends where the next one starts
                stop = spans[number + 1][0] if number + 1 < len(spans) else len(line)
                cells.append(line[start:stop].strip())
            rows.append(dict(zip(names, cells)))
        return {"columns": columns, "rows": rows}
    for line in lines[1:]:
        rows.append(dict(zip(names, _cells(line.split(), names))))
    return {"columns": columns, "rows": rows}


def _cells(words: list[str], names: list[str]) -> list[str]:
    """The words of one blank-separated row as cells. A pending job's reason, the last column of
    squeue, is one cell in parentheses whatever it holds ("(ReqNodeNotAvail, UnavailableNodes:n1)",
    "(Nodes required for job are DOWN, DRAINED or reserved ...)"); any other blanks belong to the
    first free-text column (NAME, REASON)."""
    if names and names[-1] == "NODELIST(REASON)" and len(words) > len(names) and words[-1].endswith(")"):
        for start in range(len(names) - 1, len(words)):
            if words[start].startswith("("):
                return _cells(words[:start], names[:-1]) + [" ".join(words[start:])]
    free = next((i for i, name in enumerate(names) if name in _FREE_TEXT), len(names) - 1)
    extra = len(words) - len(names)
    if extra > 0:  # blanks inside the free-text column
        words = words[:free] + [" ".join(words[free:free + extra + 1])] + words[free + extra + 1:]
    return words


def sinfo_node_states(text: str) -> dict[str, NodeState]:
    """Node name -> NodeState (state as scontrol writes it: IDLE, DOWN*, DRAIN) from `sinfo`,
    `sinfo -N` or `sinfo -R` (which gives the reason, and no state)."""
    out: dict[str, NodeState] = {}
    for row in parse_table(text)["rows"]:
        nodelist = row.get("NODELIST") or row.get("HOSTNAMES") or ""
        if not nodelist or nodelist.startswith("("):
            continue
        for name in expand(nodelist):
            node = out.setdefault(name, NodeState(name=name))
            if row.get("STATE"):
                node.state = row["STATE"].upper()
            if row.get("REASON") and row["REASON"] != "(null)":
                node.reason = row["REASON"]
            if row.get("PARTITION"):
                parts = [p for p in node.fields.get("Partitions", "").split(",") if p]
                node.fields["Partitions"] = ",".join(dict.fromkeys([*parts, row["PARTITION"].rstrip("*")]))
    return out


def squeue_jobs(text: str) -> list[dict[str, Any]]:
    """The jobs (or steps, with -s) of `squeue`: id, partition, name, user, state, nodes, and the
    reason a pending job waits (NODELIST(REASON) in parentheses)."""
    jobs = []
    for row in parse_table(text)["rows"]:
        where = row.get("NODELIST(REASON)", row.get("NODELIST", ""))
        waiting = where.startswith("(") and where.endswith(")")
        jobs.append({"id": row.get("JOBID") or row.get("STEPID"), "partition": row.get("PARTITION"),
                     "name": row.get("NAME"), "user": row.get("USER"), "state": row.get("ST"),
                     "nodes": "" if waiting else where, "reason": where[1:-1] if waiting else ""})
    return jobs
