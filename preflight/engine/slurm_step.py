"""Every node's agent as one task of a single Slurm job step across the allocation.

One srun on the coordinator, one step for slurmctld to create, whatever the size of the allocation
(the per-node path holds one srun per node being driven, about 9 MiB each). The step's stdout is
one stream of lines labelled by task (`srun -l`); each task's agent names its node in its hello,
and from then on its lines are read as that node's agent (AgentStream), exactly as a per-node agent's.

A node is let go of on its own, and the rest of the step goes on:
- Slurm says a task could not be launched there, or that the node failed: its checks are ERROR,
  in Slurm's words;
- its agent wrote nothing for the timeout of its check plus a grace, or a line nobody can read:
  `PREFLIGHT-STOP <node>` on the shared stdin ends that agent alone; when it does not end, its
  guard and agent are killed by PID through a job step of their own on that node;
- its task ended without DONE: what it finished stands, the rest is ERROR.
When the step cannot be created at all (a node outside the allocation, say) and no task said
anything, the nodes are driven one step each instead, which names the node at fault.
"""

from __future__ import annotations

import json
import queue
import shlex
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import preflight
from preflight.core.finite import dumps
from preflight.engine.agent import HELLO, MORE, STOP
from preflight.engine.agent_stream import AgentStream, unreachable_words
from preflight.engine.protocol import Event, NodeJob
from preflight.transport.process import EXIT_MARKER, GUARD_MODULE, PID_MARKER, TIMEOUT, RemoteProcess, \
    command_identity, run_command
from preflight.transport.slurm import SRUN_ERROR_EXIT, SlurmStep, split_label, srun_message

STEP_KEY = "<slurm job step>"  # the step's entry among the runner's agents (never a node name: it has spaces)
POLL_S = 0.5  # how often silence and srun's own messages are looked at while the step runs
KEPT_LINES = 40  # per task: the last lines of its stderr, for the evidence of a lost node
KILL_TIMEOUT_S = 15.0  # the job step that kills a stopped agent by PID gets this long
# srun -l cuts a task's line at 1,024 bytes: agents in a step send theirs in pieces shorter than that.
MAX_LINE = 900
RETRIES = 3  # new steps over the nodes left when a launch failed elsewhere (Slurm cancels the whole step)
# How the auto mode chooses: one step from this many nodes on. On the Slurm test bed (bench/slurm_step.py)
# the two paths take the same time at 1 to 3 nodes, and one step holds one srun (9 MiB) where a step per
# node holds one per node; with 1 node they are the same thing.
SINGLE_STEP_FROM = 2
MODES = ("auto", "single", "per-node")


def use_single_step(mode: str, transports: list[Any]) -> bool:
    """Whether to drive these nodes as one job step. Pure."""
    if mode not in MODES:
        raise ValueError(f"unknown Slurm step mode {mode!r}; one of {', '.join(MODES)}")
    if mode == "per-node" or not SlurmStep.fits(transports):
        return False
    return mode == "single" or len(transports) >= SINGLE_STEP_FROM


class StepRunner(Protocol):
    """What the step driver needs of the runner that owns it (preflight.engine.runner.Runner)."""

    plan: Any  # the RunPlan: node_checks, fanout, config
    events: queue.Queue[Event]  # what the step reports (preflight.engine.protocol), read by the runner
    agents: dict[str, RemoteProcess]  # what runs for the run, stopped by the runner at its end
    stop: threading.Event  # set when the run is to stop (a signal, --fail-fast)

    def drive_agent(self, node: Any) -> None: ...

    def node_lost(self, node: Any, done: set[str], message: str, returncode: int | None, stderr: str = "",
                  command: str | None = None) -> None: ...


