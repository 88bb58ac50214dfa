"""The transport interface."""

from __future__ import annotations

import subprocess
from typing import Any


class TransportError(Exception):
    """The node could not be reached (as opposed to a command on it failing)."""


class Transport:
    kind = "base"

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

    def run(self, argv: list[str], timeout: float, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.wrap(argv), capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        # Own process group, so the runner can end the whole tree it started and nothing else.
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.wrap(argv), **kwargs)

    def connect(self, timeout: float | None = None) -> None:
        """Make sure the node can be reached; raise TransportError with the reason when it cannot."""

    def close(self) -> None:
        """Release what the transport holds (an ssh master connection); safe to call twice."""

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "address": self.address, "python": self.python}
