"""`preflight run --slurm` inside a real Slurm allocation on the namespace test bed.

Thresholds are those of tests/cluster/test_cli_cluster.py (the nodes share this machine's two
cores): bandwidth 5 Gbit/s, lenient scaling. A node's fault is real and its own: node 2's slurmd
(and so every step on it) sees a 16 MiB /dev/shm, against a 0.5 GiB minimum.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.test_cli_cluster import bed_config

pytestmark = pytest.mark.root

CROSS_NODE = "node.environment,versions.pinned,net.bandwidth,versions.consistency,storage.shared,collectives.cluster,scaling.multi_node"
SMALL_SHM = {2: "16m"}
SHM_MIN = "node.environment.min_shm_gib=0.5"


def preflight(env: dict, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "preflight", *args], cwd=cwd, env={**env, "CI": "1"},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def assert_nothing_left(bed, jobid: str) -> None:
    for node in bed.nodes:
        assert bed.leftovers(node.index) == [] or all("slurmstepd" in cmd and "extern" in cmd
                                                      for _, cmd in bed.leftovers(node.index)), bed.leftovers(node.index)
    assert bed.srun_processes(jobid) == []


def test_three_node_allocation_is_go_with_every_node_named_by_slurm(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3)
    # A floor for the all-reduce, so that it is judged (without one it WARNs that only the sums were).
    config = bed_config(tmp_path, **{"scaling.multi_node": "min_efficiency = 0.05\nwarn_efficiency = 0.01",
                                     "collectives.cluster": "min_busbw_gbps = 0.01"})
    out = tmp_path / "out"
    # salloc runs the command here with the allocation's environment, as a user would type it.
    proc = subprocess.run(["salloc", "-N3", sys.executable, "-m", "preflight", "run", "--slurm", "--config", str(config),
                           "--checks", CROSS_NODE, "--out", str(out)], cwd=tmp_path, env={**bed.env, "CI": "1"},
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    data = results(out)
    cluster = {r["check_id"]: r for r in data["results"] if r["node"] == "cluster"}
    assert {cid: r["status"] for cid, r in cluster.items()} == dict.fromkeys(cluster, "PASS"), \
        {cid: r["summary"] for cid, r in cluster.items()}
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert data["verdict"]["verdict"] == "GO"
    assert {n["name"] for n in data["nodes"]} == {"n1", "n2", "n3"}
    assert {n["address"] for n in data["nodes"]} == {n.address for n in bed.nodes}
    assert {r["node"] for r in data["results"] if r["node"] != "cluster"} == {"n1", "n2", "n3"}
    hostnames = {r["node"]: r["facts"]["hostname"] for r in data["results"] if r["check_id"] == "node.environment"}
    assert hostnames == {"n1": "n1", "n2": "n2", "n3": "n3"}  # each agent ran on its own node
    assert bed.jobs_left() == []
    for node in bed.nodes:
        assert bed.leftovers(node.index) == [], bed.leftovers(node.index)


def test_drain_takes_out_only_the_faulty_node_and_resume_brings_back_only_what_preflight_drained(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3, shm=SMALL_SHM)
    inside = bed.allocate(3)
    jobid = inside["SLURM_JOB_ID"]
    bed.drain("n3", "disk replacement")  # an operator's drain, while the job runs
    args = ["run", "--slurm", "--checks", "node.environment", "--set", SHM_MIN, "--format", "json"]

    first = preflight(inside, tmp_path, *args, "--out", str(tmp_path / "first"), "--drain")
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-2000:]
    states = bed.states()
    assert states["n2"].drained, states["n2"]
    assert states["n2"].reason == "preflight: node.environment (node.environment.shm-small)"
    assert not states["n1"].drained
    assert states["n3"].reason == "disk replacement"
    assert "slurm: drained n2: preflight: node.environment" in first.stdout
    assert_nothing_left(bed, jobid)

    bed.grow_shm(2, "1g")  # the operator fixes n2
    second = preflight(inside, tmp_path, *args, "--out", str(tmp_path / "second"), "--resume")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    states = bed.states()
    assert not states["n2"].drained, states["n2"]
    assert states["n3"].drained and states["n3"].reason == "disk replacement"
    assert "slurm: resumed n2" in second.stdout and "n3" not in second.stdout.split("Reports:")[-1]
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_past_the_blast_radius_drain_drains_nobody_and_names_who_would_have_been(make_slurm_bed, tmp_path):
    # two of three nodes with a fault of their own: more than the blast radius (2% of 3 nodes, at least 1)
    bed = make_slurm_bed(3, shm={1: "16m", 2: "16m"})
    inside = bed.allocate(3)
    jobid = inside["SLURM_JOB_ID"]
    args = ["run", "--slurm", "--checks", "node.environment", "--set", SHM_MIN, "--format", "json", "--drain"]
    held = preflight(inside, tmp_path, *args, "--out", str(tmp_path / "held"))
    assert held.returncode == 1, held.stdout[-3000:] + held.stderr[-2000:]
    assert not any(state.drained for state in bed.states().values()), bed.states()
    assert "slurm: not drained: 2 nodes would be drained or cordoned, more than the blast radius of 1" in held.stdout
    assert "Would have been: n[1-2]" in held.stdout
    # settable: with a radius of two thirds both are drained
    wider = preflight(inside, tmp_path, *args, "--blast-radius", "0.67", "--out", str(tmp_path / "wider"))
    assert wider.returncode == 1, wider.stdout[-3000:] + wider.stderr[-2000:]
    states = bed.states()
    assert states["n1"].drained and states["n2"].drained and not states["n3"].drained, states
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_without_drain_nothing_changes_in_slurm(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(2, shm={1: "16m"})
    inside = bed.allocate(2)
    proc = preflight(inside, tmp_path, "run", "--slurm", "--checks", "node.environment", "--set", SHM_MIN,
                     "--format", "json", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert not any(state.drained for state in bed.states().values())
    assert "slurm:" not in proc.stdout + proc.stderr
    bed.release(inside["SLURM_JOB_ID"])


def test_a_node_whose_slurmd_died_is_error_and_named_and_nothing_is_left_running(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3)
    inside = bed.allocate(3)
    jobid = inside["SLURM_JOB_ID"]
    bed.kill_slurmd(3)  # the controller still counts n3 as allocated and up
    out = tmp_path / "out"
    proc = preflight(inside, tmp_path, "run", "--slurm", "--checks", "node.environment,versions.pinned,versions.consistency",
                     "--format", "json,md", "--out", str(out), timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = results(out)
    by_key = {(r["check_id"], r["node"]): r for r in data["results"]}
    assert by_key[("node.environment", "n3")]["status"] == "ERROR"
    assert "cannot reach n3" in by_key[("node.environment", "n3")]["summary"]
    assert by_key[("node.environment", "n1")]["status"] in ("PASS", "WARN")
    assert by_key[("node.environment", "n2")]["status"] in ("PASS", "WARN")
    assert [n["name"] for n in data["nodes"] if n["reachable"] is False] == ["n3"]
    assert "n3" in by_key[("versions.consistency", "cluster")]["summary"]
    assert "n3" in (out / "report.md").read_text()
    assert_nothing_left(bed, jobid)
    bed.release(jobid)


def test_a_node_lost_mid_run_is_named_once_slurm_declares_it_down_and_the_rest_completes(make_slurm_bed, tmp_path):
    # --no-kill (as the sbatch example asks): a failed node ends its own steps, not the whole job.
    bed = make_slurm_bed(2, slurmd_timeout=10)
    inside = bed.allocate(2, 60, "--no-kill")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "run", "--slurm", "--checks", "node.environment,example.sleep",
                             "--set", "example.sleep.seconds=20", "--format", "json", "--out", str(out)],
                            cwd=tmp_path, env={**inside, "CI": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while not any("time.sleep" in cmd for _, cmd in bed.leftovers(2)):  # example.sleep's child on n2
            assert time.monotonic() < deadline and proc.poll() is None, "the run never reached example.sleep on n2"
            time.sleep(0.1)
        bed.kill_node(bed.node(2))  # slurmd, its steps and the agent go at once: a crashed node
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stdout[-3000:] + stderr[-2000:]
    by_key = {(r["check_id"], r["node"]): r for r in results(out)["results"]}
    assert by_key[("example.sleep", "n2")]["status"] == "ERROR"
    assert "lost contact with n2" in by_key[("example.sleep", "n2")]["summary"]
    assert by_key[("example.sleep", "n1")]["status"] == "PASS"
    assert by_key[("node.environment", "n1")]["status"] in ("PASS", "WARN")
    # node.environment is a cheap check and runs first: it finished on n2 before the node was lost and
    # keeps its own result; only what was unfinished when the node went down is ERROR.
    assert by_key[("node.environment", "n2")]["status"] in ("PASS", "WARN")
    assert by_key[("node.environment", "n2")]["started_at"] <= by_key[("example.sleep", "n2")]["started_at"]
    assert_nothing_left(bed, inside["SLURM_JOB_ID"])
    bed.release(inside["SLURM_JOB_ID"])


def test_a_silenced_blocker_is_go_and_drain_leaves_its_node_alone(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(2, shm={2: "16m"})
    inside = bed.allocate(2)
    config = tmp_path / "accepted.toml"
    config.write_text('[silence]\n"node.environment.shm-small" = {reason = "this partition has a small /dev/shm"}\n')
    proc = preflight(inside, tmp_path, "run", "--slurm", "--checks", "node.environment", "--set", SHM_MIN,
                     "--config", str(config), "--format", "json", "--out", str(tmp_path / "out"), "--drain")
    assert results(tmp_path / "out")["verdict"]["verdict"] == "GO", proc.stdout[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert not any(state.drained for state in bed.states().values()), bed.states()
    assert "slurm: drained" not in proc.stdout
    bed.release(inside["SLURM_JOB_ID"])
