"""collectives.local for real on this CPU: gloo among 2 processes, and the ranks that never join.

Also the launcher it shares with scaling.multi_gpu, with small plain-Python ranks.
"""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.launch.ranks import launch_local
from preflight.core.model import Status
from preflight.engine import faults
from preflight.engine.protocol import CheckJob
from tests.conftest import pids_alive

# A floor any real run clears: these tests are about the runs, not about this machine's bandwidth
# (without a floor the check warns that only the sums were judged).
SMALL = {"sizes_bytes": [8, 65536, 1 << 20], "iters": 5, "warmup": 2, "check_elements": 4096, "min_busbw_gbps": 1e-6}


def worker_children() -> list[psutil.Process]:
    """Rank processes still hanging off this test process, whatever state they are in."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "preflight.workers" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def run_check(tmp_path: Path, timeout_s: float, **overrides):
    from preflight_checks.collectives.local import CollectivesLocal

    check = CollectivesLocal()
    params = check.params_from(overrides)
    ctx = NodeContext(node="local", output_dir=tmp_path, scratch_dir=tmp_path, expect=Expect(), timeout_s=timeout_s)
    start = time.monotonic()
    result = execute(check, ctx, params, Expect(), node="local")
    return result, time.monotonic() - start


def launch_pids(result) -> list[int]:
    return [rank["pid"] for run in result.facts["runs"] for rank in run["launch"]["ranks"]]


# --- the launcher, with plain Python ranks --------------------------------------------------------

def python_rank(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_rank0_serves_on_the_socket_the_launcher_bound():
    code = """
        import json, os, socket, sys
        rank = int(os.environ["RANK"])
        if rank == 0:
            server = socket.socket(fileno=int(sys.argv[sys.argv.index("--store-fd") + 1]))
            conn, _ = server.accept()
            conn.sendall(b"hello from rank 0")
            conn.close()
        else:
            with socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=10) as s:
                print(json.dumps({"ok": True, "heard": s.recv(100).decode()}))
    """
    launch = launch_local(python_rank(code), 2, timeout_s=30)
    assert launch.ok, [r.stderr for r in launch.ranks]
    assert launch.ranks[1].last_json() == {"ok": True, "heard": "hello from rank 0"}
    assert {r.env["WORLD_SIZE"] for r in launch.ranks} == {"2"}
    assert [r.env["RANK"] for r in launch.ranks] == ["0", "1"]


def test_a_failing_rank_ends_the_others_with_their_children(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = f"""
        import os, subprocess, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """
    start = time.monotonic()
    launch = launch_local(python_rank(code), 2, timeout_s=60, grace_s=1.0)
    assert time.monotonic() - start < 20
    assert not launch.ok and not launch.timed_out
    assert launch.ranks[1].returncode == 3 and not launch.ranks[1].killed
    assert launch.ranks[0].killed and launch.ranks[0].returncode == -9
    assert pids_alive(launch.pids + [int(pid_file.read_text())]) == []


def test_the_deadline_kills_every_rank():
    launch = launch_local(python_rank("import time; time.sleep(600)"), 3, timeout_s=2, grace_s=1.0)
    assert launch.timed_out and all(r.killed for r in launch.ranks)
    assert launch.duration_s < 15
    assert pids_alive(launch.pids) == []


# --- the check, with torch ------------------------------------------------------------------------

@pytest.mark.torch
def test_gloo_among_two_processes_is_correct_and_measured(tmp_path):
    pytest.importorskip("torch")
    result, elapsed = run_check(tmp_path, 60, gloo_ranks=2, **SMALL)
    assert result.status is Status.PASS, (result.summary, [e.output_tail for e in result.evidence])
    run = result.facts["runs"][0]
    assert run["backend"] == "gloo" and run["world_size"] == 2 and run["ok"]
    sizes = run["result"]["sizes"]
    assert [s["bytes"] for s in sizes] == SMALL["sizes_bytes"]
    for entry in sizes:
        assert entry["known_sum_wrong_by_rank"] == [0, 0]
        assert len(entry["time_samples_s"]) == SMALL["iters"] and min(entry["time_samples_s"]) > 0
        assert entry["busbw_gbps"] == pytest.approx(entry["algbw_gbps"])  # 2(n-1)/n is 1 for two ranks
    assert run["result"]["random_check"]["wrong_by_rank"] == [0, 0]
    # Timeouts nest: process group < launch < the check's own.
    timeouts = run["timeouts_s"]
    assert run["result"]["pg_timeout_s"] == timeouts["pg"] < timeouts["launch"] < 60
    assert len(result.evidence) == 2 and "RANK=1" in result.evidence[1].command
    assert pids_alive(launch_pids(result)) == [] and worker_children() == []
    assert elapsed < 60


@pytest.mark.torch
@pytest.mark.parametrize("absent", [1, 0])
def test_a_rank_that_never_joins_is_error_naming_it_and_nothing_is_left(tmp_path, absent, monkeypatch):
    pytest.importorskip("torch")
    timeout_s = 45
    monkeypatch.setenv(faults.ENV, faults.env_value({"collectives.local": {"absent_rank": absent}}))
    result, elapsed = run_check(tmp_path, timeout_s, gloo_ranks=2, join_timeout_s=4, **SMALL)
    assert result.status is Status.ERROR, result.summary
    assert f"rank {absent}" in result.summary and "never joined" in result.summary
    assert result.facts["runs"][0]["missing_ranks"] == [absent]
    assert elapsed < timeout_s
    pids = launch_pids(result)
    assert len(pids) == 2 and pids_alive(pids) == []
    assert worker_children() == []


@pytest.mark.torch
def test_through_the_check_worker_process(tmp_path):
    pytest.importorskip("torch")
    job = CheckJob(check_id="collectives.local", node="local", output_dir=str(tmp_path), timeout_s=60,
                   params={"gloo_ranks": 2, **SMALL}, expect={}, earlier={}).to_dict()
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job), capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["check_id"] == "collectives.local" and result["status"] == "PASS", result["summary"]
    names = [m["name"] for m in result["measurements"]]
    assert "gloo (2 processes): busbw at 1 MiB" in names and "gloo (2 processes): latency at 8 B" in names
    assert pids_alive([r["pid"] for r in result["facts"]["runs"][0]["launch"]["ranks"]]) == []
