"""GPU paths of the workers reproduced on a CPU: what would fail on every real GPU node.

Each test fails on the code before its fix: RNG states moved off the CPU by map_location, the TF32
override of NGC containers, init_process_group(device_id=) on torches where it breaks, and NVML
bindings that raise something other than NVMLError.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from preflight.workers import checkpoint_train, gpu_nvml  # noqa: E402
from preflight.workers.process_group import device_id_safe  # noqa: E402


# ------------------------------------------------------------------------------ item 2: RNG states

def _draws() -> tuple:
    return (torch.rand(3).tolist(), np.random.random(3).tolist(), random.random())


@pytest.mark.parametrize("map_location", ["meta", "cpu"])
def test_rng_states_survive_a_non_cpu_map_location(map_location):
    # A resume loads with map_location=<the training device>. "meta" is the non-CPU device a CPU
    # torch has: like "cuda", it moves every tensor off the CPU, and torch.set_rng_state then raises.
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    saved = io.BytesIO()
    torch.save({"rng": checkpoint_train.rng_states("cpu")}, saved)
    expected = _draws()
    saved.seek(0)
    state = torch.load(saved, map_location=map_location, weights_only=True)
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    checkpoint_train.restore_rng_states(state["rng"], "cpu")
    assert _draws() == expected


def test_rng_states_written_as_tensors_still_restore():
    # Checkpoints of the earlier format kept the states as CPU tensors.
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    old = {"torch": torch.get_rng_state(), "python": random.getstate(),
           "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                     "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    expected = _draws()
    checkpoint_train.restore_rng_states(old, "cpu")
    assert _draws() == expected


# ---------------------------------------------------------------------------- item 3: TF32 override

def test_strict_fp32_under_the_ngc_tf32_override():
    # NGC containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1. Reading allow_tf32 runs the same
    # consistency check as every cuBLAS call (Context::allowTF32CuBLAS); with only the newer
    # fp32_precision switch set it raises "mix of the legacy and new APIs".
    code = ("import torch; from preflight.workers.gpu_probe import _strict_fp32; state = _strict_fp32(torch); "
            "print(torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(), state['allow_tf32'])")
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "highest", "False"]


# ------------------------------------------------------------------- item 4: device_id version gate

@pytest.mark.parametrize("version, safe", [
    ("2.1.2+cu121", False),  # no device_id argument: TypeError
    ("2.2.0", False),
    ("2.3.0", True),
    ("2.5.1+cu124", True),
    ("2.6.0+cu126", False),  # pytorch#153960: random NCCL hangs
    ("2.7.0a0+79aa17489c.nv25.04", False),  # NGC 25.04
    ("2.7.0", False),
    ("2.7.1+cu128", True),
    ("2.8.0", True),
    ("2.13.0+cpu", True),
    ("garbage", False),
])
def test_device_id_only_where_torch_supports_it(version, safe):
    assert device_id_safe(version) is safe


def test_init_group_leaves_device_id_out_on_an_unsafe_torch(monkeypatch):
    from preflight.workers import process_group

    seen = {}
    monkeypatch.setattr(torch, "__version__", "2.6.0+cu126")
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **kw: seen.update(kw))
    env = process_group.DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="127.0.0.1", master_port=1)
    process_group.init_group(None, env, "nccl", 5.0, torch.device("cuda", 0))
    assert "device_id" not in seen
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    process_group.init_group(None, env, "nccl", 5.0, torch.device("cuda", 0))
    assert seen["device_id"] == torch.device("cuda", 0)


# --------------------------------------------------------- item 8: errors that are not NVMLError

class _NVMLError(Exception):
    def __init__(self, value):
        self.value = value


def _old_bindings(**overrides) -> types.SimpleNamespace:
    """A pynvml module as pynvml 11.x had it: no nvmlDeviceGetCurrentClocksEventReasons."""
    handle = object()
    memory = types.SimpleNamespace(total=85520809984, free=84987740160, used=533069824)

    def unsupported(*_a):
        raise _NVMLError(3)

    module = types.SimpleNamespace(
        NVMLError=_NVMLError, NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_FUNCTION_NOT_FOUND=13,
        NVML_ERROR_LIBRARY_NOT_FOUND=12, NVML_ERROR_DRIVER_NOT_LOADED=9, NVML_NVLINK_MAX_LINKS=18,
        NVML_FEATURE_ENABLED=1, NVML_TEMPERATURE_GPU=0, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: b"550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetUUID=lambda h: "GPU-0",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=b"00000000:18:00.0"),
        nvmlDeviceGetVbiosVersion=lambda h: b"96.00.74.00.0D", nvmlDeviceGetSerial=lambda h: b"1650124031592",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [], nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlDeviceGetEccMode=lambda h: (1, 1), nvmlDeviceGetTotalEccErrors=lambda h, a, b: 0,
        nvmlDeviceGetRetiredPages=unsupported, nvmlDeviceGetRetiredPagesPendingStatus=unsupported,
        nvmlDeviceGetRemappedRows=lambda h: (0, 0, 0, 0),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 1,
        nvmlDeviceGetTemperature=lambda h, s: 33, nvmlDeviceGetTemperatureThreshold=lambda h, t: 87,
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 1, nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetGpuMaxPcieLinkGeneration=lambda h: 5, nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetNvLinkState=lambda h, link: 1, nvmlDeviceGetMigMode=lambda h: (0, 0),
    )
    for name, value in overrides.items():
        setattr(module, name, value)
    return module


def test_old_bindings_without_the_renamed_throttle_query_still_give_facts(monkeypatch):
    module = _old_bindings()
    assert not hasattr(module, "nvmlDeviceGetCurrentClocksEventReasons")
    monkeypatch.setitem(sys.modules, "pynvml", module)
    facts = gpu_nvml.nvml_facts(throttle_samples=2)
    assert facts["available"] is True
    assert facts["gpus"][0]["throttle_reason_samples"] == [1, 1]
    assert facts["gpus"][0]["errors"] == {}


def test_a_function_the_bindings_lack_is_a_field_error_not_a_crash(monkeypatch):
    module = _old_bindings()
    del module.nvmlDeviceGetRemappedRows
    module.nvmlDeviceGetMemoryInfo = lambda h: (_ for _ in ()).throw(TypeError("struct c_nvmlMemory_v2_t"))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    gpu = gpu_nvml.nvml_facts(throttle_samples=1)["gpus"][0]
    assert gpu["remap_pending"] is None and gpu["memory_total_bytes"] is None
    assert gpu["errors"]["remapped_rows"].startswith("AttributeError")
    assert gpu["errors"]["memory"].startswith("TypeError")


def test_bindings_that_fail_outside_nvmlerror_become_facts(monkeypatch):
    module = _old_bindings(nvmlDeviceGetCount=lambda: (_ for _ in ()).throw(AttributeError("no nvmlDeviceGetCount_v2")))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    facts = gpu_nvml.nvml_facts()
    assert facts["available"] is False and facts["error_kind"] == "bindings"
    assert "AttributeError" in facts["error"]
    assert set(facts["bindings"]) == {"nvidia-ml-py", "pynvml"}


@pytest.mark.parametrize("query", ["nvmlDeviceGetTemperature", "nvmlDeviceGetNvLinkState"])
def test_a_gpu_lost_while_read_stops_being_read_and_keeps_what_came_before(monkeypatch, query):
    def lost(*_a):
        raise _NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    module = _old_bindings(NVML_ERROR_GPU_IS_LOST=15, **{query: lost})
    monkeypatch.setitem(sys.modules, "pynvml", module)
    gpu = gpu_nvml.nvml_facts(throttle_samples=1)["gpus"][0]
    assert gpu["lost"] is True and gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["errors"] == {}
    assert "nvlink_links" not in gpu and "mig_enabled" not in gpu  # read after the loss: not read at all