class StepDriver:
    """Runs in one of the runner's pool threads: starts the step and turns its output into events."""

    def __init__(self, runner: StepRunner, nodes: list[Any], stop_grace_s: float, kill_wait_s: float,
                 line_grace_s: float, retries: int = RETRIES) -> None:
        self.runner = runner
        self.retries = retries
        self.nodes = {n.name: n for n in nodes}
        self.step = SlurmStep([n.transport for n in nodes])  # type: ignore[misc]
        self.checks = runner.plan.node_checks
        self.stop_grace_s, self.kill_wait_s, self.line_grace_s = stop_grace_s, kill_wait_s, line_grace_s
        self.streams = {name: AgentStream(name, self.checks, runner.events.put) for name in self.nodes}
        self.task_node: dict[int, str] = {}
        self.node_task: dict[str, int] = {}  # also from srun's words about a task that never said hello
        self.claimed: set[str] = set()  # nodes whose task said hello
        self.early: dict[int, list[str]] = {}  # a task's guard lines before its agent said which node it is
        self.partial: dict[int, list[str]] = {}  # a task's pieces of a line not yet ended (agent.MORE)
        self.guard_pids: dict[str, list[str]] = {}  # node -> [guard pid, command pid, log dir]
        self.exit_codes: dict[str, int] = {}  # node -> its agent's exit code, as its guard reported it
        self.task_stderr: dict[int, deque[str]] = {}
        self.slurm: dict[str, str] = {}  # node -> what srun itself said about it
        self.launch_failed: set[str] = set()  # nodes where Slurm could not start their task
        self.settled: set[str] = set()  # nodes whose outcome is recorded
        self.open = set(self.nodes)  # nodes still listened to
        self.killers: list[threading.Thread] = []
        self.proc: RemoteProcess | None = None
        self.anything = False  # some task wrote something
        self.stderr_seen = 0

    def argv(self) -> list[str]:
        python = self.step.python
        return [python, "-m", GUARD_MODULE, "--grace", f"{self.stop_grace_s:g}", "--stdin", "--",
                python, "-m", "preflight.engine.agent"]

    def job(self) -> NodeJob:
        plan = self.runner.plan
        common = plan.config.expect.to_dict()
        nodes: dict[str, dict[str, Any]] = {}
        for name, node in self.nodes.items():
            expect = plan.expect_for(node).to_dict()
            nodes[name] = {"expect": expect} if expect != common else {}
        return NodeJob(node=None, node_env="SLURMD_NODENAME", nodes=nodes, expect=common, max_line=MAX_LINE,
                       coordinator_version=preflight.__version__, checks=plan.check_specs())

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.proc = RemoteProcess(self.step, self.argv(), stdin=True, guard=False, keep_output=False)
        except OSError:
            self._one_step_each(list(self.nodes))  # each node's own srun says what is wrong, node by node
            return
        self.runner.agents[STEP_KEY] = self.proc
        try:
            self._follow()
        finally:
            if not self.runner.stop.is_set():
                self._end()

    def _follow(self) -> None:
        assert self.proc is not None
        self.proc.write(dumps(self.job().to_dict()) + "\n")
        looked = time.monotonic()
        while self.open:
            line = self.proc.next_line(POLL_S)
            if self.runner.stop.is_set():
                return
            if line is None:
                break  # srun's output ended: the step is over
            if line is not TIMEOUT:
                self._route(line)
            if len(self.proc.stderr_lines) > self.stderr_seen:
                self._read_stderr()
            if time.monotonic() - looked >= POLL_S:
                looked = time.monotonic()
                self._look_at_silence()

    def _end(self) -> None:
        assert self.proc is not None
        # Every agent has ended or been let go of: the end of stdin ends whatever is left, then srun.
        returncode = self.proc.stop(grace_s=self.stop_grace_s + self.kill_wait_s)
        while True:  # what came while it ended
            line = self.proc.next_line(0)
            if line is None or line is TIMEOUT:
                break
            self._route(line)
        self._read_stderr()
        for killer in self.killers:
            killer.join(timeout=KILL_TIMEOUT_S)
        self.runner.agents.pop(STEP_KEY, None)
        unsettled = [n for n in self.nodes if n not in self.settled and not self.streams[n].completed]
        if not self.anything and returncode == SRUN_ERROR_EXIT and not self.slurm:
            # The step was never created (a node outside the allocation, a job that ended): one step per
            # node names the node at fault, as Slurm answers for each.
            self._one_step_each(unsettled)
            return
        never_started = [n for n in unsettled if self.streams[n].hello is None and not self.streams[n].done]
        if self.launch_failed and never_started and self.retries > 0:
            # A launch that failed on one node cancels the whole step before any agent got its job: the
            # other nodes get a step of their own.
            again = StepDriver(self.runner, [self.nodes[n] for n in never_started], self.stop_grace_s,
                               self.kill_wait_s, self.line_grace_s, self.retries - 1)
            unsettled = [n for n in unsettled if n not in never_started]
            again.run()
        for name in unsettled:
            self._settle(name, returncode)

    # -- output ----------------------------------------------------------------------------------
    def _route(self, line: str) -> None:
        task, text = split_label(line)
        if task is None:
            return
        self.anything = True
        if text.startswith(MORE):
            self.partial.setdefault(task, []).append(text[len(MORE):])
            return
        if task in self.partial:
            text = "".join(self.partial.pop(task)) + text
        node = self.task_node.get(task)
        if node is None:
            if not text.startswith(HELLO):
                self.early.setdefault(task, []).append(text)
                return
            node = self._claim(task, text)
            if node is None:
                return
            for early in self.early.pop(task, []):
                self._guard_line(node, early)
        if self._guard_line(node, text):
            return
        stream = self.streams[node]
        if stream.ended or node in self.settled:
            return
        if stream.feed(text):
            self.open.discard(node)
            if stream.problem is not None:
                self._let_go(node)
            elif not stream.completed:
                self._settle(node, None)

    def _claim(self, task: int, hello: str) -> str | None:
        try:
            node = json.loads(hello[len(HELLO):]).get("node")
        except (ValueError, AttributeError):
            node = None
        if node not in self.streams or node in self.claimed:
            return None  # a task that knows no node of this run: nothing of it can be told apart
        self.claimed.add(node)
        self.task_node[task] = node
        self.node_task[node] = task
        return node

    def _guard_line(self, node: str, text: str) -> bool:
        if text.startswith(PID_MARKER):
            self.guard_pids[node] = text.split()[1:4]
            return True
        if text.startswith(EXIT_MARKER):
            try:
                self.exit_codes[node] = int(text.split()[1])
            except (IndexError, ValueError):
                pass
            if not self.streams[node].completed and node not in self.settled:
                self._settle(node, None)  # its agent ended without its DONE
            return True
        return text.startswith("@@")

    def _read_stderr(self) -> None:
        assert self.proc is not None
        lines = self.proc.stderr_lines[self.stderr_seen:]
        self.stderr_seen += len(lines)
        for line in lines:
            task, text = split_label(line)
            if task is not None:
                self.task_stderr.setdefault(task, deque(maxlen=KEPT_LINES)).append(text)
                continue
            said = srun_message(line)
            if said is None or said.node not in self.nodes:
                continue
            self.slurm.setdefault(said.node, said.text)
            if said.task is not None and said.node not in self.node_task and said.task not in self.task_node:
                self.node_task[said.node] = said.task  # its stderr is that task's, though it never said hello
            if said.kind == "launch":
                self.launch_failed.add(said.node)
            if said.kind in ("launch", "node") and not self.streams[said.node].completed:
                self._settle(said.node, None)  # Slurm itself says the node is gone: no need to wait

    def _look_at_silence(self) -> None:
        now = time.monotonic()
        for name in list(self.open):
            stream = self.streams[name]
            limit = stream.line_limit(self.runner.plan.config.timeout_for, self.line_grace_s)
            if now - stream.last_line_at > limit:
                stream.silent(limit)
                self._let_go(name)

    # -- one node --------------------------------------------------------------------------------
    def _let_go(self, name: str) -> None:
        """Stop this node's agent alone (the others go on) and record what it did not finish."""
        assert self.proc is not None
        self.proc.write(f"{STOP}{name}\n")
        pids = self.guard_pids.get(name)
        if pids and len(pids) == 3:
            killer = threading.Thread(target=self._kill_if_still_there, args=(name, pids), daemon=True,
                                      name=f"stop-{name}")
            killer.start()
            self.killers.append(killer)
        self._settle(name, None)

    def _kill_if_still_there(self, name: str, pids: list[str]) -> None:
        deadline = time.monotonic() + self.stop_grace_s + self.kill_wait_s
        while time.monotonic() < deadline and name not in self.exit_codes:
            time.sleep(0.2)
        if name in self.exit_codes:
            return
        transport = self.nodes[name].transport
        agent = [self.step.python, "-m", "preflight.engine.agent"]
        argv = [transport.python, "-m", GUARD_MODULE, "--kill", *pids, "--", *command_identity(agent)]
        try:
            run_command(transport.wrap(argv), timeout=KILL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a node this far gone is Slurm's to clean up with the step
            pass

    def _settle(self, name: str, returncode: int | None) -> None:
        if name in self.settled:
            return
        self.settled.add(name)
        self.open.discard(name)
        stream = self.streams[name]
        stream.ended = True
        code = self.exit_codes.get(name, returncode)
        message = stream.loss(code, lambda: self._unreachable(name, returncode))
        if message is None:
            return
        said = self.slurm.get(name)
        if said and said not in message and stream.hello is not None:
            message = f"{message}; {said}"
        task = self.node_task.get(name)
        stderr = "\n".join(self.task_stderr.get(task, ())) if task is not None else ""
        if said:
            stderr = f"{stderr}\n{said}".strip()
        self.runner.node_lost(self.nodes[name], stream.done, message, code, stderr[-4000:],
                              command=self.command())

    def _unreachable(self, name: str, returncode: int | None) -> str:
        said = self.slurm.get(name, "")
        task = self.node_task.get(name)
        stderr = "\n".join([*self.task_stderr.get(task, ()), said] if task is not None else [said])
        if name in self.launch_failed or said.startswith("srun: error: Node failure"):
            return unreachable_words(self.nodes[name].transport, returncode, True, said)
        if stderr.strip():
            return unreachable_words(self.nodes[name].transport, self.exit_codes.get(name, returncode), False, stderr)
        return f"the agent on {name} never reported (its task of the job step wrote nothing; srun exit {returncode})"

    def command(self) -> str:
        """The step's command line, as evidence; a long node list is shortened to its ends and its count."""
        argv = self.step.wrap(self.argv())
        names = list(self.nodes)
        if len(names) > 8:
            argv[argv.index("-w") + 1] = f"{names[0]},...,{names[-1]} ({len(names)} nodes)"
        return shlex.join(argv)

    def _one_step_each(self, names: list[str]) -> None:
        """The per-node path for these nodes: one job step each, `--fanout` at a time."""
        if not names:
            return
        workers = max(1, min(self.runner.plan.fanout, len(names)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent") as pool:
            for future in [pool.submit(self.runner.drive_agent, self.nodes[name]) for name in names]:
                future.result()

