"""The coordinator: start one agent per node, gather results, then run the cluster checks.

Local runs are the one-node case of the same path: the local node's transport starts the agent as a
child process, a remote node's transport starts it over SSH. Every result is appended to
results.jsonl (flushed and synced) the moment it arrives, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import preflight
from preflight.agent import DONE, HELLO, RESULT, START
from preflight.check import Check, Expect
from preflight.config import Config
from preflight.execute import error_result, now_iso
from preflight.model import CLUSTER_NODE, CheckResult, Evidence, NodeInfo, RunReport, Scope
from preflight.plan import write_header
from preflight.proc import kill_tree, run_json_child
from preflight.transport import Transport


@dataclass
class NodeTarget:
    transport: Transport
    slots: int | None = None

    @property
    def name(self) -> str:
        return self.transport.name


@dataclass
class RunPlan:
    checks: list[type[Check]]  # in run order
    config: Config
    output_dir: Path
    nodes: list[NodeTarget]
    fanout: int = 64
    command: str = ""
    load_errors: list[dict[str, str]] = field(default_factory=list)

    @property
    def node_checks(self) -> list[type[Check]]:
        return [c for c in self.checks if c.scope is Scope.NODE]

    @property
    def cluster_checks(self) -> list[type[Check]]:
        return [c for c in self.checks if c.scope is Scope.CLUSTER]

    def expect_for(self, node: NodeTarget) -> Expect:
        expect = Expect(**vars(self.config.expect))
        if node.slots is not None:
            expect.gpus_per_node = node.slots
        return expect

    def expected_checks(self) -> list[str]:
        expected = []
        for check in self.checks:
            expects = [self.expect_for(n) for n in self.nodes] or [self.config.expect]
            if any(check().expected_to_run(e) for e in expects):
                expected.append(check.id)
        return expected


# What the runner tells whoever displays progress: ("start", node, check_id) or ("result", result).
ProgressEvent = tuple[str, Any, Any]


class Runner:
    def __init__(self, plan: RunPlan, on_event: Callable[[ProgressEvent], None] | None = None) -> None:
        self.plan = plan
        self.on_event = on_event or (lambda event: None)
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.agents: dict[str, subprocess.Popen] = {}
        self.cluster_child: subprocess.Popen | None = None
        self.stop = threading.Event()
        self.report = RunReport(
            started_at=now_iso(),
            preflight_version=preflight.__version__,
            nodes=[NodeInfo(name=n.name, address=n.transport.address, slots=n.slots) for n in plan.nodes],
            planned=[c.id for c in plan.checks],
            cluster_checks=[c.id for c in plan.cluster_checks],
            expected=plan.expected_checks(),
            fail_on=plan.config.fail_on,
            config_path=plan.config.path or "",
            profile=plan.config.profile,
            profile_sources=list(plan.config.profile_sources),
            command=plan.command,
            load_errors=plan.load_errors,
        )
        plan.output_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = plan.output_dir / "results.jsonl"
        self.jsonl = open(self.jsonl_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in run()
        write_header(self.jsonl, self.report, plan)  # the plan first: a killed run's file says what is missing

    # -- results ---------------------------------------------------------------------------------
    def record(self, result: CheckResult) -> None:
        self.report.add(result)
        self.jsonl.write(result.to_json_line() + "\n")
        self.jsonl.flush()
        os.fsync(self.jsonl.fileno())
        self.on_event(("result", result, None))

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> RunReport:
        try:
            self._run_node_checks()
            if not self.stop.is_set():
                self._run_cluster_checks()
        except KeyboardInterrupt:
            self.stop.set()
            self.report.incomplete = self.report.interrupted = True
            self.report.incomplete_reason = "interrupted (Ctrl-C): the reports hold what finished"
            self._stop_everything()
        finally:
            self.report.finished_at = now_iso()
            self.jsonl.close()
            # Checks clean their own scratch space; this removes the (now empty) folders above it.
            shutil.rmtree(self.plan.output_dir / "scratch", ignore_errors=True)
        return self.report

    def _run_node_checks(self) -> None:
        if not self.plan.node_checks:
            return
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.plan.fanout, len(self.plan.nodes))),
                                  thread_name_prefix="agent")
        pending = {pool.submit(self._drive_agent, node) for node in self.plan.nodes}
        try:
            # The main thread only consumes events, so Ctrl-C lands here promptly.
            while pending:
                try:
                    kind, payload = self.events.get(timeout=0.2)
                except queue.Empty:
                    pending = {f for f in pending if not f.done()}
                    continue
                if kind == "result":
                    self.record(payload)
                elif kind == "start":
                    self.on_event(("start", payload[0], payload[1]))
                elif kind == "node":
                    self._update_node(*payload)
            while not self.events.empty():
                kind, payload = self.events.get()
                if kind == "result":
                    self.record(payload)
                elif kind == "node":
                    self._update_node(*payload)
        except KeyboardInterrupt:
            # Stop the agents before the pool is shut down, or shutdown waits on their output.
            self.stop.set()
            self._stop_everything()
            raise
        finally:
            pool.shutdown(wait=not self.stop.is_set(), cancel_futures=True)

    def _update_node(self, name: str, reachable: bool, error: str) -> None:
        for info in self.report.nodes:
            if info.name == name:
                info.reachable, info.error = reachable, error

    def _drive_agent(self, node: NodeTarget) -> None:
        """Runs in a pool thread: start the node's agent and turn its output into events."""
        checks = self.plan.node_checks
        job = {
            "node": node.name,
            "output_dir": str(self.plan.output_dir) if node.transport.kind == "local" else None,
            "expect": self.plan.expect_for(node).to_dict(),
            "coordinator_version": preflight.__version__,
            "checks": [{"id": c.id, "timeout_s": self.plan.config.timeout_for(c),
                        "params": self.plan.config.params.get(c.id, {})} for c in checks],
        }
        argv = [node.transport.python, "-m", "preflight.agent"]
        try:
            proc = node.transport.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            self._node_lost(node, checks, set(), f"could not start the agent: {exc}", None)
            return
        self.agents[node.name] = proc
        stderr_lines: list[str] = []
        threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True).start()
        done: set[str] = set()
        hello: dict[str, Any] | None = None
        finished = False
        current: str | None = None
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        for line in proc.stdout:
            if line.startswith(HELLO):
                hello = json.loads(line[len(HELLO):])
                if hello.get("version") != preflight.__version__:
                    break
                self.events.put(("node", (node.name, True, "")))
            elif line.startswith(START):
                current = line[len(START):].strip()
                self.events.put(("start", (node.name, current)))
            elif line.startswith(RESULT):
                result = CheckResult.from_dict(json.loads(line[len(RESULT):]))
                result.node = node.name  # the name the user wrote, whatever the node calls itself
                done.add(result.check_id)
                current = None
                self.events.put(("result", result))
            elif line.strip() == DONE:
                finished = True
                break
        if self.stop.is_set():
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            returncode = proc.wait()
        time.sleep(0.05)  # let the stderr reader drain
        stderr = "".join(stderr_lines)[-4000:]
        if finished and hello and hello.get("version") == preflight.__version__:
            return
        if hello and hello.get("version") != preflight.__version__:
            message = (f"{node.name} runs preflight {hello.get('version')} ({hello.get('python')}), the coordinator "
                       f"{preflight.__version__}: install preflight=={preflight.__version__} on every node")
            self._node_lost(node, checks, done, message, returncode, stderr)
        elif hello is None:
            self._node_lost(node, checks, done, _unreachable_message(node.transport, returncode, stderr),
                            returncode, stderr)
        else:
            during = f" while running {current}" if current else ""
            self._node_lost(node, checks, done, f"lost contact with {node.name}{during} (exit code {returncode})",
                            returncode, stderr)

    def _node_lost(self, node: NodeTarget, checks: list[type[Check]], done: set[str], message: str,
                   returncode: int | None, stderr: str = "") -> None:
        """The node cannot be used: ERROR for each check it did not finish, and no cluster check uses it."""
        command = shlex.join(node.transport.wrap([node.transport.python, "-m", "preflight.agent"]))
        evidence = [Evidence(command=command, exit_code=returncode, output_tail=stderr)]
        self.events.put(("node", (node.name, False, message)))
        for check in checks:
            if check.id not in done:
                self.events.put(("result", error_result(check, node.name, message, evidence)))

    def _run_cluster_checks(self) -> None:
        reachable = [n for n in self.plan.nodes if self._node_reachable(n.name)]
        unreachable = [n.name for n in self.plan.nodes if n not in reachable]
        node_facts: dict[str, dict[str, Any]] = {}
        for result in self.report.results:
            if result.scope is Scope.NODE:
                node_facts.setdefault(result.node, {})[result.check_id] = result.facts
        for check in self.plan.cluster_checks:
            if self.stop.is_set():
                return
            timeout = self.plan.config.timeout_for(check)
            self.on_event(("start", CLUSTER_NODE, check.id))
            job = {
                "check_id": check.id, "node": CLUSTER_NODE, "output_dir": str(self.plan.output_dir),
                "timeout_s": timeout, "params": self.plan.config.params.get(check.id, {}),
                "expect": self.plan.config.expect.to_dict(),
                "nodes": [{**n.transport.to_spec(), "slots": n.slots} for n in reachable],
                "node_facts": node_facts, "unreachable": unreachable,
            }
            outcome = run_json_child("preflight.worker", job, timeout=timeout,
                                     on_start=lambda p: setattr(self, "cluster_child", p))
            self.cluster_child = None
            evidence = [Evidence(f"python -m preflight.worker ({check.id})", outcome.returncode, outcome.stderr_tail)]
            if outcome.result is not None:
                result = CheckResult.from_dict(outcome.result)
            elif outcome.timed_out:
                result = error_result(check, CLUSTER_NODE, f"timed out after {timeout:.0f}s; its processes were killed",
                                      evidence, outcome.duration_s)
            else:
                result = error_result(check, CLUSTER_NODE,
                                      f"the check's process died with exit code {outcome.returncode} before reporting",
                                      evidence, outcome.duration_s)
            self.record(result)

    def _node_reachable(self, name: str) -> bool:
        info = next((n for n in self.report.nodes if n.name == name), None)
        return info is None or info.reachable is not False

    def _stop_everything(self) -> None:
        for proc in list(self.agents.values()) + ([self.cluster_child] if self.cluster_child else []):
            try:
                if proc.stdin:
                    proc.stdin.close()  # a remote agent ends its checks when its stdin closes
            except OSError:
                pass
            if proc.poll() is None:
                kill_tree(proc.pid)


def _unreachable_message(transport: Transport, returncode: int | None, stderr: str) -> str:
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if returncode is not None and transport.is_transport_failure(returncode):
        return f"cannot reach {transport.name}: {last or 'connection failed'}"
    if "No module named" in stderr and "preflight" in stderr:
        return (f"preflight is not installed for {transport.python} on {transport.name}: install "
                f"preflight=={preflight.__version__} there, or point --remote-python at an interpreter that has it")
    if returncode == 127 or "not found" in last:
        return f"{transport.python} was not found on {transport.name}: {last}"
    return f"the agent on {transport.name} exited with code {returncode} before starting: {last}"
