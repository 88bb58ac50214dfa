"""The per-node agent: `python -m preflight.engine.agent`, started by the runner through a transport.

Reads one job (JSON, one line) on stdin, runs each node check in its own child process under the
check's timeout, and streams one line per result on stdout. It keeps reading stdin: when the runner
goes away (Ctrl-C, lost SSH connection) stdin closes, and the agent ends the check it was running,
with its process tree, and exits. Nothing is left behind on the node.

The job is a NodeJob (preflight.engine.protocol). When every node's agent is one task of a single job
step, they all read the same stdin: the job then names its nodes and the environment variable that
tells a task its node (SLURMD_NODENAME under Slurm; NodeJob.own takes the task's part), and a line `PREFLIGHT-STOP <node>` ends that
node's agent alone, as the end of stdin ends all of them. Such a step's output may cut long lines
(srun's labelled output does at 1 KiB): with `max_line` N in the job, a longer line goes out as
`PREFLIGHT-MORE <piece>` lines of at most N characters and the line that ends it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
from typing import Any

import preflight
from preflight.core.results_file import dumps
from preflight.engine.child import run_check
from preflight.engine.protocol import CheckJob, NodeJob, ProtocolError, addressed_node

HELLO = "PREFLIGHT-HELLO "
RESULT = "PREFLIGHT-RESULT "
START = "PREFLIGHT-START "
DONE = "PREFLIGHT-DONE"
STOP = "PREFLIGHT-STOP "  # + a node name: on a stdin shared by several agents, that node's agent stops
MORE = "PREFLIGHT-MORE "  # a piece of a longer line, which the next line continues (see `max_line`)


class Agent:
    def __init__(self, job: NodeJob, out: Any) -> None:
        self.job = job
        self.out = out
        self.max_line = job.max_line
        self.current: Any = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def emit(self, prefix: str, payload: Any = None) -> None:
        text = prefix + (dumps(payload, default=str) if payload is not None else "")  # ASCII, one line
        piece = self.max_line - len(MORE)
        with self.lock:
            while piece > 0 and len(text) > self.max_line:
                self.out.write(f"{MORE}{text[:piece]}\n")
                text = text[piece:]
            self.out.write(text + "\n")
            self.out.flush()

    def watch_stdin(self, stream: Any) -> None:
        stop_line = f"{STOP}{self.job.node}"
        for line in stream:  # ends at EOF: the runner is gone or wants every agent to stop
            if line.rstrip("\n") == stop_line:
                break
        self.stopping.set()
        child = self.current
        if child is not None:
            child.stop(grace_s=0)

    def run(self) -> None:
        from preflight.core.registry import discover

        registry = discover(only={spec.id for spec in self.job.checks})  # the plugins it runs, no other
        node = self.job.node
        assert node is not None  # main() runs no job without a node
        # A remote node gets no output dir from the coordinator: use a private one and remove it after.
        own_dir = not self.job.output_dir
        output_dir = self.job.output_dir or tempfile.mkdtemp(prefix="preflight-agent-")
        os.makedirs(output_dir, exist_ok=True)
        # The coordinator's run scratch directory on the local node; the agent's own directory elsewhere.
        self.scratch_dir = self.job.scratch_dir or (output_dir if own_dir else "")
        try:
            self._run_checks(registry, node, output_dir)
        finally:
            if own_dir:
                shutil.rmtree(output_dir, ignore_errors=True)
        self.emit(DONE)

    def _run_checks(self, registry: Any, node: str, output_dir: str) -> None:
        earlier: dict[str, dict[str, Any]] = {}
        for spec in self.job.checks:
            if self.stopping.is_set():
                break
            check = registry.get(spec.id)
            self.emit(START + spec.id)
            job = CheckJob(check_id=spec.id, node=node, output_dir=output_dir, scratch_dir=self.scratch_dir or None,
                           timeout_s=spec.timeout_s, params=spec.params, expect=self.job.expect, earlier=earlier)
            result = run_check(check, job, on_start=lambda p: setattr(self, "current", p))
            self.current = None
            if self.stopping.is_set():
                break
            earlier[spec.id] = result.facts  # a check that never reported has none, as one that did not run
            self.emit(RESULT, result.to_dict())


def main() -> None:
    raw = json.loads(sys.stdin.readline())
    try:
        job: NodeJob | None = NodeJob.from_dict(raw).own(os.environ)
    except ProtocolError as exc:
        job, problem = None, exc
    fields = raw if isinstance(raw, dict) else {}
    node = job.node if job is not None else addressed_node(fields, os.environ)
    out = sys.stdout
    # Anything else that writes to stdout (a plugin printing at import) must not corrupt the stream.
    sys.stdout = sys.stderr
    agent = Agent(job or NodeJob(node=node, checks=[]), out)
    agent.emit(HELLO, {"version": preflight.__version__, "python": sys.executable,
                       "hostname": socket.gethostname(), "pid": os.getpid(), "node": node})
    expected_version = fields.get("coordinator_version")
    if (expected_version and expected_version != preflight.__version__) or node is None:
        # The runner turns this into ERROR for every check on the node, with the fix; a task whose node
        # the job does not name has nothing to run.
        agent.emit(DONE)
        return
    if job is None:  # the same preflight, and still a job it cannot read: the runner shows this as lost
        print(f"preflight agent: {problem}", file=sys.stderr)
        sys.exit(2)
    threading.Thread(target=agent.watch_stdin, args=(sys.stdin,), daemon=True).start()
    agent.run()


if __name__ == "__main__":
    main()
