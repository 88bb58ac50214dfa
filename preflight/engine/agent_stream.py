"""One node's agent as the coordinator hears it: its lines read one at a time, whichever way they came.

An agent started on its own (one process per node: local, ssh, a job step per node) and an agent
that is one task of a job step across the allocation (its lines picked out of the step's output by
task) are read the same way: `feed(line)` turns each line of the agent protocol into the runner's
events, and what the stream said (its hello, the check it is on, DONE or a line nobody can read)
decides how the node's unfinished checks end.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import preflight
from preflight.core.check import Check
from preflight.core.model import CheckResult
from preflight.engine.agent import DONE, HELLO, RESULT, START
from preflight.engine.protocol import Event, NodeReached, Result, Started

Put = Callable[[Event], None]


class AgentStream:
    """What one node's agent has said so far. Events go to `put`: NodeReached once it says hello,
    Started for each check it starts, Result with the node named as the user named it."""

    def __init__(self, node: str, checks: list[type[Check]], put: Put) -> None:
        self.node = node
        self.checks = checks
        self.put = put
        self.done: set[str] = set()
        self.hello: dict[str, Any] | None = None
        self.current: str | None = None
        self.finished = False  # it said DONE
        self.problem: str | None = None  # why it stopped being listened to (silent, garbled)
        self.ended = False  # nothing more is read from it
        self.last_line_at = time.monotonic()

    @property
    def version_ok(self) -> bool:
        return self.hello is not None and self.hello.get("version") == preflight.__version__

    @property
    def completed(self) -> bool:
        """It ran to its end and told everything: nothing of it is lost."""
        return self.finished and self.version_ok and self.problem is None

    def feed(self, line: str) -> bool:
        """Read one line; True when the stream has ended (DONE, another preflight version, a bad line)."""
        self.last_line_at = time.monotonic()
        try:
            if line.startswith(HELLO):
                self.hello = json.loads(line[len(HELLO):])
                if not self.version_ok:
                    return self._end()
                self.put(NodeReached(self.node))
            elif line.startswith(START):
                self.current = line[len(START):].strip()
                self.put(Started(self.node, self.current))
            elif line.startswith(RESULT):
                result = CheckResult.from_dict(json.loads(line[len(RESULT):]))
                result.node = self.node  # the name the user wrote, whatever the node calls itself
                self.done.add(result.check_id)
                self.current = None
                self.put(Result(result))
            elif line.strip() == DONE:
                self.finished = True
                return self._end()
        except (ValueError, KeyError, TypeError) as exc:
            self.problem = (f"the agent on {self.node} sent a line preflight cannot read ({type(exc).__name__}: "
                            f"{exc}): {line[:200]!r}")
            return self._end()
        return False

    def _end(self) -> bool:
        self.ended = True
        return True

    def silent(self, limit_s: float) -> None:
        """It wrote nothing for `limit_s`: it is stopped and no longer listened to."""
        during = f" while running {self.current}" if self.current else ""
        self.problem = f"the agent on {self.node} wrote nothing for {limit_s:.0f}s{during}; it was stopped"
        self.ended = True

    def line_limit(self, timeout_for: Callable[[type[Check]], float], grace_s: float) -> float:
        """How long it may stay silent: the timeout of the check it is on, plus a grace."""
        left = [c for c in self.checks if c.id not in self.done]
        return (timeout_for(left[0]) if left else 0.0) + grace_s

    def loss(self, exit_code: int | None, unreachable: Callable[[], str]) -> str | None:
        """Why the node's unfinished checks are ERROR, or None when nothing of it was lost.

        `exit_code`: how the agent's process ended, as far as it is known; `unreachable()`: what to
        say when it never said hello (the transport's words)."""
        if self.completed:
            return None
        if self.problem is not None:
            return self.problem
        if self.hello is not None and not self.version_ok:
            return (f"{self.node} runs preflight {self.hello.get('version')} ({self.hello.get('python')}), the "
                    f"coordinator {preflight.__version__}: install preflight-cluster {preflight.__version__} on every node")
        if self.hello is None:
            return unreachable()
        during = f" while running {self.current}" if self.current else ""
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return f"lost contact with {self.node}{during}{code}"


# How each transport reaches a node, in a sentence: "cannot reach gpu[01-02] over SSH".
TRANSPORT_WORDS = {"ssh": "SSH", "k8s": "the Kubernetes API", "slurm": "srun", "slurm-step": "a Slurm job step"}


def unreachable_words(transport: Any, returncode: int | None, transport_failed: bool, stderr: str) -> str:
    """Why an agent never said hello, in its transport's words and its own last line of stderr."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if transport_failed:
        over = TRANSPORT_WORDS.get(getattr(transport, "kind", ""), "")
        return f"cannot reach {transport.name}{' over ' + over if over else ''}: {last or 'connection failed'}"
    if "No module named" in stderr and "preflight" in stderr:
        return (f"preflight is not installed for {transport.python} on {transport.name}: install "
                f"preflight-cluster {preflight.__version__} there, run with --ship, or point --remote-python at "
                "an interpreter that has it")
    if returncode == 127 or "not found" in last:
        return f"{transport.python} was not found on {transport.name}: {last}"
    return f"the agent on {transport.name} exited with code {returncode} before starting: {last}"
