"""The coordinator: start one agent per node, gather results, then run the cluster checks.

Local runs are the one-node case of the same path: the local node's transport starts the agent as a
child process, a remote node's transport starts it over SSH. Every result is appended to
results.jsonl (flushed) the moment it arrives, and synced to disk as soon as no other result is
waiting behind it (results that arrive together are synced together), so an interrupted run keeps
what it measured.
"""

from __future__ import annotations

import io
import os
import queue
import shlex
import shutil
import tempfile
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import preflight
from preflight.core.finite import dumps
from preflight.engine.agent_stream import AgentStream, unreachable_words
from preflight.core.check import Check, Expect
from preflight.core.config import Config
from preflight.engine.execute import error_result, now_iso
from preflight.core import levels
from preflight.core.model import CLUSTER_NODE, CheckResult, Evidence, Finding, NodeInfo, RunReport, Scope, Status
from preflight.core.files import FileWriteError, open_log
from preflight.core.finite import make_finite
from preflight.engine.head import write_header
from preflight.engine.fail_fast import Pacer
from preflight.engine.signals import INTERRUPTS
from preflight.transport.process import TIMEOUT, RemoteProcess
from preflight.engine.child import run_check
from preflight.engine.protocol import CheckJob, CheckSpec, Event, NodeJob, NodeLost, NodeReached, Result, Started
from preflight.transport import Transport
from preflight.core.verdict import Verdict, decide
from preflight.reporters import load_errors as reporter_load_errors
from preflight.core.redact import redact_text, scrub

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
    # Where the node sits in the network, as its source says (preflight.launch.topology): `group`
    # from the hosts file, `switch` from Slurm, `topology_labels` from Kubernetes.
    topology: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.transport.name

    def spec(self) -> dict[str, Any]:
        """The node as the cluster checks see it (ClusterContext.nodes): its transport's spec, its
        slots and its topology facts."""
        return {**self.transport.to_spec(), "slots": self.slots, **self.topology}


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
    # What the run was judged with and where each value came from (RunReport.judged_with), so that
    # `preflight report --rejudge` starts from it.
    judged_with: dict[str, Any] | None = None
    # Nodes of a Slurm allocation: "single" (one job step across them), "per-node" (a step each), or
    # "auto" (one step from preflight.engine.slurm_step.SINGLE_STEP_FROM nodes on).
    slurm_step: str = "auto"

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

    def check_specs(self) -> list[CheckSpec]:
        """The node checks as an agent is asked to run them (NodeJob.checks)."""
        return [CheckSpec(c.id, self.config.timeout_for(c), self.config.overrides_for(c)) for c in self.node_checks]

    def expected_checks(self) -> list[str]:
        expected = []
        for check in self.checks:
            expects = [self.expect_for(n) for n in self.nodes] or [self.config.expect]
            if any(check().expected_to_run(e) for e in expects):
                expected.append(check.id)
        return expected


# What the runner tells whoever displays progress: a check started on a node, or its result.
ProgressEvent = Started | Result


