"""checkpoint.cluster_resume on the namespace test bed: torchrun across two nodes over ssh, a node's
training processes SIGKILLed between two checkpoints, the job restarted by torchrun and resumed from
shared storage (a directory under /tmp is one directory in every namespace). One bed of two nodes is
shared by the tests of this module; the non-shared variant has its own (n2 with a private tmpfs)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from preflight.core.model import Status
from preflight.engine import faults
from preflight.engine.execute import execute
from tests.cluster.testbed import module_bed

pytestmark = [pytest.mark.root, pytest.mark.torch]
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bed2():
    yield from module_bed(2)


@pytest.fixture
def shared_dir():
    path = Path(tempfile.mkdtemp(prefix="pft-resume-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_check(ctx, directory, **overrides):
    from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume

    check = CheckpointClusterResume()
    params = check.params_from({"dir": str(directory), "rdzv_timeout_s": 40, "pg_timeout_s": 40, "tensorflow": False,
                                **overrides})
    start = time.monotonic()
    result = execute(check, ctx, params, ctx.expect, node="cluster")
    return result, time.monotonic() - start


def leftovers(bed, node) -> list[str]:
    return [cmd for _, cmd in bed.processes(node) if not cmd.startswith("sshd")]


def ids(result) -> list[str]:
    return [f.id for f in result.findings]


def test_losing_a_node_that_is_not_rank_0s_resumes_exactly(bed2, cluster_context, shared_dir):
    result, elapsed = run_check(cluster_context(bed2, timeout_s=200), shared_dir)
    assert result.status is Status.PASS, result.summary + "\n" + "\n".join(result.details)
    assert result.facts["kill_node"] == "n2"
    line = {m.name: m.value for m in result.measurements}
    assert line["final weights equal an uninterrupted run"] == "yes"
    assert line["steps lost"] == 5  # killed after step 15, resumed from the step-10 checkpoint
    assert all(result.facts["cleanup"].values()) and list(shared_dir.iterdir()) == []
    assert [leftovers(bed2, n) for n in bed2.nodes] == [[], []]
    assert elapsed < 200  # within the check's budget


def test_losing_rank_0s_node_with_two_ranks_on_it_resumes_exactly(bed2, cluster_context, shared_dir):
    result, elapsed = run_check(cluster_context(bed2, timeout_s=200), shared_dir, kill_node="first", ranks_per_node=2)
    assert result.status is Status.PASS, result.summary + "\n" + "\n".join(result.details)
    kills = [e for e in result.facts["events"] if e.get("event") == "kill"]
    assert {e["node"] for e in kills} == {"n1"} and kills[0]["rank"] == 0
    # Both of n1's ranks (0 and 1) died at once: both started again after the kill.
    after = {(e["node"], e["rank"]) for e in result.facts["events"]
             if e.get("event") == "start" and e["t"] > kills[0]["t"]}
    assert {("n1", 0), ("n1", 1)} <= after
    assert {m.name: m.value for m in result.measurements}["final weights equal an uninterrupted run"] == "yes"
    assert [leftovers(bed2, n) for n in bed2.nodes] == [[], []]
    assert elapsed < 200  # within the check's budget


def test_without_elastic_restarts_the_job_ends(bed2, cluster_context, shared_dir):
    result, elapsed = run_check(cluster_context(bed2, timeout_s=200), shared_dir, max_restarts=0)
    assert result.status is Status.FAIL
    assert ids(result) == ["checkpoint.cluster_resume.no-restart"], result.summary
    assert [leftovers(bed2, n) for n in bed2.nodes] == [[], []]
    assert elapsed < 200  # within the check's budget


def test_a_save_cut_short_and_published_in_place_is_a_torn_checkpoint(bed2, cluster_context, shared_dir, monkeypatch):
    monkeypatch.setenv(faults.ENV, faults.env_value({"checkpoint.cluster_resume": {"no_atomic": True}}))
    result, elapsed = run_check(cluster_context(bed2, timeout_s=200), shared_dir, kill_phase="save", kill_at_step=20)
    assert result.status is Status.FAIL
    assert "checkpoint.cluster_resume.torn-checkpoint" in ids(result), result.summary
    assert list(shared_dir.iterdir()) == []
    assert elapsed < 200  # within the check's budget


def test_a_directory_that_is_not_shared_is_named(make_testbed, cluster_context, shared_dir):
    bed = make_testbed(2, private_dirs={2: [str(shared_dir)]})
    result, elapsed = run_check(cluster_context(bed, timeout_s=200), shared_dir, payload_mb=2)
    assert result.status is Status.FAIL
    assert {"checkpoint.cluster_resume.not-shared", "checkpoint.cluster_resume.resume-step-differs"} <= set(ids(result)), \
        result.summary
    assert elapsed < 200  # within the check's budget


def test_tensorflow_loses_a_worker_and_resumes_from_backup_and_restore(bed2, cluster_context, shared_dir):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    result, elapsed = run_check(cluster_context(bed2, timeout_s=300), shared_dir, tensorflow=True, steps=12,
                                save_every=5, kill_at_step=7)
    assert result.status is Status.PASS, result.summary + "\n" + "\n".join(result.details)
    seen = {m.name: m.value for m in result.measurements}
    assert seen["TensorFlow final weights equal an uninterrupted run"] == "yes"
    assert seen["TensorFlow failure noticed after"] > 0
    first, second = result.facts["tensorflow"]["starts"]
    assert [e["index"] for e in first["events"] if e.get("event") == "kill"] == [1]
    assert min(e["epoch"] for e in second["events"] if e.get("event") == "epoch-begin") == 3
    assert all(result.facts["cleanup_tf"].values()) and list(shared_dir.iterdir()) == []
    assert [leftovers(bed2, n) for n in bed2.nodes] == [[], []]
    assert elapsed < 300  # within the check's budget
