"""The local node: commands run as child processes of the runner."""

from __future__ import annotations

import socket
import sys
from typing import Any

from preflight.transport.base import Transport


class LocalTransport(Transport):
    kind = "local"
    remote = False
    client = "the local shell"

    def __init__(self, name: str | None = None, address: str = "127.0.0.1", python: str | None = None) -> None:
        # The local agent uses the very interpreter the CLI runs in, so a venv is honoured.
        super().__init__(name or socket.gethostname(), address, python or sys.executable)

    def wrap(self, argv: list[str]) -> list[str]:
        return list(argv)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> LocalTransport:
        return cls(spec.get("name"), spec.get("address", "127.0.0.1"), spec.get("python"))
