"""scaling.multi_gpu for real on this CPU: DDP over 1 and 2 gloo processes, and tensorflow beside it.

The box has two shared cores, so the efficiency itself is whatever it is; these tests check that it
is measured, derived and judged consistently, never a particular figure.
"""

import os
import time
from pathlib import Path

import psutil
import pytest

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight.engine import faults
from tests.conftest import DATA, pids_alive

SMALL_MODEL = {"hidden_size": 128, "layers": 2, "batch_per_device": 32, "steps": 4, "warmup": 1,
               "device_counts": [1, 2]}


def run_check(tmp_path: Path, timeout_s: float, expect: Expect | None = None, **overrides):
    from preflight_checks.scaling.multi_gpu import ScalingMultiGpu

    check = ScalingMultiGpu()
    params = check.params_from({**SMALL_MODEL, **overrides})
    expect = expect or Expect()
    ctx = NodeContext(node="local", output_dir=tmp_path, scratch_dir=tmp_path, expect=expect, timeout_s=timeout_s)
    start = time.monotonic()
    result = execute(check, ctx, params, expect, node="local")
    return result, time.monotonic() - start


def rank_pids(result) -> list[int]:
    return [rank["pid"] for run in result.facts.get("torch", []) for rank in run["launch"]["ranks"]]


def no_worker_left() -> bool:
    for proc in psutil.Process().children(recursive=True):
        try:
            if "preflight.workers" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


@pytest.mark.torch
def test_ddp_on_one_and_two_cpu_processes_is_measured_and_reported(tmp_path):
    pytest.importorskip("torch")
    result, elapsed = run_check(tmp_path, 90, tensorflow=False)
    facts = result.facts
    # Measured, and reported as information: CPU processes sharing cores say nothing about a GPU fabric.
    assert result.status is Status.SKIP, (result.summary, [e.output_tail for e in result.evidence])
    assert [f.id for f in result.findings if f.level is Status.SKIP] == ["scaling.multi_gpu.cpu-only.not-applicable"]
    assert facts["device_kind"] == "cpu" and facts["backend"] == "gloo" and facts["device_counts"] == [1, 2]
    x1, x2 = (run["result"]["samples_per_s"] for run in facts["torch"])
    e2 = x2 / (2 * x1)
    assert facts["table"][1]["efficiency"] == pytest.approx(e2)
    assert facts["training_samples_per_s"] == pytest.approx(x2) and facts["training_devices"] == 2
    for run in facts["torch"]:
        res = run["result"]
        assert res["world_size"] == run["devices"] and res["threads_per_rank"] == 1
        assert len(res["step_samples_s"]) == len(res["compute_samples_s"]) == SMALL_MODEL["steps"]
        assert res["parameters"] == 2 * (128 * 128 + 128)
    assert "CPU only" in result.summary
    assert f"deliver the throughput of {2 * e2:.1f}" in result.summary
    assert any(d == "tensorflow: not measured (scaling.tensorflow is off)" for d in result.details)
    assert pids_alive(rank_pids(result)) == [] and no_worker_left()
    assert elapsed < 90  # within the check's budget


@pytest.mark.torch
@pytest.mark.tensorflow
def test_tensorflow_mirrored_strategy_is_reported_beside_torch(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    result, elapsed = run_check(tmp_path, 120, tensorflow=True)
    tf = result.facts["tensorflow"]
    assert [run["devices"] for run in tf["runs"]] == [1, 2], tf
    assert all(run["ok"] for run in tf["runs"]), [run["error"] for run in tf["runs"]]
    two = tf["runs"][1]["result"]
    assert two["strategy"] == "MirroredStrategy" and len(two["devices"]) == 2 and two["replicas"] == 2
    assert two["parameters"] == 2 * (128 * 128 + 128)  # the same model as torch's
    names = [m.name for m in result.measurements]
    assert "tensorflow MirroredStrategy efficiency on 2 logical CPU devices" in names
    assert tf["table"][1]["efficiency"] == pytest.approx(
        two["samples_per_s"] / (2 * tf["runs"][0]["result"]["samples_per_s"]))
    assert elapsed < 120  # within the check's budget


@pytest.mark.torch
def test_the_teams_own_model_through_scaling_workload(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DATA / "scaling"), os.environ.get("PYTHONPATH")])))
    result, _ = run_check(tmp_path, 90, tensorflow=False, workload="tiny_workload:make")
    assert result.status is not Status.ERROR, (result.summary, [e.output_tail[-1500:] for e in result.evidence])
    run = result.facts["torch"][1]["result"]
    assert run["model"] == "tiny_workload:make" and run["world_size"] == 2
    assert run["parameters"] == (3 * 8 * 9 + 8) + (8 * 16 * 10 + 10)
    assert any(d.startswith("model: tiny_workload:make") for d in result.details)


@pytest.mark.torch
def test_a_rank_that_never_joins_is_error_and_nothing_is_left(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv(faults.ENV, faults.env_value({"scaling.multi_gpu": {"absent_rank": 1}}))
    result, elapsed = run_check(tmp_path, 60, tensorflow=False, device_counts=[2], join_timeout_s=4)
    assert result.status is Status.ERROR
    assert "2 CPU processes: rank 1 of 2 never joined" in result.summary
    assert elapsed < 60
    assert pids_alive(rank_pids(result)) == [] and no_worker_left()
