"""Interrupts: the first signal in the armed window stops the run; none after it can kill the process."""

import os
import signal

import pytest

from preflight.engine.signals import SIGNALS, Interrupts


@pytest.fixture
def restored_handlers():
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_without_a_signal_the_old_handlers_come_back(restored_handlers):
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    interrupts = Interrupts()
    with interrupts.handling():
        assert all(signal.getsignal(signum) != before[signum] for signum in SIGNALS)
    assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before


def test_after_an_interrupted_block_later_signals_are_only_counted(restored_handlers):
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        with interrupts.handling():
            with interrupts.armed():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs at the next bytecode boundary
                    pass
    # The command is ending with exit 130: a CI runner's second and third SIGTERM arrive now.
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass
    assert interrupts.count == 3 and interrupts.received


def test_a_signal_before_the_run_starts_ends_the_command_at_once(restored_handlers):
    import time

    interrupts = Interrupts()
    start = time.monotonic()
    with pytest.raises(SystemExit) as caught:
        with interrupts.handling():
            os.kill(os.getpid(), signal.SIGTERM)
            while time.monotonic() - start < 30:  # parsing something very long
                pass
    assert caught.value.code == 130 and time.monotonic() - start < 5
    os.kill(os.getpid(), signal.SIGINT)  # a second one: counted, never raised again
    for _ in range(1000):
        pass
    assert interrupts.count == 2


def test_once_the_run_has_started_a_signal_stops_it_inside_the_window(restored_handlers):
    interrupts = Interrupts()
    with interrupts.handling():
        with interrupts.armed():
            pass
        os.kill(os.getpid(), signal.SIGINT)  # after the run: counted, the reports say interrupted
        for _ in range(1000):
            pass
        assert interrupts.count == 1 and interrupts.received


SHUTDOWN_SCRIPT = r'''
import os, signal, subprocess, sys, time
from preflight.engine.signals import Interrupts

# A helper that sends SIGTERM once told to, while the interpreter is tearing its modules down.
read_end, write_end = os.pipe()
helper = subprocess.Popen(["sh", "-c", "read line; kill -TERM %d" % os.getpid()], stdin=read_end)
os.close(read_end)


class SlowToFinalize:
    def __del__(self, write=os.write, fd=write_end, sleep=time.sleep):
        write(fd, b"now\n")
        sleep(1.0)  # the SIGTERM lands here, after the interpreter put back the default handlers


kept_until_shutdown = SlowToFinalize()
interrupts = Interrupts()
with interrupts.handling():
    try:
        with interrupts.armed():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    except KeyboardInterrupt:
        pass
    sys.exit(130)
'''


def test_a_signal_while_the_interpreter_shuts_down_leaves_exit_130(tmp_path):
    # A CI runner's later SIGTERM can arrive after the exit handlers ran; the process still exits 130.
    import subprocess
    import sys

    script = tmp_path / "shutdown.py"
    script.write_text(SHUTDOWN_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    proc = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
