"""One JSON job in, one JSON result out: a child process here, under a time limit.

Both the agent (one child per node check) and the runner (one child per cluster check) use this:
`run_check` runs one check's child and turns its timeout or death into ERROR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from preflight.core.check import Check
from preflight.core.finite import dumps
from preflight.core.jsonlines import last_json
from preflight.core.model import CheckResult, Evidence
from preflight.engine.execute import error_result
from preflight.engine.protocol import CheckJob
from preflight.transport.module_argv import isolated_module_argv
from preflight.transport.process import Here, RemoteProcess, kill_session


@dataclass
class ChildOutcome:
    result: dict[str, Any] | None
    returncode: int | None
    stderr_tail: str
    timed_out: bool
    duration_s: float


def run_json_child(module: str, job: dict[str, Any], timeout: float, python: str | None = None,
                   on_start: Any = None) -> ChildOutcome:
    """Run `python -m module` here (its import path without the working directory, see
    isolated_module_argv) with `job` on stdin, at most `timeout`; its last JSON line.

    Both the agent (one child per node check) and the runner (one child per cluster check) use this.
    Whatever the child leaves running in its session afterwards is ended too.
    """
    here = Here(python)
    child = RemoteProcess(here, isolated_module_argv(module, python=here.python), stdin=True, guard=False)
    if on_start:
        on_start(child)
    child.write(dumps(job))
    child.close_stdin()
    timed_out = child.wait(timeout) is None
    if timed_out:
        child.stop(grace_s=0)
    child.join()
    # A check that exits may leave daemons in its session; they are ours to end.
    kill_session(child.pid)
    return ChildOutcome(last_json(child.lines), child.returncode, child.stderr[-4000:], timed_out,
                        child.duration_s)


CHECK_MODULE = "preflight.engine.check_process"


def run_check(check: type[Check], job: CheckJob, on_start: Callable[[Any], None] | None = None) -> CheckResult:
    """Run one check in its own child (CHECK_MODULE) under the job's timeout: its result, or ERROR
    when it timed out (it and its processes are killed) or died before reporting.

    `on_start` gets the child process as it starts, so that whoever owns it can stop it."""
    outcome = run_json_child(CHECK_MODULE, job.to_dict(), timeout=job.timeout_s, on_start=on_start)
    if outcome.result is not None:
        return CheckResult.from_dict(outcome.result)
    command = f"python -m {CHECK_MODULE} ({check.id})"
    if outcome.timed_out:
        summary = f"timed out after {job.timeout_s:.0f}s; the check and its processes were killed"
        evidence = Evidence(command, None, outcome.stderr_tail)
    else:
        summary = f"the check's process died with exit code {outcome.returncode} before reporting"
        evidence = Evidence(command, outcome.returncode, outcome.stderr_tail)
    return error_result(check, job.node, summary, [evidence], outcome.duration_s)
