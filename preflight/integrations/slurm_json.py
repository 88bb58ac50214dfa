"""Slurm's `--json` documents (`sinfo --json`, `squeue --json`, `scontrol show node --json`), read into
the same NodeState that `scontrol show node -o` gives. Pure. From 23.02 on `sinfo --json` lists rows
under `sinfo` (a set of nodes with one state each), not nodes under `nodes`.

The document is openapi/v0.0.37 and later (Slurm 21.08+): `nodes[]` with `name`, `address`, `state`
("mixed" with `state_flags` ["DRAIN"] before 23.02; ["MIXED", "DRAIN"] since), `reason`,
`reason_set_by_user` and `reason_changed_at` (a number, or {"set": true, "number": N} since 23.02);
`jobs[]` with `job_id`, `job_state` (a string, or a list since 23.02), `state_reason`, `nodes`.
"""

from __future__ import annotations

from typing import Any

from preflight.integrations.slurm_state import NodeState, SlurmError


def _document(text: str, key: str) -> list[dict[str, Any]]:
    from preflight.core.bounded import InputError, load_json

    try:
        doc = load_json(text, "Slurm's answer")
    except InputError as exc:
        raise SlurmError(f"not a Slurm --json document: {exc.reason}") from None
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise SlurmError(f"a Slurm --json document without a {key!r} list")
    errors = [e.get("error") or e.get("description") for e in doc.get("errors") or [] if isinstance(e, dict)]
    if errors and not items:
        raise SlurmError(f"Slurm answered with errors: {'; '.join(str(e) for e in errors)}")
    return [item for item in items if isinstance(item, dict)]


def _state(value: Any, flags: Any = None) -> str:
    """MIXED+DRAIN, as scontrol prints it, from "mixed" + ["DRAIN"] or ["MIXED", "DRAIN"]."""
    parts = [str(value)] if isinstance(value, str) else [str(v) for v in value or []]
    parts += [str(f) for f in flags or [] if str(f) not in parts]
    return "+".join(p.strip().upper() for p in parts if p.strip())


def _number(value: Any) -> Any:
    return value.get("number") if isinstance(value, dict) else value


def _sinfo_rows(text: str) -> dict[str, NodeState] | None:
    """`sinfo --json` from Slurm 23.02 on: `sinfo[]` rows, each a set of nodes (`nodes.nodes`) with one
    state (`node.state`), reason ({"description", "user", "time"}) and partition; None for another document."""
    from preflight.core.bounded import InputError, load_json

    try:
        doc = load_json(text, "sinfo --json")
    except InputError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("sinfo"), list):
        return None
    out: dict[str, NodeState] = {}
    for row in _document(text, "sinfo"):
        reason = row.get("reason") if isinstance(row.get("reason"), dict) else {"description": row.get("reason")}
        partition = (row.get("partition") or {}).get("name") or ""
        for name in (row.get("nodes") or {}).get("nodes") or []:
            node = out.setdefault(str(name), NodeState(name=str(name)))
            node.state = _state((row.get("node") or {}).get("state")) or node.state
            node.reason = str(reason.get("description") or node.reason)
            node.reason_user = str(reason.get("user") or node.reason_user)
            node.reason_time = str(_number(reason.get("time")) or node.reason_time or "")
            parts = [p for p in node.fields.get("Partitions", "").split(",") if p]
            node.fields["Partitions"] = ",".join(dict.fromkeys([*parts, partition] if partition else parts))
    return out


def node_states(text: str) -> dict[str, NodeState]:
    """Node name -> NodeState from a `--json` document: `nodes` (scontrol show node, sinfo before 23.02)
    or `sinfo` (sinfo from 23.02 on)."""
    rows = _sinfo_rows(text)
    if rows is not None:
        return rows
    out: dict[str, NodeState] = {}
    for node in _document(text, "nodes"):
        name = str(node.get("name") or "")
        if not name:
            continue
        changed = _number(node.get("reason_changed_at"))
        fields = {"Partitions": ",".join(node.get("partitions") or []), "Gres": str(node.get("gres") or ""),
                  "CPUTot": str(node.get("cpus", "")), "RealMemory": str(node.get("real_memory", ""))}
        out[name] = NodeState(name=name, address=str(node.get("address") or ""),
                              state=_state(node.get("state"), node.get("state_flags")),
                              reason=str(node.get("reason") or ""), fields=fields,
                              reason_user=str(node.get("reason_set_by_user") or ""),
                              reason_time=str(changed) if changed else "")
    return out


def jobs(text: str) -> list[dict[str, Any]]:
    """The jobs of a `squeue --json` / `sacct --json` document: id, name, user, partition, state,
    the reason it waits and its nodes."""
    out = []
    for job in _document(text, "jobs"):
        state = job.get("job_state", job.get("state"))
        if isinstance(state, dict):  # sacct: {"current": [...], "reason": ...}
            state = state.get("current")
        out.append({"id": job.get("job_id"), "name": job.get("name"), "user": job.get("user_name", job.get("user")),
                    "partition": job.get("partition"), "state": _state(state),
                    "reason": job.get("state_reason") or "", "nodes": job.get("nodes") or ""})
    return out
