"""`preflight run --slurm --slurm-step single`: every node's agent as one task of one job step, on a
real Slurm cluster (tests/slurm/slurmbed.py). Each node is named by Slurm and answers from itself;
a node Slurm cannot launch on, a node that dies mid-run and an agent that stops answering are ERROR
on that node alone, and the rest of the step completes. Nothing is left running anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

SINGLE = ["--slurm", "--slurm-step", "single"]


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def by_key(out: Path) -> dict:
    return {(r["check_id"], r["node"]): r for r in results(out)["results"]}


def assert_nothing_left(bed, jobid: str) -> None:
    for node in bed.nodes:
        left = [cmd for _, cmd in bed.leftovers(node.index) if not ("slurmstepd" in cmd and "extern" in cmd)]
        assert left == [], (node.name, left)
    assert bed.srun_processes(jobid) == []


class SrunSampler:
    """The command lines of the srun processes working for the job, sampled while a run goes on."""

    def __init__(self, bed, jobid: str) -> None:
        self.bed, self.jobid, self.seen = bed, jobid, set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.done.wait(0.1):
            self.seen.update(self.bed.srun_processes(self.jobid))

    def __enter__(self) -> SrunSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def preflight(env: dict, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "preflight", *args], cwd=cwd, env={**env, "CI": "1"},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_one_job_step_runs_every_nodes_agent_on_its_own_node_and_each_is_named(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3)
    inside = bed.allocate(3)
    jobid = inside["SLURM_JOB_ID"]
    out = tmp_path / "out"
    with SrunSampler(bed, jobid) as sampler:
        proc = preflight(inside, tmp_path, "run", *SINGLE, "--checks", "node.environment,versions.pinned",
                         "--format", "json", "--out", str(out))
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    found = by_key(out)
    assert {node for _, node in found} == {"n1", "n2", "n3"}
    assert {r["status"] for r in found.values()} <= {"PASS", "WARN"}, {k: r["summary"] for k, r in found.items()}
    hostnames = {node: r["facts"]["hostname"] for (cid, node), r in found.items() if cid == "node.environment"}
    assert hostnames == {"n1": "n1", "n2": "n2", "n3": "n3"}  # each agent ran on its own node
    assert all(r["facts"] for r in found.values())  # results longer than srun's 1 KiB lines arrive whole
    # One step across the allocation: the only srun was the step's, with one task on each node.
    assert sampler.seen, "no srun was seen during the run"
    assert all("--ntasks-per-node=1" in cmd and "n1,n2,n3" in cmd and "-N3" in cmd for cmd in sampler.seen), sampler.seen
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_a_node_slurm_cannot_launch_on_is_error_in_slurms_words_and_the_others_complete(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3)
    inside = bed.allocate(3)
    jobid = inside["SLURM_JOB_ID"]
    bed.kill_slurmd(3)  # the controller still counts n3 as allocated and up
    out = tmp_path / "out"
    proc = preflight(inside, tmp_path, "run", *SINGLE, "--checks", "node.environment,versions.pinned",
                     "--format", "json", "--out", str(out))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = by_key(out)
    lost = found[("node.environment", "n3")]
    assert lost["status"] == "ERROR" and found[("versions.pinned", "n3")]["status"] == "ERROR"
    assert "cannot reach n3" in lost["summary"] and "failed on node n3" in lost["summary"]  # Slurm's own words
    for node in ("n1", "n2"):
        assert found[("node.environment", node)]["status"] in ("PASS", "WARN"), found[("node.environment", node)]
        assert found[("versions.pinned", node)]["status"] in ("PASS", "WARN")
    assert [n["name"] for n in results(out)["nodes"] if n["reachable"] is False] == ["n3"]
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_a_node_lost_mid_run_is_error_and_the_rest_of_the_step_completes(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(2, slurmd_timeout=10)
    inside = bed.allocate(2, 60, "--no-kill")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "run", *SINGLE, "--checks", "node.environment,example.sleep",
                             "--set", "example.sleep.seconds=20", "--format", "json", "--out", str(out)],
                            cwd=tmp_path, env={**inside, "CI": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while not any("time.sleep" in cmd for _, cmd in bed.leftovers(2)):  # example.sleep's child on n2
            assert time.monotonic() < deadline and proc.poll() is None, "the run never reached example.sleep on n2"
            time.sleep(0.1)
        bed.kill_node(bed.node(2))  # slurmd, its step's task and the agent go at once: a crashed node
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stdout[-3000:] + stderr[-3000:]
    found = by_key(out)
    assert found[("example.sleep", "n2")]["status"] == "ERROR"
    assert "lost contact with n2" in found[("example.sleep", "n2")]["summary"]
    assert found[("example.sleep", "n1")]["status"] == "PASS"  # its task went on to the end
    assert found[("node.environment", "n1")]["status"] in ("PASS", "WARN")
    assert found[("node.environment", "n2")]["status"] in ("PASS", "WARN")  # finished before the loss: it stands
    assert_nothing_left(bed, inside["SLURM_JOB_ID"])
    bed.release(inside["SLURM_JOB_ID"])


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_an_agent_that_stops_answering_is_stopped_alone_and_the_others_complete(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(2)
    inside = bed.allocate(2)
    jobid = inside["SLURM_JOB_ID"]
    # n2's agent is stopped while its example.sleep runs: the check's process writes its PID once it has
    # begun, and its parent is the agent (the guard above the agent ends its command line the same way,
    # so a scan of command lines can find the guard instead, and a stopped guard hangs nothing). The
    # sleeps end only when the test says so, after the agent is stopped: what n2 gives is decided by the
    # order of these steps, not by the machine's load. A silent agent is given up on after its check's
    # timeout plus the runner's grace.
    pids, release = tmp_path / "sleep-{node}.pids", tmp_path / "release"
    (tmp_path / "preflight.toml").write_text(
        f'[checks."example.sleep"]\nseconds = 60\ntimeout = 20\nwith_child = false\npid_file = "{pids}"\n'
        f'until_file = "{release}"\n[checks."example.echo"]\ntimeout = 3\n')
    on_n2 = tmp_path / "sleep-n2.pids"
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "run", *SINGLE, "--config", "preflight.toml",
                             "--checks", "example.echo,example.sleep", "--format", "json", "--out", str(out)],
                            cwd=tmp_path, env={**inside, "CI": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while not on_n2.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "example.sleep never began on n2"
            time.sleep(0.05)
        agent = parent_of(int(on_n2.read_text().split()[0]))
        command = Path(f"/proc/{agent}/cmdline").read_bytes().split(b"\0")
        assert command[1:3] == [b"-m", b"preflight.engine.agent"], command
        os.kill(agent, signal.SIGSTOP)  # alive, its node up, and silent: a hung agent
        release.touch()  # n1's sleep ends and passes; n2's check ends too, but its agent reads nothing
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stdout[-3000:] + stderr[-3000:]
    found = by_key(out)
    assert found[("example.echo", "n2")]["status"] == "PASS"  # finished before the agent stopped: it stands
    silent = found[("example.sleep", "n2")]
    assert silent["status"] == "ERROR" and "the agent on n2 wrote nothing" in silent["summary"], silent
    assert "while running example.sleep" in silent["summary"], silent
    assert found[("example.echo", "n1")]["status"] == "PASS"
    assert found[("example.sleep", "n1")]["status"] == "PASS"
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_a_step_that_cannot_be_created_falls_back_to_a_step_per_node_which_names_the_node(make_slurm_bed, tmp_path,
                                                                                          monkeypatch):
    from preflight.core.config import Config
    from preflight.core.registry import discover
    from preflight.engine.runner import NodeTarget, RunPlan, Runner
    from preflight.transport.slurm import SlurmTransport

    bed = make_slurm_bed(3)
    inside = bed.allocate(2)  # n1 and n2; n3 is a node of the cluster outside this job
    jobid = inside["SLURM_JOB_ID"]
    monkeypatch.setenv("SLURM_CONF", str(bed.conf))
    nodes = [NodeTarget(SlurmTransport(name, python=sys.executable, jobid=jobid)) for name in ("n1", "n2", "n3")]
    plan = RunPlan(checks=discover().ordered(["node.environment"]), config=Config(), output_dir=tmp_path / "out",
                   nodes=nodes, slurm_step="single")
    report = Runner(plan).run()
    found = {r.node: r for r in report.results}
    assert found["n1"].status.value in ("PASS", "WARN") and found["n2"].status.value in ("PASS", "WARN")
    assert found["n1"].facts["hostname"] == "n1" and found["n2"].facts["hostname"] == "n2"
    assert found["n3"].status.value == "ERROR" and "n3" in found["n3"].summary
    assert [n.name for n in report.nodes if n.reachable is False] == ["n3"]
    assert_nothing_left(bed, jobid)
    bed.release(jobid)