class Runner:
    def __init__(self, plan: RunPlan, on_event: Callable[[ProgressEvent], None] | None = None) -> None:
        self.plan = plan
        self.on_event = on_event or (lambda event: None)
        self.events: queue.Queue[Event] = queue.Queue()  # what the drivers report (engine.protocol)
        self.agents: dict[str, RemoteProcess] = {}
        self.cluster_child: RemoteProcess | None = None
        self.stop = threading.Event()
        self.pacer = Pacer()  # --fail-fast's judging of the verdict, kept to a share of the run's time
        self.unjudged = False  # a result has arrived that --fail-fast has not judged yet
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
            command=redact_text(plan.command, assignments=True),
            load_errors=[*plan.load_errors, *reporter_load_errors()],
            level=plan.config.level,
            level_budget_s=levels.BUDGET_S.get(plan.config.level),
            judged_with=plan.judged_with,
            silenced={k: dict(v) for k, v in plan.config.silence.items()},
        )
        scrub(self.report.load_errors)
        plan.output_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = plan.output_dir / "results.jsonl"
        self.write_error = ""  # set when results.jsonl could not be written (a full disk): exit 2 naming it
        self.jsonl = open_log(self.jsonl_path)  # raises FileWriteError naming it; closed in run()
        self.unsynced = False
        header = io.StringIO()
        write_header(header, self.report, plan)  # the plan first: a killed run's file says what is missing
        self._append(header.getvalue())
        if self.write_error:
            self.jsonl.close()
            raise FileWriteError(self.jsonl_path, self.write_error.split(": ", 1)[-1])
        # The run's own scratch space: a directory it creates here and removes at the end, never a
        # directory of the user's that happens to have a scratch-like name.
        try:
            self.scratch = Path(tempfile.mkdtemp(prefix=".preflight-scratch-", dir=plan.output_dir))
        except OSError as exc:
            self.jsonl.close()
            raise FileWriteError(plan.output_dir / ".preflight-scratch-*", exc.strerror or str(exc)) from None

    # -- results ---------------------------------------------------------------------------------
    def record(self, result: CheckResult) -> None:
        make_finite(result)  # a NaN or infinite figure is written as null, with a note in the result
        self.report.add(result)
        if not self.write_error:
            self._append(result.to_json_line() + "\n")
            if self.events.empty():
                self.sync()  # else the results waiting behind this one are synced with it
        self.on_event(Result(result))
        self._judge_fail_fast()

    def _judge_fail_fast(self, now: bool = False) -> None:
        """--fail-fast: stop the run once the verdict is NO-GO. Judged after a result when
        preflight.engine.fail_fast.Pacer allows (at once, in a small run), else on the next idle tick
        (`now`), so a result that made it NO-GO is never left waiting for the next one."""
        if not self.plan.fail_fast or self.stop.is_set() or (now and not self.unjudged):
            return
        if not now and not self.pacer.due():
            self.unjudged = True
            return
        self.unjudged = False
        started = self.pacer.clock()
        try:
            decision = decide(self.report)
        finally:
            self.pacer.done(started)
        if decision.verdict is Verdict.NO_GO:
            first = decision.blocking[0] if decision.blocking else self.report.results[-1]
            self.report.stopped_early = (f"--fail-fast: stopped once {first.check_id} on {first.node} made the "
                                         "verdict NO-GO; the checks still planned did not run")
            self.stop.set()
            self._stop_everything()

    def _append(self, line: str) -> None:
        """One whole line on results.jsonl, or none: a write the disk refuses is cut back off, so the
        file keeps every result before it and no torn line; the run goes on (its results stay in
        memory for the reports) and the command exits 2 naming the file. Synced by sync()."""
        fd = self.jsonl.fileno()
        data = line.encode("utf-8")
        try:
            self.jsonl.flush()
            good = os.fstat(fd).st_size
            while data:
                data = data[os.write(fd, data):]
            self.unsynced = True
        except OSError as exc:
            self.write_error = str(FileWriteError(self.jsonl_path, exc.strerror or str(exc)))
            try:
                os.ftruncate(fd, good)
            except (OSError, UnboundLocalError):
                pass

    def sync(self) -> None:
        """Put what results.jsonl was given on disk (one fsync for a burst of results, not one each)."""
        if self.unsynced and not self.jsonl.closed:
            try:
                os.fsync(self.jsonl.fileno())
            except OSError as exc:
                self.write_error = self.write_error or str(FileWriteError(self.jsonl_path, exc.strerror or str(exc)))
            self.unsynced = False

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> RunReport:
        try:
            with INTERRUPTS.armed():  # the first SIGINT or SIGTERM lands here; later ones are only counted
                self._record_level_skips()
                self._run_node_checks()
                self._judge_fail_fast(now=True)
                if not self.stop.is_set():
                    self._run_cluster_checks()
        except KeyboardInterrupt:
            self.stop.set()
            mark_interrupted(self.report)
            self._stop_everything()
        finally:
            self.report.finished_at = now_iso()
            self.sync()
            try:
                self.jsonl.close()
            except OSError as exc:
                self.write_error = self.write_error or str(FileWriteError(self.jsonl_path, exc.strerror or str(exc)))
            # Checks clean their own scratch space; this removes the run's own directory above it.
            shutil.rmtree(self.scratch, ignore_errors=True)
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
        drivers = self._drivers()
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.plan.fanout, len(drivers))),
                                  thread_name_prefix="agent")
        pending = {pool.submit(drive): nodes for drive, nodes in drivers}
        try:
            # The main thread only consumes events, so Ctrl-C lands here promptly.
            while pending:
                try:
                    event = self.events.get(timeout=0.2)
                except queue.Empty:
                    self.sync()
                    self._judge_fail_fast(now=True)
                    pending = self._still_driving(pending)
                    continue
                self._take(event)
            while not self.events.empty():
                self._take(self.events.get(), show_starts=False)  # every driver has ended: nothing runs now
        except KeyboardInterrupt:
            # Stop the agents before the pool is shut down, or shutdown waits on their output.
            self.stop.set()
            self._stop_everything()
            raise
        finally:
            pool.shutdown(wait=not self.stop.is_set(), cancel_futures=True)

    def _drivers(self) -> list[tuple[Callable[[], None], list[NodeTarget]]]:
        """What drives the node checks, and the nodes each one drives: an agent per node, or one job step."""
        from preflight.engine.slurm_step import StepDriver, use_single_step

        nodes = self.plan.nodes
        if use_single_step(self.plan.slurm_step, [n.transport for n in nodes]):
            step = StepDriver(self, nodes, AGENT_STOP_GRACE_S, AGENT_KILL_WAIT_S, AGENT_GRACE_S)
            return [(step.run, list(nodes))]
        return [(lambda node=node: self._drive_agent(node), [node]) for node in nodes]

    def _still_driving(self, pending: dict[Any, list[NodeTarget]]) -> dict[Any, list[NodeTarget]]:
        """The drivers still running; one that died of an exception loses its nodes, never silently."""
        for future, nodes in pending.items():
            if future.done() and future.exception() is not None:
                exc = future.exception()
                for node in nodes:
                    done = {r.check_id for r in self.report.results if r.node == node.name and r.scope is Scope.NODE}
                    self._node_lost(node, self.plan.node_checks, done,
                                    f"preflight failed while driving {node.name}: {type(exc).__name__}: {exc}", None)
        return {f: n for f, n in pending.items() if not f.done()}

    def _take(self, event: Event, show_starts: bool = True) -> None:
        if isinstance(event, Result):
            self.record(event.result)
        elif isinstance(event, Started):
            if show_starts:
                self.on_event(event)
        elif isinstance(event, NodeReached):
            self._update_node(event.node, True, "")
        elif isinstance(event, NodeLost):
            self._update_node(event.node, False, event.reason)

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
                # Its results are recorded: let go of its output and pipes (1,000 agents' worth adds up).
                self.agents.pop(node.name, None)

    def _job(self, node: NodeTarget) -> NodeJob:
        local = node.transport.kind == "local"
        return NodeJob(node=node.name, checks=self.plan.check_specs(), expect=self.plan.expect_for(node).to_dict(),
                       output_dir=str(self.plan.output_dir) if local else None,
                       scratch_dir=str(self.scratch) if local else None, coordinator_version=preflight.__version__)

    def _start_agent(self, node: NodeTarget, done: set[str]) -> RemoteProcess | None:
        checks = self.plan.node_checks
        argv = [node.transport.python, "-m", "preflight.engine.agent"]
        try:
            agent = node.transport.spawn(argv, stdin=True, grace_s=AGENT_STOP_GRACE_S)
        except OSError as exc:
            self._node_lost(node, checks, done, f"could not start the agent: {exc}", None)
            return None
        self.agents[node.name] = agent
        stream = AgentStream(node.name, checks, self.events.put)
        stream.done = done
        agent.write(dumps(self._job(node).to_dict()) + "\n")
        while True:
            limit = stream.line_limit(self.plan.config.timeout_for, AGENT_GRACE_S)
            line = agent.next_line(limit)
            if self.stop.is_set():
                return agent
            if line is None:
                break
            if line is TIMEOUT:
                stream.silent(limit)
                break
            if stream.feed(line):
                break
        # An agent that went silent or garbled is not waited for long: it gets its stop, then the kill.
        returncode = agent.stop(grace_s=AGENT_KILL_WAIT_S if stream.problem else None)
        stderr = agent.stderr[-4000:]
        code = agent.exit_code if agent.exit_code is not None else returncode
        message = stream.loss(code, lambda: _unreachable_message(node.transport, agent, stderr))
        if message is not None:
            self._node_lost(node, checks, done, message, returncode, stderr)
        return agent

    def drive_agent(self, node: NodeTarget) -> None:
        """The per-node path for one node (a job step that cannot be created falls back to it)."""
        self._drive_agent(node)

    def node_lost(self, node: NodeTarget, done: set[str], message: str, returncode: int | None, stderr: str = "",
                  command: str | None = None) -> None:
        """ERROR for each node check the node did not finish (`done`: those it did), with `message`."""
        self._node_lost(node, self.plan.node_checks, done, message, returncode, stderr, command)

    def _node_lost(self, node: NodeTarget, checks: list[type[Check]], done: set[str], message: str,
                   returncode: int | None, stderr: str = "", command: str | None = None) -> None:
        """The node cannot be used: ERROR for each check it did not finish, and no cluster check uses it."""
        if command is None:
            command = shlex.join(node.transport.wrap([node.transport.python, "-m", "preflight.engine.agent"]))
        evidence = [Evidence(command=command, exit_code=returncode, output_tail=stderr)]
        self.events.put(NodeLost(node.name, message))
        for check in checks:
            if check.id not in done:
                self.events.put(Result(error_result(check, node.name, message, evidence)))

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
            self.on_event(Started(CLUSTER_NODE, check.id))
            job = CheckJob(
                check_id=check.id, node=CLUSTER_NODE, output_dir=str(self.plan.output_dir), scratch_dir=str(self.scratch),
                timeout_s=self.plan.config.timeout_for(check, len(reachable)), params=self.plan.config.overrides_for(check),
                expect=self.plan.config.expect.to_dict(), nodes=[n.spec() for n in reachable],
                node_facts=node_facts, unreachable=unreachable,
                cluster_facts={r.check_id: r.facts for r in self.report.results if r.scope is Scope.CLUSTER},
            )
            result = run_check(check, job, on_start=lambda p: setattr(self, "cluster_child", p))
            self.cluster_child = None
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


def mark_interrupted(report: RunReport) -> None:
    """The report of a run stopped by SIGINT or SIGTERM: incomplete, whatever had arrived."""
    report.incomplete = report.interrupted = True
    report.incomplete_reason = "interrupted (SIGINT or SIGTERM): the reports hold what finished"


def _unreachable_message(transport: Transport, agent: RemoteProcess, stderr: str) -> str:
    returncode = agent.exit_code if agent.exit_code is not None else agent.returncode
    return unreachable_words(transport, returncode, agent.transport_failed(), stderr)
