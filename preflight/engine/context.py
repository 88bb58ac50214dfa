"""What a check's collect() gets as `ctx`: where it may write, what ran before it, and how it runs
commands, here or on another node, through the one process layer.

A check never builds a transport and never starts a process itself: `ctx.run`, `ctx.spawn` and, on
the coordinator, `ctx.run_on(node, ...)` / `ctx.spawn_on(node, ...)` do it, and every command they
run is kept as evidence.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Evidence
from preflight.transport.process import CommandTimeout, Completed, Here, RemoteProcess, run_command

OUTPUT_TAIL_CHARS = 4000


class CommandRecorder:
    """Runs commands for a check and keeps each as evidence (command, exit code, output tail)."""

    def __init__(self) -> None:
        self.evidence: list[Evidence] = []

    def record(self, command: list[str] | str, exit_code: int | None, output: str, duration_s: float | None = None) -> None:
        text = command if isinstance(command, str) else shlex.join(command)
        self.evidence.append(
            Evidence(command=text, exit_code=exit_code, output_tail=output[-OUTPUT_TAIL_CHARS:], duration_s=duration_s)
        )

    def run(
        self,
        argv: list[str],
        timeout: float,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        input: str | None = None,
    ) -> Completed:
        """Run argv here (never through a shell), record it, and return the completed process.

        A timeout kills the command and raises CannotMeasure, with what it printed as evidence.
        """
        start = time.monotonic()
        try:
            proc = run_command(argv, timeout, input=input, env=env, cwd=cwd)
        except CommandTimeout as exc:
            self.record(argv, None, exc.output + f"\n[timed out after {timeout:.0f}s]", time.monotonic() - start)
            raise CannotMeasure(f"{argv[0]} did not finish within {timeout:.0f}s") from exc
        except FileNotFoundError as exc:
            self.record(argv, None, str(exc), time.monotonic() - start)
            raise
        self.record(argv, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)
        return proc

    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
              stdin: bool = False) -> RemoteProcess:
        """Start argv here and return it running (its output streamed); stop it with its stop()."""
        return RemoteProcess(Here(), argv, stdin=stdin, guard=False, env=env, cwd=cwd)


@dataclass
class NodeContext(CommandRecorder):
    """What a node check's collect() gets: where it may write, and what ran before it."""

    node: str
    output_dir: Path
    scratch_dir: Path
    expect: Expect
    timeout_s: float
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)  # check id -> facts, same node

    def __post_init__(self) -> None:
        CommandRecorder.__init__(self)
        self._deadline = time.monotonic() + self.timeout_s

    def time_left(self) -> float:
        """Seconds until the runner kills this check; inner timeouts must be shorter."""
        return max(0.0, self._deadline - time.monotonic())


@dataclass
class ClusterContext(CommandRecorder):
    """What a cluster check's collect() gets, on the coordinator.

    `nodes` are the reachable nodes as transport specs (name, address, python, ...); `node_facts`
    holds, per node name, the facts each node check produced in this run; `cluster_facts`, per check
    id, the facts of the cluster checks that finished before this one.
    """

    nodes: list[dict[str, Any]]
    output_dir: Path
    scratch_dir: Path
    expect: Expect
    timeout_s: float
    node_facts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    cluster_facts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        CommandRecorder.__init__(self)
        self._deadline = time.monotonic() + self.timeout_s
        self._transports: dict[str, Any] = {}

    def time_left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    @property
    def node_names(self) -> list[str]:
        return [n["name"] for n in self.nodes]

    def transport(self, node: str) -> Any:
        """The node's transport, rebuilt once from its spec: its python, address and failure rules."""
        if node not in self._transports:
            from preflight.transport import transport_from_spec

            for spec in self.nodes:
                if spec["name"] == node:
                    self._transports[node] = transport_from_spec(spec)
                    break
            else:
                raise KeyError(node)
        return self._transports[node]

    def python_on(self, node: str) -> str:
        """The interpreter that runs preflight on that node."""
        return str(self.transport(node).python)

    def run_on(self, node: str, argv: list[str], timeout: float, input: str | None = None) -> Completed:
        """Run argv on a node through its transport and record it as evidence."""
        transport = self.transport(node)
        wrapped = transport.wrap(argv)
        start = time.monotonic()
        try:
            proc = transport.run(argv, timeout=timeout, input=input)
        except CommandTimeout as exc:
            self.record(wrapped, None, exc.output + f"\n[timed out after {timeout:.0f}s]", time.monotonic() - start)
            raise CannotMeasure(f"{argv[0]} on {node} did not finish within {timeout:.0f}s") from exc
        self.record(wrapped, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)
        return proc

    def spawn_on(self, node: str, argv: list[str], **options: Any) -> RemoteProcess:
        """Start argv on a node (under the guard, see Transport.spawn) and return it running."""
        return self.transport(node).spawn(argv, **options)
