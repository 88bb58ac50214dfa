"""dataloader.throughput run for real on this machine: real files, real DataLoader workers, real tf.data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight_checks.dataloader.throughput import SCALING_CHECK, DataloaderThroughput
from preflight.engine.protocol import CheckJob

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent.parent / "data" / "dataloader"
CHECK = DataloaderThroughput()
# A small synthetic set and short passes: a few seconds on two shared cores.
SMALL = {"synthetic_files": 300, "synthetic_shape": [3, 32, 32], "passes": 2, "warmup_batches": 1,
         "batch_size": 32, "num_workers": 1, "tensorflow": False}


def run_check(tmp_path: Path, earlier: dict | None = None, expect: Expect | None = None, **overrides):
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    ctx = NodeContext(node="test", output_dir=tmp_path, scratch_dir=scratch, expect=expect or Expect(),
                      timeout_s=240, earlier=earlier or {})
    params = CHECK.params_from({**SMALL, **overrides})
    return execute(CHECK, ctx, params, expect or Expect(), node="test")


def fired(result) -> list[str]:
    return [f.id for f in result.findings if f.level is not Status.PASS]


def test_synthetic_set_is_read_and_reported(tmp_path):
    result = run_check(tmp_path)
    # Measured, but compared with nothing: a warning naming the setting to add, not a PASS.
    assert fired(result) == ["dataloader.throughput.no-demand"], (result.summary, result.details)
    facts = result.facts
    assert facts["source"] == "synthetic" and facts["synthetic"]["files"] == 300
    assert facts["files"]["count"] == 300 and facts["files"]["median_bytes"] == 12 + 3 * 32 * 32
    torch_facts = facts["torch"]
    assert len(torch_facts["passes"]) == 2
    for one_pass in torch_facts["passes"]:
        # Every file after the warm-up batch was read for real: its bytes reached the main process.
        timed = 300 - one_pass["warmup_batches"] * 32
        assert one_pass["samples"] == timed and one_pass["bytes"] == timed * (12 + 3 * 32 * 32)
    assert torch_facts["samples_per_s"] > 0 and torch_facts["mb_per_s"] > 0
    assert any("synthetic dataset" in d for d in result.details)
    assert list((tmp_path / "scratch").iterdir()) == [], "the synthetic set must be removed"


@pytest.mark.tensorflow
def test_tf_data_is_measured_in_its_own_process(tmp_path):
    pytest.importorskip("tensorflow")
    result = run_check(tmp_path, tensorflow=True, required_samples_per_s=1e-3)
    assert result.status is Status.PASS, (result.summary, result.details)
    tf = result.facts["tensorflow"]
    assert "error" not in tf, tf
    assert all(p["bytes"] == p["samples"] * (12 + 3 * 32 * 32) for p in tf["passes"])
    assert tf["samples_per_s"] > 0
    assert any("preflight.workers.dataloader_tf" in e.command for e in result.evidence)


def test_twenty_thousand_tiny_files_are_the_small_files_pattern(tmp_path):
    root = tmp_path / "tiny"
    for shard in range(20):
        directory = root / f"{shard:02d}"
        directory.mkdir(parents=True)
        for index in range(1000):
            fd = os.open(directory / f"{index:04d}.bin", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"\0" * 200)
            os.close(fd)
    result = run_check(tmp_path, path=str(root), passes=1, max_samples_per_pass=640)
    assert result.status is Status.WARN, result.summary
    assert "small-files pattern" in result.summary and "WebDataset" in result.summary
    files = result.facts["files"]
    assert files["count"] == 20000 and files["median_bytes"] == 200 and files["total_bytes"] == 20000 * 200
    assert result.facts["torch"]["passes"][0]["samples"] > 0


def test_demand_from_scaling_is_used(tmp_path):
    # No GPU here to set the demand: one far above and one far below what any loader does, and the
    # percentage must be the measured rate over it. scaling.multi_gpu's rate is demand only when it
    # timed the team's own model (scaling.workload): its reference model's samples are not the loader's.
    for demand, expected in ((1e9, Status.FAIL), (1e-3, Status.PASS)):
        earlier = {SCALING_CHECK: {"training_samples_per_s": demand, "device_kind": "cuda", "training_devices": 8,
                                   "model": {"workload": "team_model:make"}}}
        result = run_check(tmp_path, earlier=earlier)
        assert result.status is expected, result.summary
        assert result.facts["scaling"]["training_samples_per_s"] == demand
        assert any(SCALING_CHECK in d and "team_model:make" in d for d in result.details)
        verdict = next(m for m in result.measurements if m.name.endswith("vs GPU demand"))
        assert verdict.value == pytest.approx(result.facts["torch"]["samples_per_s"] / demand * 100, rel=1e-3, abs=0.05)
        assert "of what the GPUs consume" in result.summary
    reference = {SCALING_CHECK: {"training_samples_per_s": 1e9, "device_kind": "cuda", "model": {"workload": None}}}
    result = run_check(tmp_path, earlier=reference)
    assert fired(result) == ["dataloader.throughput.no-demand"], result.summary


def test_team_dataset_factory_is_timed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(DATA))
    result = run_check(tmp_path, dataset="tiny_dataset:make", dataset_kwargs={"count": 200, "size": 16},
                       required_samples_per_s=1e-3)
    assert result.status is Status.PASS, (result.summary, result.details)
    assert result.facts["dataset_length"] == 200
    assert all(p["samples"] > 0 for p in result.facts["torch"]["passes"])


@pytest.mark.parametrize("spec, words", [
    ("not_a_module_abc:make", "cannot import module 'not_a_module_abc'"),
    ("tiny_dataset", "is not of the form 'package.module:factory'"),
])
def test_bad_dataset_factory_is_a_clear_error(tmp_path, monkeypatch, spec, words):
    monkeypatch.syspath_prepend(str(DATA))
    result = run_check(tmp_path, dataset=spec)
    assert result.status is Status.ERROR
    assert words in result.summary
    assert "Traceback" not in result.summary


def test_missing_path_is_a_clear_error(tmp_path):
    result = run_check(tmp_path, path=str(tmp_path / "nowhere"))
    assert result.status is Status.ERROR and "does not exist" in result.summary


def test_demand_through_the_worker_process(tmp_path):
    """The real path: earlier facts travel in the JSON job to python -m preflight.engine.check_process."""
    job = CheckJob(check_id="dataloader.throughput", node="local", output_dir=str(tmp_path), timeout_s=240,
                   params=SMALL, expect={}, earlier={SCALING_CHECK: {"training_samples_per_s": 1e9,
                                                                      "model": {"workload": "team_model:make"}}}).to_dict()
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "FAIL", result["summary"]
    assert "the loader can feed 0% of what the GPUs consume" in result["summary"]
