"""The one place that starts, streams, stops and kills commands (process_fork.py forks this process).

Everything preflight runs on a node goes through `Transport.spawn(argv) -> RemoteProcess`, which is
built on the transport's `wrap(argv)`: the local node, SSH and any other transport that can wrap an
argv get the same behaviour. On the node the command runs under `python -m preflight.workers.guard`,
which forwards stdin, and when its stdin closes (the caller stopped it, the caller died, the ssh
session dropped) ends the command with everything it started: SIGTERM, then SIGKILL. Here, the local
end (ssh, srun, or the guard itself) is ended the same way when it does not go by itself.

Rules this module keeps:
- argv lists only, never a shell;
- every child runs in its own session, so stopping it never touches anything we did not start;
- a stop is: close stdin, wait `grace_s`, SIGTERM the tree, wait, SIGKILL the tree;
- a crash (`stop(hard=True)`) is SIGKILL of the tree at once, as a killed node would see it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Protocol

import psutil

GUARD_MODULE = "preflight.workers.guard"
PID_MARKER = "@@pid "  # "@@pid <guard pid> <command pid> <log dir>", the guard's first line
EXIT_MARKER = "@@exit "  # "@@exit <code>", the guard's last line
# The guard itself waits this long after SIGTERM before SIGKILL.
TERM_GRACE_S = 5.0


def kill_tree(pid: int, grace_s: float = 2.0, *, hard: bool = False) -> bool:
    """SIGTERM, then SIGKILL after `grace_s`, a process and all its descendants (by PID, and its
    process group when it leads one). `hard`: SIGKILL at once. True when something was signalled."""
    try:
        parent = psutil.Process(pid)
        procs = [parent] + parent.children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    leads_group = _leads_group(pid)
    signalled = False
    if not hard:
        if leads_group:
            _signal_group(pid, signal.SIGTERM)
        for proc in procs:
            signalled = _signal(proc, signal.SIGTERM) or signalled
        _, procs = psutil.wait_procs(procs, timeout=grace_s)
    if leads_group:
        _signal_group(pid, signal.SIGKILL)
    for proc in procs:
        signalled = _signal(proc, signal.SIGKILL) or signalled
    # The root may be the caller's child: the caller reaps it (Popen.wait) and keeps its exit status.
    psutil.wait_procs([p for p in procs if p.pid != pid], timeout=grace_s or 5.0)
    return signalled


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc: psutil.Process, sig: int) -> bool:
    try:
        proc.send_signal(sig)
        return True
    except psutil.NoSuchProcess:
        return False


def signal_tree(pid: int, sig: int) -> None:
    """Send `sig` to a process, every descendant, and its process group when it leads one."""
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    if _leads_group(pid):
        _signal_group(pid, sig)
    for proc in procs:
        _signal(proc, sig)


class Escalation:
    """A stop for a loop that polls its children: `begin` sends SIGTERM to each tree (once), and the
    first `poll` `grace_s` after it sends SIGKILL to what is left of them."""

    def __init__(self, pids: list[int], grace_s: float) -> None:
        self.pids, self.grace_s = list(pids), grace_s
        self.term_at: float | None = None
        self.killed = False

    def begin(self, now: float) -> None:
        if self.term_at is None:
            self.term_at = now
            for pid in self.pids:
                signal_tree(pid, signal.SIGTERM)

    def poll(self, now: float) -> None:
        if self.term_at is not None and not self.killed and now >= self.term_at + self.grace_s:
            self.killed = True
            for pid in self.pids:
                signal_tree(pid, signal.SIGKILL)


def kill_session(session_id: int) -> list[int]:
    """SIGKILL every process left in a session we started (daemons a check left behind)."""
    killed = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and os.getsid(proc.pid) == session_id:
                proc.send_signal(signal.SIGKILL)
                killed.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return killed


def kill_children(parent_pid: int) -> list[int]:
    """SIGKILL every child of `parent_pid` at once, the caller too when it is one: all of a node's
    training processes under their launcher, as a lost node ends them. Returns the PIDs signalled."""
    try:
        children = psutil.Process(parent_pid).children()
    except psutil.NoSuchProcess:
        return []
    mine = [c for c in children if c.pid == os.getpid()]
    others = [c for c in children if c.pid != os.getpid()]
    killed = [c.pid for c in others if _signal(c, signal.SIGKILL)]
    if mine:
        os.kill(os.getpid(), signal.SIGKILL)
    return killed


def kill_matching(pid: int, accept: Callable[[psutil.Process], bool]) -> bool:
    """SIGKILL `pid` and its descendants, but only while `accept(process)` says it is still ours
    (a PID that exited may have been reused by something else)."""
    try:
        proc = psutil.Process(pid)
        if not accept(proc):
            return False
    except psutil.Error:
        return False
    return kill_tree(pid, hard=True)


Completed = subprocess.CompletedProcess


class CommandTimeout(Exception):
    """A command run with run_command() did not finish in time; it was killed. `output` is what it printed."""

    def __init__(self, argv: list[str], timeout: float, output: str) -> None:
        super().__init__(f"{argv[0] if argv else 'command'} did not finish within {timeout:.0f}s")
        self.argv, self.timeout, self.output = list(argv), timeout, output


def run_command(argv: list[str], timeout: float, *, input: str | None = None, env: dict[str, str] | None = None,
                cwd: Any = None) -> Completed:
    """Run argv here (never through a shell) to its end, at most `timeout` seconds; its output as text.

    A timeout kills the command and raises CommandTimeout with what it printed; a missing program
    raises FileNotFoundError. stdin is closed unless `input` is given.
    """
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              env={**os.environ, **env} if env else None, cwd=cwd, errors="replace")
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeout(argv, timeout, _text(exc.stdout) + _text(exc.stderr)) from None


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


class Reach(Protocol):
    """What a process started on a node needs of the transport that reaches it: every Transport
    (preflight.transport.base) and Here below."""

    python: str  # the interpreter that runs preflight's programs there (the guard)
    remote: bool  # False for this machine: a stop needs no second command there

    def wrap(self, argv: list[str]) -> list[str]: ...

    def is_transport_failure(self, returncode: int) -> bool: ...


class Here:
    """The local end as a process target: commands run as they are, with this interpreter.

    What RemoteProcess needs of a transport (wrap, python, remote, is_transport_failure), for the
    children the runner and the agent start on their own machine.
    """

    remote = False

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def wrap(self, argv: list[str]) -> list[str]:
        return list(argv)

    def is_transport_failure(self, returncode: int) -> bool:
        return False


TIMEOUT = object()  # what RemoteProcess.next_line returns when no line came in time


class RemoteProcess:
    """A command started on a node through its transport: its output read as it comes, its stdin
    writable, and a stop that leaves nothing behind.

    `lines` and `stderr_lines` grow as the command prints; the guard's own markers are kept out of
    `lines` and read into `guard_pids` and `exit_code`. With `keep_output=False` (a long stream read
    with next_line, such as a job step across 1,000 nodes) the lines next_line has returned are let go
    of, and `raw_lines` stays empty.
    """

    def __init__(self, transport: Reach, argv: list[str], *, stdin: bool = False, guard: bool = True,
                 env: dict[str, str] | None = None, cwd: str | None = None, pass_fds: tuple[int, ...] = (),
                 grace_s: float = 0.0, life_s: float | None = None, new_session: bool = True,
                 keep_output: bool = True) -> None:
        self.transport = transport
        self.argv = list(argv)
        self.guarded = guard
        self.keep_output = keep_output
        self.grace_s = grace_s
        if guard:
            node_argv = [transport.python, "-m", GUARD_MODULE, "--grace", f"{grace_s:g}"]
            if stdin:
                node_argv.append("--stdin")
            if life_s is not None:
                node_argv += ["--life", f"{life_s:g}"]
            node_argv += ["--", *argv]
        else:
            node_argv = list(argv)
        self.command = transport.wrap(node_argv)
        self.started = time.monotonic()
        self.ended_at: float | None = None
        self.lines: list[str] = []
        self.raw_lines: list[str] = []  # stdout as printed, the guard's markers included
        self.stderr_lines: list[str] = []
        self.guard_pids: dict[str, Any] = {}
        self.exit_code: int | None = None  # the command's, as the guard reported it
        self.stopped = False  # ended by stop(), not by itself
        self.stop_requested_at: float | None = None
        self.changed = threading.Condition()
        self._cursor = 0
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE if stdin or guard else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, errors="replace",
            env={**os.environ, **env} if env else None, cwd=cwd, pass_fds=pass_fds,
            start_new_session=new_session,
        )
        self.pid = self.proc.pid
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    # -- output ----------------------------------------------------------------------------------

    def _read(self, stream: Any, is_stdout: bool) -> None:
        for line in stream:
            line = line.rstrip("\n")
            with self.changed:
                if is_stdout and self.keep_output:
                    self.raw_lines.append(line)
                if is_stdout and self.guarded and line.startswith(PID_MARKER) and not self.guard_pids:
                    parts = line.split()
                    if len(parts) >= 3:
                        self.guard_pids = {"guard": int(parts[1]), "command": int(parts[2]),
                                           "log_dir": parts[3] if len(parts) > 3 and parts[3] != "-" else ""}
                elif is_stdout and self.guarded and line.startswith(EXIT_MARKER):
                    try:
                        self.exit_code = int(line.split()[1])
                    except (IndexError, ValueError):
                        pass
                else:
                    (self.lines if is_stdout else self.stderr_lines).append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def output_done(self) -> bool:
        """True once stdout reached its end (the command and everything holding its stdout ended)."""
        return not self._readers[0].is_alive()

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until predicate() holds (re-checked on every line), at most `timeout`; its last value."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not any(r.is_alive() for r in self._readers)):
                    return predicate()
                self.changed.wait(min(left, 0.2))
            return True

    def next_line(self, timeout: float) -> Any:
        """The next stdout line; None at the end of the output; TIMEOUT when none came in time."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self._cursor >= len(self.lines):
                if self.output_done():
                    if self._cursor < len(self.lines):
                        break
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return TIMEOUT
                self.changed.wait(min(left, 0.2))
            line = self.lines[self._cursor]
            self._cursor += 1
            if not self.keep_output and self._cursor >= 1024:
                del self.lines[:self._cursor]  # read: let go of them (a few at a time, not one by one)
                self._cursor = 0
            return line

    def join(self, timeout: float = 5.0) -> None:
        """Wait for the readers to reach the end of the output (after the process ended)."""
        for reader in self._readers:
            reader.join(timeout=timeout)

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    def output(self) -> str:
        return "\n".join(self.lines + self.stderr_lines)

    # -- state -----------------------------------------------------------------------------------

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.ended_at is None:
            self.ended_at = time.monotonic()
        return code

    def running(self) -> bool:
        return self.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def duration_s(self) -> float:
        return (self.ended_at or time.monotonic()) - self.started

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None when it is still running after `timeout`."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.poll()
        return code

    def transport_failed(self) -> bool:
        """The transport, not the command, failed: it exited with its own failure code (ssh's 255)
        without the guard reporting the command's end."""
        code = self.proc.returncode
        return code is not None and self.transport.is_transport_failure(code) and self.exit_code is None

    # -- input -----------------------------------------------------------------------------------

    def write(self, text: str) -> bool:
        """Write to the command's stdin; False when it is closed."""
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError, AttributeError):
            return False

    def close_stdin(self) -> None:
        """The command (through the guard) sees end-of-file: the guard then ends it."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    # -- stopping --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the command to end (close its stdin) without waiting."""
        if self.stop_requested_at is not None or not self.running():
            return
        self.stopped = True
        self.stop_requested_at = time.monotonic()
        self.close_stdin()

    def stop(self, grace_s: float | None = None, *, hard: bool = False) -> int | None:
        """End the command and everything it started; returns the local end's exit status.

        Close stdin; when it has not ended within `grace_s` (default: the guard's grace plus its
        TERM-to-KILL time), kill what the guard recorded by PID on the node, then the local end's
        tree (SIGTERM, then SIGKILL). `hard`: SIGKILL the tree at once, as a crash would.
        """
        if hard:
            if self.running():
                self.stopped = True
                kill_tree(self.pid, hard=True)
            self.close_stdin()
            self.wait(10)
            self.join()
            return self.returncode
        if self.running():
            self.request_stop()
            wait_s = grace_s if grace_s is not None else (
                self.grace_s + TERM_GRACE_S + 2.0 if self.guarded else 2.0)
            if self.wait(wait_s) is None:
                self.force_stop()
        self.close_stdin()
        self.join()
        return self.returncode

    def force_stop(self) -> None:
        """Kill by PID on the node what the guard did not end, then the local end's tree."""
        if not self.running():
            return
        self.stopped = True
        if self.guarded and self.guard_pids and self.transport.remote:
            argv = [self.transport.python, "-m", GUARD_MODULE, "--kill", str(self.guard_pids["guard"]),
                    str(self.guard_pids["command"]), self.guard_pids.get("log_dir") or "-", "--",
                    *command_identity(self.argv)]
            try:
                run_command(self.transport.wrap(argv), timeout=15)
            except (CommandTimeout, OSError):
                pass
        kill_tree(self.pid)
        self.wait(10)


def command_identity(argv: list[str]) -> list[str]:
    """How the process of `argv` shows its command line (`env K=V prog` runs as `prog`): the first
    three words, which a kill by PID checks before it trusts that the PID is still ours. Pure."""
    words = list(argv)
    if words[:1] == ["env"]:
        words = words[1:]
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]
    return words[:3]


