"""checkpoint.roundtrip run for real on this machine: real torch, real tensorflow, real files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight_checks.checkpoint.roundtrip import CheckpointRoundtrip
from preflight.engine import faults
from preflight.engine.protocol import CheckJob
from tests.conftest import pids_alive

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoint"
CHECK = CheckpointRoundtrip()
# Small and quick: figures here are about correctness, not this machine's disk.
SMALL = {"size_mb": 4, "repeats": 2, "min_write_gbps": 0.0, "min_read_gbps": 0.0, "tensorflow": False}
is_root = os.geteuid() == 0


def run_check(tmp_path: Path, **overrides):
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    ctx = NodeContext(node="test", output_dir=tmp_path, scratch_dir=scratch, expect=Expect(), timeout_s=240)
    params = CHECK.params_from({**SMALL, **overrides})
    return execute(CHECK, ctx, params, Expect(), node="test")


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str):
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)]).returncode != 0:
            # Still busy (a file left open by a failing test): detach it now, the kernel frees it later.
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def no_traceback(result) -> bool:
    return "Traceback" not in result.summary + "\n".join(result.details)


def test_exact_round_trip_and_exact_resume(tmp_path):
    target = tmp_path / "ckpt"
    target.mkdir()
    result = run_check(tmp_path, dir=str(target))
    assert result.status is Status.PASS, (result.summary, result.details)
    formats = result.facts["torch"]["formats"]
    assert set(formats) == {"torch.save", "dcp"}
    for fmt in formats.values():
        assert fmt["mismatches"] == [] and fmt["leaves_compared"] > 40
        assert len(fmt["write_gbps_samples"]) == 2 and all(v > 0 for v in fmt["write_gbps_samples"])
        assert fmt["bytes"] > 4e6 * 0.9
    resume = result.facts["resume"]
    assert resume["exact"] and resume["killed_returncode"] == -9
    assert 0 < resume["resumed_from_step"] <= resume["kill_after_step"] < resume["steps"]
    assert resume["resumed_from_step"] == resume["last_checkpoint_before_kill"]
    assert pids_alive([resume["killed_pid"]]) == []
    names = {m.name for m in result.measurements}
    assert {"torch.save write", "torch.save read", "torch.distributed.checkpoint write"} <= names
    assert list(target.iterdir()) == [], "the check must remove everything it wrote"
    assert any("SIGKILL" in e.output_tail for e in result.evidence)


def test_resume_that_drops_rng_state_is_caught(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, faults.env_value({"checkpoint.roundtrip": {"drop_rng_state": True}}))
    result = run_check(tmp_path, dir=str(tmp_path), dcp=False, repeats=1)
    assert result.status is Status.FAIL, result.summary
    assert "does not end with the weights of an uninterrupted run" in result.summary
    assert result.facts["resume"]["exact"] is False
    assert result.facts["resume"]["max_abs_difference"] > 0


@pytest.mark.tensorflow
def test_tensorflow_checkpoint_manager_round_trip(tmp_path):
    pytest.importorskip("tensorflow")
    result = run_check(tmp_path, dir=str(tmp_path), tensorflow=True, tf_size_mb=2, dcp=False, repeats=1,
                       resume_test=False)
    assert result.status is Status.PASS, (result.summary, result.details)
    tf = result.facts["tensorflow"]
    assert tf["mismatches"] == [] and tf["variables"] >= 5
    assert tf["latest_checkpoint"] == tf["manager_latest"] == "ckpt-2"
    assert tf["checkpoints_kept"] == ["ckpt-1", "ckpt-2"]
    assert tf["write_gbps"] > 0 and tf["read_gbps"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["scratch"]


def test_missing_directory_is_fail(tmp_path):
    result = run_check(tmp_path, dir=str(tmp_path / "not-there"))
    assert result.status is Status.FAIL
    assert "does not exist" in result.summary and no_traceback(result)


@pytest.mark.root
@pytest.mark.skipif(not is_root, reason="mounting a read-only tmpfs needs root")
def test_read_only_directory_is_fail_with_a_message(tmp_path):
    # chmod does not stop root; a read-only mount does.
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        result = run_check(tmp_path, dir=str(mount))
    assert result.status is Status.FAIL, result.summary
    assert "read-only filesystem" in result.summary and no_traceback(result)


@pytest.mark.root
@pytest.mark.skipif(not is_root, reason="mounting a tiny tmpfs needs root")
def test_full_directory_is_fail_with_a_message(tmp_path):
    with tmpfs(tmp_path / "full", "size=64k") as mount:
        result = run_check(tmp_path, dir=str(mount))
        leftovers = list(mount.iterdir())
    assert result.status is Status.FAIL, result.summary
    assert "is full" in result.summary and no_traceback(result)
    assert leftovers == []


@pytest.mark.root
@pytest.mark.skipif(not is_root, reason="mounting a tiny tmpfs needs root")
def test_disk_filling_up_during_a_save_is_recognised(tmp_path):
    # The free-space check stops the check before this happens; the save itself must still say "full".
    from preflight_checks.checkpoint.formats import save_torch
    from preflight_checks.checkpoint.state import build_state
    from preflight_checks.checkpoint.storage import storage_problem_kind

    state = build_state(1, seed=0)
    with tmpfs(tmp_path / "full", "size=64k") as mount:
        with pytest.raises(Exception) as raised:
            save_torch(state, mount / "state.pt")
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    assert storage_problem_kind(raised.value, free) == "full"


def test_old_checkpoint_loads(tmp_path):
    result = run_check(tmp_path, dir=str(tmp_path), resume_test=False, dcp=False, repeats=1,
                       compat_path=str(DATA / "compat_v1.pt"))
    assert result.status is Status.PASS, result.summary
    compat = result.facts["compat"]
    assert compat["format"] == "torch.save" and compat["top_level_keys"] == ["model", "optimizer", "step", "torch_rng"]
    assert compat["tensors"] > 0


def test_old_dcp_checkpoint_directory_loads(tmp_path):
    import torch.distributed.checkpoint as dcp

    from preflight_checks.checkpoint.formats import _dcp_kwargs

    old = tmp_path / "old-dcp"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": {"w": torch.arange(6.0)}, "step": 7}, checkpoint_id=str(old), **_dcp_kwargs(dcp.save))
    result = run_check(tmp_path, dir=str(tmp_path), resume_test=False, dcp=False, repeats=1, compat_path=str(old))
    assert result.status is Status.PASS, result.summary
    assert result.facts["compat"]["format"] == "torch.distributed.checkpoint"
    assert result.facts["compat"]["tensors"] == 1


def test_corrupt_old_checkpoint_is_fail(tmp_path):
    data = (DATA / "compat_v1.pt").read_bytes()
    broken = tmp_path / "broken.pt"
    broken.write_bytes(data[: len(data) // 2])
    result = run_check(tmp_path, dir=str(tmp_path), resume_test=False, dcp=False, repeats=1, compat_path=str(broken))
    assert result.status is Status.FAIL
    assert "does not load" in result.summary and no_traceback(result)


def test_through_the_worker_process(tmp_path):
    """The path a real run takes: python -m preflight.engine.check_process with a JSON job, the check found by entry point."""
    job = CheckJob(check_id="checkpoint.roundtrip", node="local", output_dir=str(tmp_path), timeout_s=240,
                   params={**SMALL, "dir": str(tmp_path), "resume_test": False, "repeats": 1}, expect={}, earlier={}).to_dict()
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "PASS", result["summary"]
    assert [m["unit"] for m in result["measurements"] if "write" in m["name"]] == ["GB/s", "GB/s"]
