"""gpu.visibility for real on this machine: NVML, the torch and tensorflow probes, the worker path."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from preflight.core.check import Expect
from preflight.launch.gpu_probe import PROBE_FLOOR_S
from preflight.engine import faults
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight.workers.gpu_nvml import nvml_facts
from preflight_checks.gpu.visibility import GpuVisibility
from preflight.engine.protocol import CheckJob

CHECK = GpuVisibility()
NVML = nvml_facts(with_gpus=False)


def needs_no_driver(test):
    """Asserts what happens without a driver: skips on a GPU machine, which CI allows (marker nogpu)."""
    skip = pytest.mark.skipif(NVML.get("available", False), reason="an NVIDIA driver is present on this machine")
    return pytest.mark.nogpu(skip(test))


def run_check(tmp_path, expect: Expect | None = None, **params):
    expect = expect or Expect()
    ctx = NodeContext(node="local", output_dir=tmp_path, scratch_dir=tmp_path, expect=expect, timeout_s=CHECK.timeout_s)
    return execute(CHECK, ctx, CHECK.params_from(params), expect, node="local")


@needs_no_driver
def test_nvml_reports_the_missing_driver():
    assert NVML["error_kind"] == "no_driver"
    assert "NVMLError" in NVML["error"]


@needs_no_driver
def test_real_collect_skips_with_the_driver_reason(tmp_path):
    result = run_check(tmp_path)
    assert result.status is Status.SKIP
    assert NVML["error"] in result.summary
    probes = [e for e in result.evidence if "preflight.workers.gpu_probe" in e.command]
    assert probes and all(p.exit_code == 0 for p in probes)
    for framework in ("torch", "tensorflow"):
        view = result.facts[framework]
        if view.get("installed") is False:
            continue
        assert view["importable"] is True
        assert view["device_count"] == 0
        assert f"{framework} {view['version']}" in result.summary


@needs_no_driver
def test_worker_with_eight_gpus_expected_fails(tmp_path):
    """The path the agent takes: the entry point, a child process, a JSON job in and a result out."""
    job = CheckJob(check_id="gpu.visibility", node="local", output_dir=str(tmp_path), timeout_s=CHECK.timeout_s,
                   params={"probe_tensorflow": False}, expect={"gpus_per_node": 8}).to_dict()
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job), capture_output=True,
                          text=True, timeout=CHECK.timeout_s)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "FAIL"
    assert "expected 8 GPUs on this node, found none" in result["summary"]
    assert NVML["error"] in result["summary"]
    assert result["facts"]["tensorflow"].get("probed") is False or result["facts"]["tensorflow"].get("installed") is False


@needs_no_driver
def test_probe_that_does_not_finish_is_reported_and_killed(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv(faults.ENV, faults.env_value({"gpu.visibility": {"probe_hangs": True}}))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_check(tmp_path, probe_timeout_s=PROBE_FLOOR_S, probe_tensorflow=False)
    torch_view = result.facts["torch"]
    assert result.status is Status.SKIP
    assert torch_view["error"].startswith("probe did not finish")
    assert "torch: probe did not finish" in result.summary
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


def test_probe_given_less_than_it_needs_is_not_started_and_not_measured(tmp_path):
    pytest.importorskip("torch")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_check(tmp_path, probe_timeout_s=0.1, probe_tensorflow=False)
    assert result.status is Status.ERROR and "torch probe would get" in result.summary
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.skipif(not NVML.get("available", False), reason="needs an NVIDIA driver and GPU")
def test_real_gpu_node_computes_and_copies(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} cannot use the GPUs here")
    result = run_check(tmp_path, probe_tensorflow=False, host_device_copy_mib=64, host_device_repeats=3)
    assert result.status is not Status.ERROR, result.summary
    devices = result.facts["torch"]["devices"]
    assert len(devices) == torch.cuda.device_count()
    gpus = {g["uuid"]: g for g in result.facts["nvml"]["gpus"]}
    for device in devices:
        assert device["uuid"] in gpus, "torch's device UUID must name an NVML GPU"
        assert device["finite"] and device["max_rel_error"] <= CHECK.params_from().matmul_max_rel_error
        assert min(device["host_device"]["h2d_gbps_samples"]) > 0
        assert device["pcie_under_load"]["gen_current"] >= 1
