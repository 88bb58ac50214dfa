"""One JSON job in, one JSON result out: a child process here, under a time limit.

Both the agent (one child per node check) and the runner (one child per cluster check) use this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.core.finite import dumps
from preflight.core.jsonlines import last_json
from preflight.transport.process import Here, RemoteProcess, isolated_module_argv, kill_session


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
