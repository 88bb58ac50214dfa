"""Run one command on a node and end it, with everything it started, when told to.

    python -m preflight.workers.guard [--stdin] [--grace S] [--life S] -- COMMAND...
    python -m preflight.workers.guard --kill GUARD_PID COMMAND_PID LOG_DIR -- EXPECTED_ARGV_START...

`preflight.transport.process.RemoteProcess` starts every command on a node under this program, through the
node's transport (a local child, ssh, srun):
- `{log_dir}` anywhere inside an argument becomes the guard's private directory, removed at the end;
  an argument starting with `~/` gets the home directory (a per-host `python=~/venv/bin/python`);
- prints `@@pid <guard pid> <command pid> <log dir or ->` once the command runs;
- the command runs in its own session; with `--stdin` it reads what the caller writes, else
  /dev/null. When the guard's stdin reaches its end (the caller closed it, the caller died, the ssh
  session dropped), the command's stdin is closed, and `--grace` seconds later the command's whole
  tree gets SIGTERM, then SIGKILL 5 s after that; the same after `--life` seconds, and on SIGTERM
  or SIGHUP to the guard. If the guard itself is killed, the command gets SIGTERM from the kernel;
- once the command has ended, whatever is left in its session is killed, the torchelastic error
  files its workers wrote are printed (`@@error-file <local rank> <json>`), the log directory
  removed, and `@@exit <code>` printed (128 + signal for a signal, as a shell reports it).

`--kill` is the last resort when the guard did not answer: it kills the command's tree, only while
the command line still starts as expected, then the guard, and removes the log directory.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

LOG_DIR_PLACEHOLDER = "{log_dir}"
LOG_DIR_PREFIX = "preflight-torchrun."
PR_SET_PDEATHSIG = 1


def expand(argv: list[str], log_dir: str | None) -> list[str]:
    """The command with `{log_dir}` (anywhere in an argument) and a leading `~/` filled in. Pure."""
    out = []
    for arg in argv:
        if log_dir is not None and LOG_DIR_PLACEHOLDER in arg:
            arg = arg.replace(LOG_DIR_PLACEHOLDER, log_dir)
        if arg.startswith("~/"):
            arg = os.path.join(os.path.expanduser("~"), arg[2:])
        out.append(arg)
    return out


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def report_error_files(log_dir: str) -> None:
    """Print the torchelastic error files the command's workers left ("@@error-file LOCAL_RANK JSON"):
    torchrun points each worker's TORCHELASTIC_ERROR_FILE at <log dir>/<run>/attempt_N/<local rank>/error.json."""
    import json

    from preflight.workers import wire

    for root, _, files in os.walk(log_dir):
        if "error.json" not in files:
            continue
        try:
            with open(os.path.join(root, "error.json"), encoding="utf-8", errors="replace") as handle:
                content = json.load(handle)
        except (OSError, ValueError):
            continue
        say(f"@@error-file {os.path.basename(root)} {wire.dumps(content)}")


def say(line: str) -> None:
    """One line of the guard's own (`@@...`) in one write to the stdout it shares with the command: print()
    writes a text and its newline apart when Python's output is unbuffered (PYTHONUNBUFFERED, set in many
    images), and the command's output then lands inside the line (`@@pid 1 2 /tmp/dir<its output>`)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stdout that is no file (captured): one write to it
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    sys.stdout.flush()
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def guard(argv: list[str], *, forward_stdin: bool, grace_s: float, life_s: float | None) -> int:
    from preflight.transport.process import TERM_GRACE_S, Escalation, kill_session

    # A private directory for the command's logs (torchrun --log-dir), removed when it ends.
    log_dir = tempfile.mkdtemp(prefix=LOG_DIR_PREFIX)
    stop = threading.Event()
    try:
        child = subprocess.Popen(expand(argv, log_dir), stdin=subprocess.PIPE if forward_stdin else subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr, flush=True)
        shutil.rmtree(log_dir, ignore_errors=True)
        say("@@exit 127")
        return 127
    say(f"@@pid {os.getpid()} {child.pid} {log_dir}")

    def watch_stdin() -> None:
        while True:
            try:
                chunk = os.read(0, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            if child.stdin is not None:
                try:
                    child.stdin.write(chunk)
                    child.stdin.flush()
                except (BrokenPipeError, OSError, ValueError):
                    pass
        if child.stdin is not None:
            try:
                child.stdin.close()
            except OSError:
                pass
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, daemon=True).start()
    deadline = time.monotonic() + life_s if life_s is not None else None
    stop_at: float | None = None
    stopping = Escalation([child.pid], TERM_GRACE_S)
    while child.poll() is None:
        now = time.monotonic()
        if stop_at is None and (stop.is_set() or (deadline is not None and now >= deadline)):
            stop_at = now + grace_s
        if stop_at is not None and now >= stop_at:
            stopping.begin(now)
        stopping.poll(now)
        try:
            child.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    kill_session(child.pid)
    code = child.returncode
    code = 128 - code if code < 0 else code
    try:
        report_error_files(log_dir)
        say(f"@@exit {code}")
    except OSError:
        pass  # nobody is reading any more (the ssh session dropped): the exit status still says it
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return code


def kill(guard_pid: int, command_pid: int, log_dir: str, expected: list[str]) -> None:
    """Kill the command's tree while its command line still starts as expected, then the guard."""
    from preflight.transport.process import kill_matching

    wanted = expand(expected, None)
    kill_matching(command_pid, lambda p: p.cmdline()[:len(wanted)] == wanted)
    kill_matching(guard_pid, lambda p: GUARD_MODULE_NAME in " ".join(p.cmdline()))
    if log_dir and log_dir != "-" and os.path.basename(log_dir).startswith(LOG_DIR_PREFIX):
        shutil.rmtree(log_dir, ignore_errors=True)


GUARD_MODULE_NAME = "preflight.workers.guard"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.guard")
    parser.add_argument("--stdin", action="store_true", help="forward stdin to the command")
    parser.add_argument("--grace", type=float, default=0.0,
                        help="seconds between the end of stdin and SIGTERM to the command")
    parser.add_argument("--life", type=float, default=None, help="end the command after this many seconds")
    parser.add_argument("--kill", nargs=3, metavar=("GUARD_PID", "COMMAND_PID", "LOG_DIR"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.kill:
        kill(int(args.kill[0]), int(args.kill[1]), args.kill[2], command)
        return 0
    if not command:
        parser.error("no command given")
    return guard(command, forward_stdin=args.stdin, grace_s=args.grace, life_s=args.life)


if __name__ == "__main__":
    sys.exit(main())
