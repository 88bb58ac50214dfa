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
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import preflight
from preflight.run.agent import DONE, HELLO, RESULT, START
from preflight.core.check import Check, Expect
from preflight.core.config import Config
from preflight.run.execute import error_result, now_iso
from preflight.core import levels
from preflight.core.model import CLUSTER_NODE, CheckResult, Evidence, Finding, NodeInfo, RunReport, Scope, Status
from preflight.run.plan import write_header
from preflight.transport.process import TIMEOUT, RemoteProcess
from preflight.run.child import run_json_child
from preflight.transport import Transport
from preflight.core.verdict import Verdict, decide

# An agent that writes nothing for the timeout of the check it is on plus this long has lost its node.
AGENT_GRACE_S = 15.0
# After the agent's stdin closes it ends its check and exits; the guard gives it this long first.
AGENT_STOP_GRACE_S = 5.0
# How long a silent or garbled agent gets to end after its stdin closes, before it is killed.
AGENT_KILL_WAIT_S = 2.0


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
    fail_fast: bool = False  # stop once the verdict is NO-GO

    @property
    def node_checks(self) -> list[type[Check]]:
        return [c for c in self.checks if c.scope is Scope.NODE and not self.config.skipped_at_level(c)]

    @property
    def cluster_checks(self) -> list[type[Check]]:
        return [c for c in self.checks if c.scope is Scope.CLUSTER and not self.config.skipped_at_level(c)]

    @property
    def skipped_at_level(self) -> list[type[Check]]:
        return [c for c in self.checks if self.config.skipped_at_level(c)]

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
        self.agents: dict[str, RemoteProcess] = {}
        self.cluster_child: RemoteProcess | None = None
        self.stop = threading.Event()
        self.report = RunReport(
            started_at=now_iso(),
            preflight_version=preflight.__version__,
            nodes=[NodeInfo(name=n.name, address=n.transport.address, slots=n.slots) for n in plan.nodes],
            planned=[c.id for c in plan.checks],
            cluster_checks=[c.id for c in plan.checks if c.scope is Scope.CLUSTER],
            expected=plan.expected_checks(),
            fail_on=plan.config.fail_on,
            config_path=plan.config.path or "",
            profile=plan.config.profile,
            profile_sources=list(plan.config.profile_sources),
            command=plan.command,
            load_errors=plan.load_errors,
            level=plan.config.level,
            level_budget_s=levels.BUDGET_S.get(plan.config.level),
            silenced={k: dict(v) for k, v in plan.config.silence.items()},
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
        if self.plan.fail_fast and not self.stop.is_set() and decide(self.report).verdict is Verdict.NO_GO:
            self.report.stopped_early = (f"--fail-fast: stopped once {result.check_id} on {result.node} made the "
                                         "verdict NO-GO; the checks still planned did not run")
            self.stop.set()
            self._stop_everything()

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> RunReport:
        try:
            self._record_level_skips()
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

    def _record_level_skips(self) -> None:
        """A SKIP, on every node it would run on, for each check this run's level leaves out."""
        level = self.plan.config.level
        for check in self.plan.skipped_at_level:
            reason = self.plan.config.skipped_at_level(check)
            summary = levels.skip_summary(check.id, level, reason)
            finding = Finding(f"{check.id}{levels.SKIPPED_AT_LEVEL}", Status.SKIP, summary,
                              fix="run with --level standard to include it")
            where = [CLUSTER_NODE] if check.scope is Scope.CLUSTER else [n.name for n in self.plan.nodes]
            for node in where:
                if self.stop.is_set():
                    return
                self.record(CheckResult(check_id=check.id, node=node, status=Status.SKIP, summary=summary,
                                        title=check.title, scope=check.scope, why=check.why, findings=[finding],
                                        started_at=now_iso()))

    def _run_node_checks(self) -> None:
        if not self.plan.node_checks:
            return
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.plan.fanout, len(self.plan.nodes))),
                                  thread_name_prefix="agent")
        pending = {pool.submit(self._drive_agent, node): node for node in self.plan.nodes}
        try:
            # The main thread only consumes events, so Ctrl-C lands here promptly.
            while pending:
                try:
                    kind, payload = self.events.get(timeout=0.2)
                except queue.Empty:
                    pending = self._still_driving(pending)
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

    def _still_driving(self, pending: dict[Any, NodeTarget]) -> dict[Any, NodeTarget]:
        """The drivers still running; one that died of an exception loses its node, never silently."""
        for future, node in pending.items():
            if future.done() and future.exception() is not None:
                exc = future.exception()
                done = {r.check_id for r in self.report.results if r.node == node.name}
                self._node_lost(node, self.plan.node_checks, done,
                                f"preflight failed while driving {node.name}: {type(exc).__name__}: {exc}", None)
        return {f: n for f, n in pending.items() if not f.done()}

    def _update_node(self, name: str, reachable: bool, error: str) -> None:
        for info in self.report.nodes:
            if info.name == name:
                info.reachable, info.error = reachable, error

    def _drive_agent(self, node: NodeTarget) -> None:
        """Runs in a pool thread: start the node's agent and turn its output into events.

        Whatever goes wrong here (an agent that stops writing, a line that is not the protocol, a
        bug in this very function) ends as ERROR for the node's unfinished checks; the run goes on.
        """
        done: set[str] = set()
        agent = None
        try:
            agent = self._start_agent(node, done)
        except Exception as exc:  # noqa: BLE001 - a crash here must not lose the node silently
            self._node_lost(node, self.plan.node_checks, done,
                            f"preflight failed while reading {node.name}'s agent: {type(exc).__name__}: {exc}", None,
                            traceback.format_exc()[-4000:])
        finally:
            if agent is not None and not self.stop.is_set():
                agent.stop()

    def _line_limit(self, checks: list[type[Check]], done: set[str]) -> float:
        """How long the agent may stay silent: the timeout of the check it is on, plus a grace."""
        left = [c for c in checks if c.id not in done]
        return (self.plan.config.timeout_for(left[0]) if left else 0.0) + AGENT_GRACE_S

    def _start_agent(self, node: NodeTarget, done: set[str]) -> RemoteProcess | None:
        checks = self.plan.node_checks
        job = {
            "node": node.name,
            "output_dir": str(self.plan.output_dir) if node.transport.kind == "local" else None,
            "expect": self.plan.expect_for(node).to_dict(),
            "coordinator_version": preflight.__version__,
            "checks": [{"id": c.id, "timeout_s": self.plan.config.timeout_for(c),
                        "params": self.plan.config.overrides_for(c)} for c in checks],
        }
        argv = [node.transport.python, "-m", "preflight.run.agent"]
        try:
            agent = node.transport.spawn(argv, stdin=True, grace_s=AGENT_STOP_GRACE_S)
        except OSError as exc:
            self._node_lost(node, checks, done, f"could not start the agent: {exc}", None)
            return None
        self.agents[node.name] = agent
        hello: dict[str, Any] | None = None
        finished = False
        current: str | None = None
        problem: str | None = None
        agent.write(json.dumps(job) + "\n")
        while True:
            limit = self._line_limit(checks, done)
            line = agent.next_line(limit)
            if self.stop.is_set():
                return agent
            if line is None:
                break
            if line is TIMEOUT:
                during = f" while running {current}" if current else ""
                problem = f"the agent on {node.name} wrote nothing for {limit:.0f}s{during}; it was stopped"
                break
            try:
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
            except (ValueError, KeyError, TypeError) as exc:
                problem = (f"the agent on {node.name} sent a line preflight cannot read ({type(exc).__name__}: "
                           f"{exc}): {line[:200]!r}")
                break
        # An agent that went silent or garbled is not waited for long: it gets its stop, then the kill.
        returncode = agent.stop(grace_s=AGENT_KILL_WAIT_S if problem else None)
        stderr = agent.stderr[-4000:]
        if finished and hello and hello.get("version") == preflight.__version__ and problem is None:
            return agent
        if problem is not None:
            self._node_lost(node, checks, done, problem, returncode, stderr)
        elif hello and hello.get("version") != preflight.__version__:
            message = (f"{node.name} runs preflight {hello.get('version')} ({hello.get('python')}), the coordinator "
                       f"{preflight.__version__}: install preflight=={preflight.__version__} on every node")
            self._node_lost(node, checks, done, message, returncode, stderr)
        elif hello is None:
            self._node_lost(node, checks, done, _unreachable_message(node.transport, agent, stderr),
                            returncode, stderr)
        else:
            during = f" while running {current}" if current else ""
            code = agent.exit_code if agent.exit_code is not None else returncode
            self._node_lost(node, checks, done, f"lost contact with {node.name}{during} (exit code {code})",
                            returncode, stderr)
        return agent

    def _node_lost(self, node: NodeTarget, checks: list[type[Check]], done: set[str], message: str,
                   returncode: int | None, stderr: str = "") -> None:
        """The node cannot be used: ERROR for each check it did not finish, and no cluster check uses it."""
        command = shlex.join(node.transport.wrap([node.transport.python, "-m", "preflight.run.agent"]))
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
                "timeout_s": timeout, "params": self.plan.config.overrides_for(check),
                "expect": self.plan.config.expect.to_dict(),
                "nodes": [{**n.transport.to_spec(), "slots": n.slots} for n in reachable],
                "node_facts": node_facts, "unreachable": unreachable,
            }
            outcome = run_json_child("preflight.run.check_process", job, timeout=timeout,
                                     on_start=lambda p: setattr(self, "cluster_child", p))
            self.cluster_child = None
            evidence = [Evidence(f"python -m preflight.run.check_process ({check.id})", outcome.returncode, outcome.stderr_tail)]
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
        # A remote agent ends its checks when its stdin closes; what does not end is killed.
        children = list(self.agents.values()) + ([self.cluster_child] if self.cluster_child else [])
        for child in children:
            child.request_stop()
        for child in children:
            child.stop()


def _unreachable_message(transport: Transport, agent: RemoteProcess, stderr: str) -> str:
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    returncode = agent.exit_code if agent.exit_code is not None else agent.returncode
    if agent.transport_failed():
        return f"cannot reach {transport.name}: {last or 'connection failed'}"
    if "No module named" in stderr and "preflight" in stderr:
        return (f"preflight is not installed for {transport.python} on {transport.name}: install "
                f"preflight=={preflight.__version__} there, or point --remote-python at an interpreter that has it")
    if returncode == 127 or "not found" in last:
        return f"{transport.python} was not found on {transport.name}: {last}"
    return f"the agent on {transport.name} exited with code {returncode} before starting: {last}"
