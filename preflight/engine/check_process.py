"""Run one check in this process and print its result: `python -m preflight.engine.check_process < job.json`
(a CheckJob, preflight.engine.protocol).

The agent starts one of these per check, in its own session, so that a check that hangs or crashes
takes nothing else down and can be killed with its whole process tree. Whatever the check itself
prints goes to stderr; the result is the only thing written to the real stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from preflight.core.check import Expect
from preflight.engine.context import ClusterContext, NodeContext
from preflight.engine.execute import execute
from preflight.core.finite import make_finite
from preflight.core.model import Scope
from preflight.core.results_file import dumps
from preflight.engine.protocol import CheckJob


def run_job(job: CheckJob) -> dict[str, Any]:
    from preflight.core.registry import discover

    registry = discover(only={job.check_id})
    check = registry.get(job.check_id)()
    params = check.params_from(job.params)
    expect = Expect.from_dict(job.expect)
    output_dir = Path(job.output_dir)
    node = job.node
    # Under the run's own scratch directory (made by the runner or the agent, removed by it at the end);
    # without one, a new directory of this check's own: never a path of the user's that is removed after.
    if job.scratch_dir:
        scratch = Path(job.scratch_dir) / _safe(node) / check.id
        scratch.mkdir(parents=True, exist_ok=True)
    else:
        scratch = Path(tempfile.mkdtemp(prefix=".preflight-scratch-", dir=output_dir))
    try:
        if check.scope is Scope.CLUSTER:
            ctx: Any = ClusterContext(
                nodes=job.nodes, output_dir=output_dir, scratch_dir=scratch, expect=expect,
                timeout_s=job.timeout_s, node_facts=job.node_facts, unreachable=job.unreachable,
                cluster_facts=job.cluster_facts,
            )
        else:
            ctx = NodeContext(
                node=node, output_dir=output_dir, scratch_dir=scratch, expect=expect,
                timeout_s=job.timeout_s, earlier=job.earlier,
            )
        result = execute(check, ctx, params, expect, node=node)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    make_finite(result)  # NaN and infinity leave as null, with a note in the result
    return result.to_dict()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "node"


def main() -> None:
    try:
        job = CheckJob.from_dict(json.loads(sys.stdin.read()))
    except ValueError as exc:  # a ProtocolError names the key; the parent shows this as ERROR
        print(f"preflight check process: {exc}", file=sys.stderr)
        sys.exit(2)
    # Keep the real stdout for the result; send anything the check prints to stderr.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = run_job(job)
    with os.fdopen(result_fd, "w") as out:
        out.write(dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
