"""The process layer's other half (process.py starts commands): a function of this process's memory
run in a forked child on another core, its bytes handed back through a pipe.

Fork only where it is safe: call `Forked` from a process that runs one thread (a lock another thread
held at the fork would stay held in the child). The child ends through posix._exit, never os._exit,
which a command may have turned into a SystemExit (preflight.cli.options.exit_with_verdict): raised in
the child, that would run the rest of the command a second time.
"""

from __future__ import annotations

import os
import posix
import select
import signal
import time
from typing import Callable


class Forked:
    """`make()` run in a forked child; `result()` is what it returned, or None when the child failed,
    died, ended before it wrote it all, or took longer than `timeout_s` (then it is killed, by its PID)."""

    def __init__(self, make: Callable[[], bytes], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = 1
            try:
                os.close(read)
                # A Ctrl-C or a TERM to the run's process group ends this child as it would any program.
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                data = make()
                with os.fdopen(write, "wb") as out:
                    out.write(len(data).to_bytes(8, "big"))  # so that a child cut short is told apart
                    out.write(data)
                status = 0
            finally:
                posix._exit(status)
        os.close(write)
        self.pid: int | None = pid
        self._read: int | None = read

    def result(self) -> bytes | None:
        deadline = time.monotonic() + self.timeout_s
        chunks: list[bytes] = []
        try:
            while self._read is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if select.select([self._read], [], [], left)[0]:
                    chunk = os.read(self._read, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
            assert self.pid is not None
            _, status = os.waitpid(self.pid, 0)
            self.pid = None
            data = b"".join(chunks)
            whole = len(data) >= 8 and int.from_bytes(data[:8], "big") == len(data) - 8
            return data[8:] if whole and os.waitstatus_to_exitcode(status) == 0 else None
        finally:
            self.stop()

    def stop(self) -> None:
        """Close the pipe; a child still at work is killed, and every child is waited for."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None
