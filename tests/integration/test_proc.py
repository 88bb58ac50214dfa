"""The process layer: Transport.spawn -> RemoteProcess, on the local node (the same code runs over
ssh in tests/cluster/test_ssh_real.py). A stop is: close stdin, then SIGTERM, then SIGKILL, of the
whole tree, including a grandchild that ignores SIGTERM; nothing is left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil

from preflight.transport.process import TIMEOUT, Escalation, command_identity
from preflight.core.jsonlines import last_json
import preflight
from preflight.core.model import Status
from preflight.core.registry import discover
from preflight.engine.child import run_check, run_json_child
from preflight.engine.agent import DONE, HELLO, RESULT, START
from preflight.engine.protocol import CheckJob, CheckSpec, NodeJob
from preflight.transport.local import LocalTransport
from tests.conftest import pids_alive

# Starts a grandchild that ignores SIGTERM, prints both PIDs, then waits forever.
STUBBORN = (
    "import os, signal, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\nwhile True: time.sleep(1)'])\n"
    "print(os.getpid(), child.pid, flush=True)\n"
    "while True: time.sleep(1)\n"
)


def test_stop_ends_the_whole_tree_even_what_ignores_sigterm():
    process = LocalTransport().spawn([sys.executable, "-c", STUBBORN])
    line = process.next_line(30)
    assert line not in (None, TIMEOUT)
    pids = [int(p) for p in line.split()] + [process.guard_pids["guard"]]
    assert pids_alive(pids) == pids
    start = time.monotonic()
    process.stop()
    assert pids_alive(pids) == []
    assert time.monotonic() - start < 15
    # The command ended on SIGTERM; its grandchild, which ignores it, went with its session.
    assert process.stopped and process.exit_code == 128 + signal.SIGTERM
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in psutil.Process().children())


def test_closing_stdin_lets_a_command_that_reads_it_end_by_itself():
    echo = "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)"
    process = LocalTransport().spawn([sys.executable, "-c", echo], stdin=True, grace_s=10)
    assert process.write("hello\n")
    assert process.next_line(30) == "HELLO"
    process.close_stdin()
    assert process.wait(30) == 0 and process.exit_code == 0 and not process.stopped
    assert process.next_line(1) is None  # the end of the output


def test_next_line_times_out_and_a_hard_stop_is_sigkill_at_once():
    process = LocalTransport().spawn([sys.executable, "-c", "import time; time.sleep(60)"], guard=False)
    assert process.next_line(0.3) is TIMEOUT
    process.stop(hard=True)
    assert process.returncode == -signal.SIGKILL and pids_alive([process.pid]) == []


def test_run_json_child_reads_the_last_json_line_and_kills_what_outlives_its_timeout(tmp_path, monkeypatch):
    (tmp_path / "echojob.py").write_text("import json, sys\njob = json.load(sys.stdin)\nprint('noise')\n"
                                         "print(json.dumps({'got': job}))\n")
    (tmp_path / "hangjob.py").write_text("import os, subprocess, sys, time\n"
                                         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                                         "open(os.environ['PID_FILE'], 'w').write(f'{os.getpid()} {child.pid}')\n"
                                         "time.sleep(600)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PID_FILE", str(tmp_path / "pids"))
    outcome = run_json_child("echojob", {"a": 1}, timeout=30)
    assert outcome.result == {"got": {"a": 1}} and outcome.returncode == 0 and not outcome.timed_out
    start = time.monotonic()
    hung = run_json_child("hangjob", {}, timeout=2)
    assert hung.timed_out and hung.result is None and time.monotonic() - start < 10
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids_alive(pids) == []


def _sleep_job(tmp_path, timeout_s: float, seconds: float) -> CheckJob:
    return CheckJob(check_id="example.sleep", node="local", output_dir=str(tmp_path), timeout_s=timeout_s,
                    params={"seconds": seconds, "pid_file": str(tmp_path / "pids")})


def test_run_check_gives_the_result_or_error_for_a_check_that_timed_out_or_died(tmp_path):
    check = discover(only={"example.sleep"}).get("example.sleep")
    done = run_check(check, _sleep_job(tmp_path, 60, 0))
    assert done.status is Status.PASS and done.node == "local"
    timed_out = run_check(check, _sleep_job(tmp_path, 2, 600))
    assert timed_out.status is Status.ERROR and timed_out.check_id == "example.sleep"
    assert timed_out.summary == "timed out after 2s; the check and its processes were killed"
    pid_file = tmp_path / "pids"  # absent when a loaded machine took the 2 s before the check began
    started = [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []
    assert pids_alive(started) == []
    pid_file.unlink(missing_ok=True)

    def kill_once_it_sleeps(child) -> None:  # the check child we started, killed by its PID once it sleeps
        def kill() -> None:
            while not (tmp_path / "pids").exists():
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGKILL)
        threading.Thread(target=kill, daemon=True).start()

    died = run_check(check, _sleep_job(tmp_path, 300, 600), on_start=kill_once_it_sleeps)
    assert died.status is Status.ERROR
    assert died.summary == f"the check's process died with exit code {-signal.SIGKILL} before reporting"
    assert died.evidence[0].command == "python -m preflight.engine.check_process (example.sleep)"


def test_pure_helpers():
    assert last_json(["noise", '{"a": 1}', "{broken", '{"b": 2}', "tail"]) == {"b": 2}
    assert last_json("no json here") is None
    assert command_identity(["env", "A=1", "B=2", "/usr/bin/python", "-m", "torch.distributed.run", "--x"]) == [
        "/usr/bin/python", "-m", "torch.distributed.run"]


def _agent(job: dict, node: str) -> tuple[int, list[str], str]:
    """The agent as a job step's task on `node` runs it: (exit code, stdout lines, stderr). Its stdin
    stays open until it says DONE or ends (the end of stdin would stop it); killed after 120 s."""
    env = {**os.environ, "SLURMD_NODENAME": node}
    proc = subprocess.Popen([sys.executable, "-m", "preflight.engine.agent"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    guard = threading.Timer(120, proc.kill)
    guard.start()
    try:
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if lines[-1] == DONE:
                break
        proc.stdin.close()
        stderr = proc.stderr.read()
        return proc.wait(), lines, stderr
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_task_of_a_shared_job_runs_its_own_part_and_a_job_it_cannot_read_is_refused_by_name(tmp_path):
    shared = NodeJob(node=None, node_env="SLURMD_NODENAME", nodes={"n1": {}, "n2": {"expect": {"gpus_per_node": 4}}},
                     checks=[CheckSpec("example.echo", 60.0, {"text": "hi"})], coordinator_version=preflight.__version__)
    code, lines, stderr = _agent(shared.to_dict(), "n2")
    assert code == 0, stderr[-2000:]
    assert json.loads(lines[0][len(HELLO):])["node"] == "n2" and lines[1] == START + "example.echo"
    result = json.loads(lines[2][len(RESULT):])
    assert result["node"] == "n2" and result["status"] == "PASS" and lines[-1] == DONE
    code, lines, stderr = _agent({**shared.to_dict(), "protocol": 0}, "n1")
    assert code == 2 and json.loads(lines[0][len(HELLO):])["node"] == "n1" and DONE not in lines
    assert "preflight agent: node job: protocol version 0" in stderr
    # Another preflight: it says hello and DONE, so the coordinator names both versions and the fix.
    code, lines, _ = _agent({**shared.to_dict(), "protocol": 0, "coordinator_version": "0.0.1"}, "n1")
    assert code == 0 and len(lines) == 2 and lines[-1] == DONE


def test_an_escalation_sends_sigterm_when_begun_and_sigkill_only_after_its_grace():
    """The stop the guard and the iperf3 worker run in their polling loops: SIGTERM to each tree once,
    SIGKILL to what is left on the first poll `grace_s` later, never before."""
    ready = "import signal, time\n{}print('ready', flush=True)\ntime.sleep(60)\n"
    ignores = subprocess.Popen([sys.executable, "-c", ready.format("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n")],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    obeys = subprocess.Popen([sys.executable, "-c", ready.format("")], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert ignores.stdout.readline().strip() == "ready" and obeys.stdout.readline().strip() == "ready"
        stopping = Escalation([ignores.pid, obeys.pid], grace_s=30.0)
        stopping.poll(1000.0)  # not begun: nothing is sent
        time.sleep(0.3)
        assert ignores.poll() is None and obeys.poll() is None
        stopping.begin(100.0)
        assert obeys.wait(10) == -signal.SIGTERM
        stopping.begin(120.0)  # once: the grace still runs from the first
        stopping.poll(129.9)
        time.sleep(0.3)
        assert ignores.poll() is None and not stopping.killed
        stopping.poll(130.0)
        assert ignores.wait(10) == -signal.SIGKILL and stopping.killed
    finally:
        for child in (ignores, obeys):
            if child.poll() is None:
                child.kill()
            child.wait(10)
            child.stdout.close()
