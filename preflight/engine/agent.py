"""The per-node agent: `python -m preflight.engine.agent`, started by the runner through a transport.

Reads one job (JSON, one line) on stdin, runs each node check in its own child process under the
check's timeout, and streams one line per result on stdout. It keeps reading stdin: when the runner
goes away (Ctrl-C, lost SSH connection) stdin closes, and the agent ends the check it was running,
with its process tree, and exits. Nothing is left behind on the node.

When every node's agent is one task of a single job step, they all read the same stdin: the job then
names its nodes (`"nodes": {name: {"expect": ...}}`) and the environment variable that tells a task
its node (`"node_env"`, SLURMD_NODENAME under Slurm), and a line `PREFLIGHT-STOP <node>` ends that
node's agent alone, as the end of stdin ends all of them. Such a step's output may cut long lines
(srun's labelled output does at 1 KiB): with `"max_line": N` in the job, a longer line goes out as
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
from preflight.engine.execute import error_result
from preflight.core.model import Evidence
from preflight.core.results_file import dumps
from preflight.engine.child import run_json_child

HELLO = "PREFLIGHT-HELLO "
RESULT = "PREFLIGHT-RESULT "
START = "PREFLIGHT-START "
DONE = "PREFLIGHT-DONE"
STOP = "PREFLIGHT-STOP "  # + a node name: on a stdin shared by several agents, that node's agent stops
MORE = "PREFLIGHT-MORE "  # a piece of a longer line, which the next line continues (see `max_line`)


def own_job(job: dict[str, Any], environ: Any) -> dict[str, Any]:
    """This node's part of a job shared by several nodes (see the module's doc); a job for one node as
    it is. The node is None when the environment names none of the job's nodes. Pure."""
    if "node_env" not in job:
        return job
    node = environ.get(job["node_env"]) or None
    nodes = job.get("nodes") or {}
    mine = {**job, "node": node if node in nodes else None}
    mine["expect"] = (nodes.get(node) or {}).get("expect", job.get("expect") or {})
    return mine


class Agent:
    def __init__(self, job: dict[str, Any], out: Any) -> None:
        self.job = job
        self.out = out
        self.max_line = int(job.get("max_line") or 0)
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
        stop_line = f"{STOP}{self.job['node']}"
        for line in stream:  # ends at EOF: the runner is gone or wants every agent to stop
            if line.rstrip("\n") == stop_line:
                break
        self.stopping.set()
        child = self.current
        if child is not None:
            child.stop(grace_s=0)

    def run(self) -> None:
        from preflight.core.registry import discover

        registry = discover(only={spec["id"] for spec in self.job["checks"]})  # the plugins it runs, no other
        node = self.job["node"]
        # A remote node gets no output dir from the coordinator: use a private one and remove it after.
        own_dir = not self.job.get("output_dir")
        output_dir = self.job.get("output_dir") or tempfile.mkdtemp(prefix="preflight-agent-")
        os.makedirs(output_dir, exist_ok=True)
        # The coordinator's run scratch directory on the local node; the agent's own directory elsewhere.
        self.scratch_dir = self.job.get("scratch_dir") or (output_dir if own_dir else "")
        try:
            self._run_checks(registry, node, output_dir)
        finally:
            if own_dir:
                shutil.rmtree(output_dir, ignore_errors=True)
        self.emit(DONE)

    def _run_checks(self, registry: Any, node: str, output_dir: str) -> None:
        earlier: dict[str, dict[str, Any]] = {}
        for spec in self.job["checks"]:
            if self.stopping.is_set():
                break
            check = registry.get(spec["id"])
            self.emit(START + spec["id"])
            job = {
                "check_id": spec["id"], "node": node, "output_dir": output_dir, "scratch_dir": self.scratch_dir,
                "timeout_s": spec["timeout_s"], "params": spec.get("params") or {},
                "expect": self.job.get("expect") or {}, "earlier": earlier,
            }
            outcome = run_json_child("preflight.engine.check_process", job, timeout=spec["timeout_s"],
                                     on_start=lambda p: setattr(self, "current", p))
            self.current = None
            if self.stopping.is_set():
                break
            if outcome.result is not None:
                result = outcome.result
                earlier[spec["id"]] = result.get("facts", {})
            elif outcome.timed_out:
                result = error_result(
                    check, node, f"timed out after {spec['timeout_s']:.0f}s; the check and its processes were killed",
                    [Evidence(f"python -m preflight.engine.check_process ({spec['id']})", None, outcome.stderr_tail)],
                    outcome.duration_s).to_dict()
            else:
                result = error_result(
                    check, node, f"the check's process died with exit code {outcome.returncode} before reporting",
                    [Evidence(f"python -m preflight.engine.check_process ({spec['id']})", outcome.returncode, outcome.stderr_tail)],
                    outcome.duration_s).to_dict()
            self.emit(RESULT, result)


def main() -> None:
    line = sys.stdin.readline()
    job = own_job(json.loads(line), os.environ)
    out = sys.stdout
    # Anything else that writes to stdout (a plugin printing at import) must not corrupt the stream.
    sys.stdout = sys.stderr
    agent = Agent(job, out)
    agent.emit(HELLO, {"version": preflight.__version__, "python": sys.executable,
                       "hostname": socket.gethostname(), "pid": os.getpid(), "node": job["node"]})
    expected_version = job.get("coordinator_version")
    if (expected_version and expected_version != preflight.__version__) or job["node"] is None:
        # The runner turns this into ERROR for every check on the node, with the fix; a task whose node
        # the job does not name has nothing to run.
        agent.emit(DONE)
        return
    threading.Thread(target=agent.watch_stdin, args=(sys.stdin,), daemon=True).start()
    agent.run()


if __name__ == "__main__":
    main()
