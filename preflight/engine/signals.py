"""SIGINT and SIGTERM, however many arrive and however close together.

CI cancels a job with SIGTERM, often more than once; a person presses Ctrl-C twice. The first
signal stops the run where the run can take it (a KeyboardInterrupt inside `Interrupts.armed()`, the
runner's own window); every later one is only counted. Before the run starts (loading plugins,
reading the config and the hosts file, resolving names), nothing has run and nothing is to be
reported: the first signal ends the command at once with exit 130 and a line saying nothing ran,
whatever it was parsing. After the run a signal marks the report interrupted before any report is
written. So reports are
written once, say they were interrupted, and the exit code is 130; never a second
KeyboardInterrupt out of a cleanup, never click's "Aborted!" with exit 1.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_INTERRUPTED = 130


class Interrupts:
    def __init__(self) -> None:
        self.count = 0
        self.raised = False
        self._armed = False
        self._preparing = False  # inside handling(), before the run's window first opens

    @contextmanager
    def handling(self) -> Iterator[Interrupts]:
        """Take over SIGINT and SIGTERM for the block (main thread only); the old handlers come back after,
        unless a signal was received: then the command is ending with exit 130, and a later signal
        (a CI runner sends several, seconds apart) must not turn that exit into a death by signal
        while the interpreter shuts down, so the handler stays, and only counts."""
        self.count, self.raised, self._armed = 0, False, False
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            signal.signal(signum, self._handle)
        self._preparing = True
        try:
            yield self
        finally:
            self._armed = self._preparing = False
            if self.count:
                self.raised = True  # nothing raises any more: the handler only counts
                # The handler counts while Python runs; when the interpreter shuts down it puts back
                # the default action of every signal it handled, and a SIGTERM then would still end
                # the process by signal (-15, not 130). From the exit handlers on, these are ignored.
                atexit.register(ignore_from_now)
            else:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
                self.count, self.raised = 0, False

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self._preparing and not self.raised:
            self.raised = True
            self._preparing = False
            sys.stderr.write(f"preflight: interrupted ({signal.Signals(signum).name}) before the run started: "
                             "nothing ran\n")
            raise SystemExit(EXIT_INTERRUPTED)
        if self._armed and not self.raised:
            self.raised = True
            raise KeyboardInterrupt

    @contextmanager
    def armed(self) -> Iterator[None]:
        """The window in which the first signal stops the run with a KeyboardInterrupt."""
        self._armed, self._preparing = True, False
        try:
            if self.count and not self.raised:  # one came before the window opened
                self.raised = True
                raise KeyboardInterrupt
            yield
        finally:
            self._armed = False

    @property
    def received(self) -> bool:
        return self.count > 0


def ignore_from_now() -> None:
    """The command is ending with exit 130: SIGINT and SIGTERM can no longer change how it ends."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


# The one instance of the process: `preflight run` takes the signals with it, the runner arms it around its run.
INTERRUPTS = Interrupts()
