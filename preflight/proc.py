"""Start a child that reads a JSON job and prints a JSON result, under a timeout; kill its whole tree.

Both the agent (one child per node check) and the runner (one child per cluster check) use this.
Children run in their own session so that killing them never touches anything we did not start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass
class ChildOutcome:
    result: dict[str, Any] | None
    returncode: int | None
    stderr_tail: str
    timed_out: bool
    duration_s: float


def kill_tree(pid: int, grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL, a process and all its descendants (by PID, and its process group)."""
    try:
        parent = psutil.Process(pid)
        procs = [parent] + parent.children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    # The child leads its own session: its group holds grandchildren that were re-parented too.
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def run_json_child(module: str, job: dict[str, Any], timeout: float, python: str | None = None,
                   on_start: Any = None) -> ChildOutcome:
    """Run `python -m module` with job on stdin; return its last stdout line parsed as JSON."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [python or sys.executable, "-m", module],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    if on_start:
        on_start(proc)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(json.dumps(job), timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
    # A check that exits may leave daemons in its session; they are ours to end.
    _kill_session_leftovers(proc.pid)
    result = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            result = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    return ChildOutcome(result, proc.returncode, stderr[-4000:], timed_out, time.monotonic() - start)


def _kill_session_leftovers(session_id: int) -> None:
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == session_id:
                proc.kill()
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
