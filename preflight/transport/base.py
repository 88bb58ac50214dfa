"""The transport interface."""

from __future__ import annotations

from typing import Any

from preflight.transport.process import CommandTimeout, Completed, RemoteProcess, run_command


class TransportError(Exception):
    """The node could not be reached (as opposed to a command on it failing)."""


class Transport:
    kind = "base"
    remote = True  # False for the node preflight itself runs on: its files are the coordinator's
    client = "the transport"  # the program that reaches the node, for messages ("ssh", "srun")

    def __init__(self, name: str, address: str, python: str = "python3") -> None:
        self.name = name  # how the node is shown in reports
        self.address = address  # how other nodes reach this one (iperf3, rendezvous)
        self.python = python  # the interpreter that runs preflight on the node

    def wrap(self, argv: list[str]) -> list[str]:
        """An argv to run here that runs `argv` on the node."""
        raise NotImplementedError

    def is_transport_failure(self, returncode: int) -> bool:
        """True when a non-zero exit means the node was not reached (ssh's 255), not a failed command."""
        return False

    def run(self, argv: list[str], timeout: float, input: str | None = None) -> Completed:
        """Run argv on the node to its end; CommandTimeout after `timeout` (the process layer's)."""
        return run_command(self.wrap(argv), timeout, input=input)

    def unreachable(self, returncode: int, text: str) -> str:
        """What a transport failure (is_transport_failure) says, in this transport's own words."""
        return f"{self.name} could not be reached ({self.client} exit {returncode}): {text}"

    def spawn(self, argv: list[str], *, stdin: bool = False, guard: bool = True, env: dict[str, str] | None = None,
              cwd: str | None = None, pass_fds: tuple[int, ...] = (), grace_s: float = 0.0,
              life_s: float | None = None) -> RemoteProcess:
        """Start `argv` on the node and return it running, its output streamed as it comes.

        Built on `wrap()` alone, so every transport that can wrap an argv gets it. With `guard`
        (the default) the command runs under `python -m preflight.workers.guard` on the node, which
        ends it with everything it started when its stdin closes (`RemoteProcess.stop()`, a dead
        caller, a dropped connection) or after `life_s`; `stdin` forwards what is written to the
        command. `env`, `cwd` and `pass_fds` apply to the local end (for the local node: the
        command itself). Without `guard`, `stop()` can end only what runs here.
        """
        return RemoteProcess(self, argv, stdin=stdin, guard=guard, env=env, cwd=cwd, pass_fds=pass_fds,
                             grace_s=grace_s, life_s=life_s)

    def _connect_with_true(self, limit: float, *, client: str, binary: str, no_answer: str, failed: str,
                           last_line: bool = False) -> None:
        """Run `true` on the node through wrap(); TransportError in the client's own words when it fails.

        `no_answer` and `failed` say what did not happen ("ssh to gpu01 did not answer"); the time limit
        or the client's message follows them.
        """
        try:
            proc = run_command(self.wrap(["true"]), limit)
        except CommandTimeout as exc:
            raise TransportError(f"{no_answer} within {limit:.0f}s") from exc
        except FileNotFoundError as exc:
            raise TransportError(f"no {client} client: {binary!r} is not installed") from exc
        if proc.returncode != 0:
            words = proc.stderr.strip()
            if words and last_line:
                words = words.splitlines()[-1]
            raise TransportError(f"{failed}: {words or f'{client} exited {proc.returncode}'}")

    def connect(self, timeout: float | None = None) -> None:
        """Make sure the node can be reached; raise TransportError with the reason when it cannot."""

    def close(self) -> None:
        """Release what the transport holds (an ssh master connection); safe to call twice."""

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "address": self.address, "python": self.python}
