"""storage.shared: the checkpoint directory is one filesystem on every node.

Each node writes a token file (unique to this run) into the directory through its transport
(preflight.workers.storage_token, which also says which filesystem holds the directory); every
node then reads back every token. The who-sees-whom matrix is the facts: a node that cannot see a
token another wrote has a different directory there (a local disk where a mount was expected, a
mount that failed at boot, another export), and a job resumed on it would not find its checkpoint.
Tokens are removed afterwards.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from preflight.core.check import (
    TOO_FEW_NODES_FIXES, CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param, too_few_nodes,
)
from preflight.engine.context import ClusterContext
from preflight.core.model import Finding, Scope, Status

TOKEN_PROGRAM = "preflight.workers.storage_token"


@dataclass
class Params:
    # The checkpoint directory every node must see as the same filesystem. None: not configured.
    dir: str | None = param(None, kind="path",
                            help=("checkpoint directory every node must see as the same filesystem (path; unset: "
                                  "SKIP)"))
    # NFS and other network filesystems cache directory entries; a token may take a moment to show
    # up elsewhere. A checkpoint that is invisible for longer than this breaks resume-on-another-node.
    visible_within_s: float = param(10.0, kind="duration",
                                    help=("longest a file written on one node may take to show on the others "
                                          "(seconds)"))


MOUNT_FIX = ("Mount the same shared filesystem (NFS, Lustre, GPFS, a CSI volume) at the checkpoint path on every node; "
             "check `findmnt <dir>` on the nodes named.")
WRITE_FIX = ("Make sure the mount is in /etc/fstab (or the pod spec) so it survives a reboot, and that the job's user "
             "may write there.")


class StorageShared(Check):
    id = "storage.shared"
    title = "Checkpoint directory shared by all nodes"
    # `[checkpoint] dir` (and --set checkpoint.dir=...) is the directory this check is about.
    config_aliases = {"checkpoint.dir": "dir"}
    scope = Scope.CLUSTER
    tags = ("cluster", "storage")
    why = (
        "A multi-node job writes its checkpoint from one rank and resumes, after a failure, on whatever nodes it "
        "gets; if the checkpoint directory is a local disk on some node, or a mount that failed there, the job "
        "either cannot resume or silently starts from scratch."
    )
    remediation = (MOUNT_FIX, WRITE_FIX)
    fixes = {
        **TOO_FEW_NODES_FIXES,
        "no-dir": 'set [checks."storage.shared"] dir = "/path/to/checkpoints"',
        "unreachable": "Make the node reachable from here; its write could not even be attempted.",
        "cannot-write": WRITE_FIX,
        "read-failed": "Make the node reachable from here and its Python able to run preflight's token reader.",
        "not-shared": MOUNT_FIX,
        "nothing-written": ("No node could write there: check that the directory exists and is mounted read-write "
                            "for the job's user on every node."),
    }
    Params = Params
    timeout_s = 120.0
    # quick: a token written on one node must show on the others within 5 s instead of 10.
    levels = {"quick": {"timeout": 20, "visible_within_s": 5.0}}

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        names = ctx.node_names
        facts: dict[str, Any] = {"dir": params.dir, "nodes": names, "unreachable": list(ctx.unreachable)}
        if not params.dir or len(names) < 2:
            return facts
        if not params.dir.startswith("/"):
            raise CannotMeasure(f"dir must be an absolute path, not {params.dir!r}")
        run_id = uuid.uuid4().hex
        paths = {node: f"{params.dir.rstrip('/')}/.preflight-shared-{run_id}-{i}" for i, node in enumerate(names)}
        tokens = {node: f"preflight {run_id} written by {node}" for node in names}
        facts.update(token_run=run_id, writes={}, seen={}, read_errors={}, cleanup_errors={})

        def write(node: str) -> dict[str, Any]:
            argv = [ctx.transport(node).python, "-m", TOKEN_PROGRAM, "write", params.dir, paths[node], tokens[node]]
            proc = self._run(ctx, node, argv)
            entry: dict[str, Any] = {"path": paths[node], "written": "@@written" in proc.get("out", "")}
            for line in proc.get("out", "").splitlines():
                if line.startswith("@@fstype "):
                    entry["fstype"] = line.split(" ", 1)[1]
                elif line.startswith("@@error "):
                    entry["error"] = line.split(" ", 1)[1]
            if "error" in proc:  # not reached, or timed out: nothing was learnt about the directory
                entry.update(error=proc["error"], unreachable=True)
            elif not entry["written"] and "error" not in entry:
                entry["error"] = f"exit {proc.get('rc')}: {proc.get('out', '')[-200:]}"
            return entry

        def read(node: str) -> tuple[dict[str, bool], str | None]:
            seen: dict[str, bool] = {}
            proc = self._run(ctx, node, [ctx.transport(node).python, "-m", TOKEN_PROGRAM, "read",
                                         *[paths[w] for w in names]])
            if "error" in proc:
                return seen, proc["error"]
            lines = proc["out"].splitlines()
            by_path = {paths[w]: w for w in names}
            for i, line in enumerate(lines):
                if line.startswith("@@found ") and line[8:] in by_path:
                    writer = by_path[line[8:]]
                    seen[writer] = i + 1 < len(lines) and lines[i + 1] == tokens[writer]
                elif line.startswith("@@missing ") and line[10:] in by_path:
                    seen[by_path[line[10:]]] = False
            return seen, None

        try:
            with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
                facts["writes"] = dict(zip(names, pool.map(write, names)))
                written = [n for n in names if facts["writes"][n]["written"]]
                deadline = time.monotonic() + params.visible_within_s
                while True:
                    results = dict(zip(names, pool.map(read, names)))
                    facts["seen"] = {n: {w: results[n][0].get(w, False) for w in written} for n in names}
                    facts["read_errors"] = {n: results[n][1] for n in names if results[n][1]}
                    complete = all(all(row.values()) for n, row in facts["seen"].items() if n not in facts["read_errors"])
                    if complete or time.monotonic() >= deadline:
                        break
                    time.sleep(1.0)
        finally:
            for node in names:
                proc = self._run(ctx, node, ["rm", "-f", paths[node]])
                if "error" in proc or proc.get("rc"):
                    facts["cleanup_errors"][node] = proc.get("error") or proc.get("out", "")[-200:]
        return facts

    @staticmethod
    def _run(ctx: ClusterContext, node: str, argv: list[str]) -> dict[str, Any]:
        try:
            proc = ctx.run_on(node, argv, timeout=30)
        except CannotMeasure as exc:
            return {"error": str(exc)}
        if ctx.transport(node).is_transport_failure(proc.returncode):
            return {"error": f"{node} could not be reached: {proc.stderr.strip()[-200:]}", "rc": proc.returncode}
        return {"rc": proc.returncode, "out": proc.stdout + proc.stderr}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        directory = facts.get("dir")
        if not directory:
            return outcome_from_findings([self.finding("no-dir", Status.SKIP, "no shared directory configured: set dir "
                                                       "for storage.shared to the checkpoint directory")], passed="")
        too_few = too_few_nodes(type(self), names, unreachable, expect, single="there is no other node to share the directory with",
                                nothing=f"{directory} could not be compared across nodes")
        if too_few:
            return too_few

        writes, seen, read_errors = facts.get("writes", {}), facts.get("seen", {}), facts.get("read_errors", {})
        problems = self._write_findings(names, writes, read_errors, directory)
        written = [n for n in names if writes.get(n, {}).get("written")]
        measurements, details, not_shared = self._visibility(names, seen, read_errors, written, directory)
        problems += not_shared
        fstypes = {n: writes.get(n, {}).get("fstype") for n in names if writes.get(n, {}).get("fstype")}
        if len(set(fstypes.values())) > 1:
            details.append("filesystem types differ: " + ", ".join(f"{n} {t}" for n, t in fstypes.items()))
        if unreachable:
            details.append(f"not checked, unreachable: {', '.join(unreachable)}")
        for node, error in facts.get("cleanup_errors", {}).items():
            details.append(f"could not remove the token on {node}: {error}")
        if not written and not problems:
            problems.append(self.finding("nothing-written", Status.ERROR, "no token was written"))

        kind = next(iter(fstypes.values()), "")
        passed = f"all {len(names)} nodes see each other's files in {directory}" + (f" ({kind})" if kind else "")
        return outcome_from_findings(problems, measurements, passed=passed, notes=details)

    def _write_findings(self, names: list[str], writes: dict[str, Any], read_errors: dict[str, str],
                        directory: str) -> list[Finding]:
        """What went wrong writing and reading the tokens: unreachable nodes, refused writes, failed reads."""
        problems: list[Finding] = []
        write_errors: dict[str, list[str]] = {}
        for node in names:
            entry = writes.get(node, {})
            if entry.get("unreachable"):
                problems.append(self.finding("unreachable", Status.ERROR,
                                             f"could not write the token on {node}: {entry.get('error')}"))
            elif not entry.get("written"):
                write_errors.setdefault(entry.get("error", "no result"), []).append(node)
        for error, nodes in write_errors.items():
            problems.append(self.finding("cannot-write", Status.FAIL,
                                         f"{', '.join(nodes)} cannot write to {directory}: {error}"))
        for node, error in read_errors.items():
            problems.append(self.finding("read-failed", Status.ERROR, f"could not read the tokens back on {node}: {error}"))
        return problems

    def _visibility(self, names: list[str], seen: dict[str, dict[str, bool]], read_errors: dict[str, str],
                    written: list[str], directory: str) -> tuple[list[Any], list[str], list[Finding]]:
        """(tokens visible per reader, details, the not-shared finding if some reader misses a token)."""
        measurements, details = [], []
        missing_by_reader: dict[str, list[str]] = {}
        for reader in names:
            if reader in read_errors:
                continue
            row = seen.get(reader, {})
            missing_by_reader[reader] = [w for w in written if not row.get(w)]
            measurements.append(measure("tokens visible", sum(1 for w in written if row.get(w)), "",
                                        at_least=len(written), node=reader))
        if not any(missing_by_reader.values()):
            return measurements, details, []
        for reader, writers in missing_by_reader.items():
            if writers:
                details.append(f"{reader} does not see the token{'s' if len(writers) > 1 else ''} written by "
                               f"{', '.join(writers)}")
        groups = _partition(names, seen, written)
        if groups and len(groups) > 1:
            where = "; ".join(", ".join(g) for g in groups)
            text = f"{directory} is not one filesystem: {len(groups)} separate views ({where})"
        else:
            text = f"{directory} is not fully shared: " + "; ".join(
                f"{r} does not see {', '.join(w)}" for r, w in missing_by_reader.items() if w)
        return measurements, details, [self.finding("not-shared", Status.FAIL, text)]


def _partition(names: list[str], seen: dict[str, dict[str, bool]], written: list[str]) -> list[list[str]] | None:
    """The nodes split into groups that see exactly each other's tokens (one group per separate
    directory), or None when visibility is lopsided and no such split explains it."""
    readers = [n for n in names if n in seen and n in written]
    groups: list[list[str]] = []
    for node in readers:
        for group in groups:
            if seen[node].get(group[0]) and seen[group[0]].get(node):
                group.append(node)
                break
        else:
            groups.append([node])
    group_of = {n: i for i, g in enumerate(groups) for n in g}
    consistent = all(bool(seen[a].get(b)) == (group_of[a] == group_of[b]) for a in readers for b in readers)
    return groups if consistent else None
