"""gpu.visibility judged from recorded and documented facts (tests/data/gpu_visibility/)."""

from __future__ import annotations

import copy
import os
import json
import re
import sys

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight.workers.gpu_nvml import cuda_version_text, throttle_reason_names
from preflight.workers.gpu_probe import compare_product, dotted_cudnn, dotted_nccl, reference_inputs
from preflight_checks.gpu.visibility import GpuVisibility, Params, pcie_link_gbps, runtime_vs_driver, visible_gpu_indices
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "gpu_visibility"
CHECK = GpuVisibility()


def facts(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def judge(data: dict, expect: Expect | None = None, **params):
    return CHECK.evaluate(data, CHECK.params_from(params), expect or Expect())


def healthy() -> dict:
    return copy.deepcopy(facts("healthy_8x_h100.json"))


def kinds(outcome, *levels) -> list[str]:
    """The kinds of the findings that fired (gpu.visibility.<kind>), in order."""
    return [i.split(".", 2)[2] for i in finding_ids(outcome, *levels)]


def named(outcome, kind: str) -> list[str]:
    """The GPU or device each finding of `kind` is about (its sentence starts by naming it)."""
    return [re.match(r"GPU \d+|(?:torch|tensorflow) cuda:\d+", f.message).group(0)
            for f in outcome.findings if f.id == f"gpu.visibility.{kind}"]


def test_every_built_fixture_names_its_source():
    for path in DATA.glob("*.json"):
        assert "_source" in json.loads(path.read_text(encoding="utf-8")), path.name


# ---------------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("expect", [Expect(), Expect(gpus_per_node=8)])
def test_healthy_node_passes(expect):
    outcome = judge(healthy(), expect)
    assert outcome.status is Status.PASS and kinds(outcome) == []
    counts = {m.name: m for m in outcome.measurements}
    assert counts["GPUs visible (torch)"].value == 8 and counts["GPUs visible (torch)"].ok
    assert counts["GPUs computing correctly"].value == 8
    # The idle gen1 link is explained, not judged.
    assert not any("PCIe" in d for d in outcome.details)


def test_missing_gpu_fails_only_when_eight_are_expected():
    data = facts("gpu_missing.json")
    assert judge(data).status is Status.PASS
    outcome = judge(data, Expect(gpus_per_node=8))
    assert outcome.status is Status.FAIL and kinds(outcome) == ["count"]
    nvml = next(m for m in outcome.measurements if m.name == "GPUs visible (NVML)")
    assert (nvml.value, nvml.threshold, nvml.ok) == (7, 8, False)


def test_uncorrectable_ecc_errors_fail_and_pending_remap_warns():
    outcome = judge(facts("ecc_errors.json"))
    assert outcome.status is Status.FAIL
    assert kinds(outcome) == ["ecc-uncorrectable", "remap-pending"]
    assert named(outcome, "ecc-uncorrectable") == ["GPU 3"]
    # The pending remap alone is WARN by default (NVML: it does not affect future work until a reset).
    data = healthy()
    data["nvml"]["gpus"][3]["remap_pending"] = True
    assert judge(data).status is Status.WARN
    assert judge(data, fail_on_pending_remap=True).status is Status.FAIL


def test_thermal_throttle_fails_with_the_reason_and_temperature():
    outcome = judge(facts("thermal_throttle.json"))
    assert outcome.status is Status.FAIL
    # hw_thermal_slowdown fails, sw_thermal_slowdown warns, and 88 C is at the GPU's slowdown threshold.
    assert [(k, f.level) for k, f in zip(kinds(outcome), outcome.findings)] == [
        ("throttled", Status.FAIL), ("throttled", Status.WARN), ("at-slowdown", Status.FAIL)]
    assert set(named(outcome, "throttled") + named(outcome, "at-slowdown")) == {"GPU 5"}
    hottest = next(m for m in outcome.measurements if m.name == "hottest GPU")
    assert hottest.value == 88 and hottest.ok is False


def test_degraded_pcie_link_under_load_fails():
    outcome = judge(facts("pcie_degraded.json"))
    assert outcome.status is Status.FAIL
    assert kinds(outcome) == ["pcie-degraded", "copy-slow", "copy-slow"]
    assert named(outcome, "pcie-degraded") == ["GPU 2"]


def test_remap_failure_fails():
    outcome = judge(facts("remap_failure.json"))
    assert outcome.status is Status.FAIL
    assert kinds(outcome) == ["remap-failed"] and named(outcome, "remap-failed") == ["GPU 6"]


def test_torch_and_nvml_disagree():
    outcome = judge(facts("torch_nvml_mismatch.json"))
    assert outcome.status is Status.FAIL
    assert kinds(outcome) == ["framework-count", "framework-count", "not-all-computed"]
    assert "not seen: GPU 7 (00000000:DB:00.0)" in outcome.findings[0].message  # the GPU torch misses is named
    torch_count = next(m for m in outcome.measurements if m.name == "GPUs visible (torch)")
    assert (torch_count.value, torch_count.threshold, torch_count.ok) == (7, 8, False)


def test_host_device_copies_are_judged_against_the_link_or_the_profile():
    outcome = judge(healthy())
    slowest = next(m for m in outcome.measurements if m.name == "slowest host-to-device copy")
    # Unset, the floor is half of what a gen5 x16 link carries.
    assert slowest.value == 55.1 and slowest.threshold == pytest.approx(31.5) and slowest.ok
    assert judge(healthy(), min_host_device_gbps=52.0).status is Status.PASS  # the H100 profile's figure
    strict = judge(healthy(), min_host_device_gbps=56.0)
    assert strict.status is Status.FAIL
    assert "torch cuda:0" in named(strict, "copy-slow") and set(kinds(strict)) == {"copy-slow"}
    degraded = judge(facts("pcie_degraded.json"))
    assert named(degraded, "copy-slow") == ["torch cuda:2", "torch cuda:2"]  # both directions, against 31.5 GB/s
    data = healthy()
    data["torch"]["devices"][3]["host_device"] = {"error": "RuntimeError: CUDA error: out of memory"}
    outcome = judge(data)
    assert outcome.status is Status.WARN and named(outcome, "copy-untimed") == ["torch cuda:3"]


def test_pcie_link_rates():
    assert pcie_link_gbps(5, 16) == pytest.approx(63.0, abs=0.1)
    assert pcie_link_gbps(4, 16) == pytest.approx(31.5, abs=0.1)
    assert pcie_link_gbps(None, 16) is None


def test_recorded_no_driver_node_skips_with_the_reason_unless_gpus_are_expected():
    data = facts("no_driver_cpu_node.json")
    outcome = judge(data)
    assert outcome.status is Status.SKIP and kinds(outcome) == ["no-gpu"]
    assert data["nvml"]["error"] in outcome.summary  # the reason of the SKIP is NVML's own error
    assert outcome.remediation == []
    expected = judge(data, Expect(gpus_per_node=8))
    assert expected.status is Status.FAIL and kinds(expected) == ["no-gpu"]


def test_expected_to_run_follows_gpus_per_node():
    assert CHECK.expected_to_run(Expect(gpus_per_node=8))
    assert not CHECK.expected_to_run(Expect(gpus_per_node=0))
    assert not CHECK.expected_to_run(Expect())


# ---------------------------------------------------------------------- CUDA_VISIBLE_DEVICES

GPUS = [{"index": i, "uuid": f"GPU-{i}a{i}b-0000"} for i in range(4)]


@pytest.mark.parametrize("value,visible", [
    (None, [0, 1, 2, 3]),
    ("", []),
    ("0,1", [0, 1]),
    ("2,0", [2, 0]),
    ("0,9,1", [0]),  # CUDA stops at the first invalid index
    ("1,1", []),  # a repeated index hides every GPU
    ("0, 2", [0, 2]),
    ("GPU-2a2b,GPU-0a0b-0000", [2, 0]),  # unique UUID prefixes
    ("GPU-", []),  # ambiguous prefix: CUDA stops there
    ("MIG-GPU-1a1b/1/0", None),
])
def test_visible_gpu_indices(value, visible):
    assert visible_gpu_indices(value, GPUS) == visible


def test_cuda_visible_devices_compares_like_with_like():
    data = healthy()
    data["cuda_visible_devices"] = "0,1,2,3"
    for view in ("torch", "tensorflow"):
        data[view]["device_count"] = 4
        data[view]["devices"] = data[view]["devices"][:4]
    outcome = judge(data, Expect(gpus_per_node=4))
    assert outcome.status is Status.PASS, outcome.details
    assert any("shows 4 of the 8 GPUs" in d for d in outcome.details)
    # A problem on a GPU the job cannot see is not this job's problem.
    data["nvml"]["gpus"][6]["remap_failure"] = True
    assert judge(data, Expect(gpus_per_node=4)).status is Status.PASS
    expected_eight = judge(data, Expect(gpus_per_node=8))
    assert expected_eight.status is Status.FAIL and kinds(expected_eight) == ["count"]
    assert expected_eight.findings[0].fix == GpuVisibility.fixes["framework-count"]  # CUDA_VISIBLE_DEVICES, not a lost GPU


def test_all_gpus_hidden_skips_with_the_reason():
    data = healthy()
    data["cuda_visible_devices"] = ""
    for view in ("torch", "tensorflow"):
        data[view]["device_count"] = 0
        data[view]["devices"] = []
    outcome = judge(data)
    assert outcome.status is Status.SKIP and kinds(outcome) == ["no-gpu"]
    assert "hides all 8 GPUs" in outcome.summary  # the reason names the setting that hides them


# ------------------------------------------------------------------------ per-GPU judgement


def test_unsupported_fields_are_not_judged():
    data = healthy()
    for gpu in data["nvml"]["gpus"]:
        for key in ("ecc_enabled", "ecc_volatile_uncorrected", "remap_pending", "remap_failure", "throttle_reason_samples",
                    "temperature_c", "temperature_slowdown_c", "persistence_mode", "pcie_gen_current", "pcie_gen_max",
                    "nvlink_links", "nvlink_links_up", "memory_free_bytes"):
            gpu[key] = None
    outcome = judge(data)
    assert outcome.status is Status.PASS, outcome.details
    assert not any(m.name == "hottest GPU" for m in outcome.measurements)


def test_a_throttle_reason_counts_only_in_most_readings():
    data = healthy()
    data["nvml"]["gpus"][1]["throttle_reason_samples"] = [0x8, 0x1, 0x1]  # one transient HW slowdown
    assert judge(data).status is Status.PASS
    data["nvml"]["gpus"][1]["throttle_reason_samples"] = [0x8, 0x8, 0x1]
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "throttled") == ["GPU 1"]
    data["nvml"]["gpus"][1]["throttle_reason_samples"] = [0x80] * 3
    assert kinds(judge(data), Status.FAIL) == ["throttled"]  # the power brake
    data["nvml"]["gpus"][1]["throttle_reason_samples"] = [0x20] * 3
    assert judge(data).status is Status.WARN


def test_hot_idle_gpu_warns():
    data = healthy()
    data["nvml"]["gpus"][4]["temperature_c"] = 82
    outcome = judge(data)
    assert outcome.status is Status.WARN and named(outcome, "hot-idle") == ["GPU 4"]
    assert judge(data, max_idle_temperature_c=85).status is Status.PASS


def test_processes_and_memory_in_use():
    data = healthy()
    gpu = data["nvml"]["gpus"][0]
    gpu["processes"] = [{"pid": 4242, "name": "python3", "used_bytes": 2 * 1024**3}]
    outcome = judge(data)
    assert outcome.status is Status.WARN and kinds(outcome) == ["processes"]
    assert "pid 4242 (python3) 2.0 GiB" in outcome.findings[0].message  # the process is named, with its memory
    gpu["memory_free_bytes"] = gpu["memory_total_bytes"] // 2
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "memory-in-use") == ["GPU 0"]
    least = next(m for m in outcome.measurements if m.name == "least free GPU memory")
    assert least.value == pytest.approx(0.5, abs=1e-3) and least.ok is False


def test_ecc_off_and_persistence_off_warn():
    data = healthy()
    data["nvml"]["gpus"][2]["ecc_enabled"] = False
    data["nvml"]["gpus"][2]["ecc_volatile_uncorrected"] = None
    outcome = judge(data)
    assert outcome.status is Status.WARN and named(outcome, "ecc-off") == ["GPU 2"]
    assert judge(data, require_ecc=False).status is Status.PASS
    data = healthy()
    data["nvml"]["gpus"][7]["persistence_mode"] = False
    outcome = judge(data)
    assert outcome.status is Status.WARN and named(outcome, "persistence-off") == ["GPU 7"]


def test_nvlink_down_on_one_gpu_fails():
    data = healthy()
    data["nvml"]["gpus"][3]["nvlink_links_up"] = 16
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "nvlink-down") == ["GPU 3"]
    # Against an explicit expectation every GPU counts, even when all agree.
    data = healthy()
    for gpu in data["nvml"]["gpus"]:
        gpu["nvlink_links_up"] = 12
    assert judge(data).status is Status.PASS
    assert judge(data, expected_nvlink_links=18).status is Status.FAIL


def test_pcie_width_degraded_at_idle_warns_when_no_load_reading():
    data = healthy()
    data["nvml"]["gpus"][5]["pcie_width_current"] = 8
    for device in data["torch"]["devices"]:
        device["pcie_under_load"] = None
    outcome = judge(data)
    assert outcome.status is Status.WARN and named(outcome, "pcie-degraded") == ["GPU 5"]


def test_gpu_nvml_cannot_read_fails():
    data = healthy()
    data["nvml"]["gpus"][4] = {"index": 4, "error": "NVMLError_GpuIsLost: GPU is lost"}
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "gpu-unreadable") == ["GPU 4"]


def test_a_lost_gpu_is_named_once_with_what_was_read_before():
    data = healthy()
    gpu = data["nvml"]["gpus"][3]
    data["nvml"]["gpus"][3] = {"index": 3, "name": gpu["name"], "uuid": gpu["uuid"], "pci_bus_id": gpu["pci_bus_id"],
                               "lost": True, "error": "NVMLError_GpuIsLost: GPU is lost (while reading temperature)",
                               "unsupported": [], "errors": {}}
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "gpu-lost") == ["GPU 3"]
    assert "gpu-unreadable" not in kinds(outcome)


def test_a_gpu_without_ecc_warns_unless_ecc_is_not_required():
    data = healthy()
    gpu = data["nvml"]["gpus"][2]
    gpu.update(ecc_enabled=None, ecc_pending_enabled=None, unsupported=gpu.get("unsupported", []) + ["ecc_mode"])
    assert named(judge(data), "ecc-unsupported") == ["GPU 2"]
    assert "ecc-unsupported" not in kinds(judge(data, require_ecc=False))
    gpu["unsupported"].remove("ecc_mode")  # ECC unknown for another reason (an error): not said to be absent
    assert "ecc-unsupported" not in kinds(judge(data))


def test_mixed_models_warn():
    data = healthy()
    data["nvml"]["gpus"][7]["name"] = "NVIDIA H100 PCIe"
    assert judge(data).status is Status.WARN and kinds(judge(data)) == ["mixed-models"]


# ------------------------------------------------------------------------------- products


def test_wrong_product_fails_naming_the_device():
    data = healthy()
    data["torch"]["devices"][4]["max_rel_error"] = 0.37
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "product-wrong") == ["torch cuda:4"]
    correct = next(m for m in outcome.measurements if m.name == "GPUs computing correctly")
    assert (correct.value, correct.threshold, correct.ok) == (7, 8, False)


def test_nan_product_and_cuda_error_fail():
    data = healthy()
    data["torch"]["devices"][1].update(finite=False, max_rel_error=None)
    data["torch"]["devices"][2] = {"index": 2, "error": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}
    outcome = judge(data)
    assert outcome.status is Status.FAIL
    assert named(outcome, "product-wrong") == ["torch cuda:1"] and named(outcome, "product-failed") == ["torch cuda:2"]


def test_tensorflow_products_are_judged_when_torch_is_absent():
    data = healthy()
    data["torch"] = {"framework": "torch", "installed": False}
    for device in data["tensorflow"]["devices"]:
        device.update(max_rel_error=3e-7, finite=True, matmul_s=0.01)
    data["tensorflow"]["devices"][6]["max_rel_error"] = 0.5
    outcome = judge(data)
    assert outcome.status is Status.FAIL and named(outcome, "product-wrong") == ["tensorflow cuda:6"]


def test_no_framework_ran_a_product_on_visible_gpus_fails():
    data = healthy()
    for device in data["torch"]["devices"]:
        for key in ("max_rel_error", "finite", "matmul_s"):
            device.pop(key)
    assert kinds(judge(data)) == ["no-product"]


# --------------------------------------------------------------------- frameworks and driver


def test_cpu_only_torch_on_a_gpu_node_fails():
    data = healthy()
    data["torch"].update(version="2.5.1+cpu", cuda=None, cudnn=None, nccl=None, device_count=0, cuda_available=False,
                         devices=[])
    outcome = judge(data)
    assert outcome.status is Status.FAIL and "framework-count" in kinds(outcome, Status.FAIL)
    assert "(a CPU-only build)" in outcome.findings[0].message  # says why torch sees none


def test_framework_outside_expect_frameworks_only_warns():
    data = healthy()
    data["tensorflow"].update(is_cuda_build=False, cuda=None, device_count=0, devices=[])
    # Required by the config: FAIL. (Without any `frameworks`, a CPU-only tensorflow beside a CUDA
    # torch is information: test_cpu_only_tensorflow_beside_gpu_torch_is_information.)
    assert judge(data, Expect(frameworks=["torch", "tensorflow"])).status is Status.FAIL
    outcome = judge(data, Expect(frameworks=["torch"]))
    assert outcome.status is Status.WARN and kinds(outcome) == ["framework-count"]


def test_probe_that_hung_fails_on_a_gpu_node():
    data = healthy()
    data["torch"] = {"framework": "torch", "importable": None, "error": "probe did not finish: python did not finish within 120s"}
    outcome = judge(data)
    assert outcome.status is Status.FAIL and "framework-probe" in kinds(outcome, Status.FAIL)


def test_broken_driver_fails_even_when_no_gpus_are_expected():
    data = facts("no_driver_cpu_node.json")
    data["nvml"] = {"available": False, "error_kind": "error", "error": "NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch."}
    outcome = judge(data)
    assert outcome.status is Status.FAIL and kinds(outcome) == ["nvml-broken"]


@pytest.mark.parametrize("runtime,driver,status", [
    ("12.4", "12.4", Status.PASS),
    ("11.8", "12.4", Status.PASS),
    ("12.6", "12.4", Status.WARN),
    ("13.0", "12.4", Status.FAIL),
])
def test_runtime_vs_driver(runtime, driver, status):
    assert runtime_vs_driver(runtime, driver)[0] is status


def test_runtime_vs_driver_without_either_is_not_judged():
    assert runtime_vs_driver(None, "12.4") is None
    assert runtime_vs_driver("12.4", None) is None


def test_framework_built_for_newer_cuda_than_the_driver():
    data = healthy()
    data["nvml"]["cuda_driver_version"] = "12.2"
    data["nvml"]["driver_version"] = "535.104.05"
    outcome = judge(data)
    assert outcome.status is Status.WARN and set(kinds(outcome)) == {"cuda-newer-than-driver"}
    assert outcome.findings[0].message.startswith("torch 2.5.1+cu124")  # each framework build is named
    data["torch"]["cuda"] = "13.0"
    assert judge(data).status is Status.FAIL


def test_rocm_torch_without_nvml_is_judged_on_its_own_count():
    data = facts("no_driver_cpu_node.json")
    data["torch"].update(hip="6.2.41133", device_count=8, cuda_available=True,
                         devices=[{"index": i, "max_rel_error": 4e-7, "finite": True} for i in range(8)])
    data["tensorflow"] = {"framework": "tensorflow", "installed": False}
    outcome = judge(data, Expect(gpus_per_node=8))
    assert outcome.status is Status.PASS, outcome.details
    assert any("ROCm" in d for d in outcome.details)


# ---------------------------------------------------------------------------- small helpers


def test_version_encodings():
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(None) is None
    assert dotted_cudnn(90100) == "9.1.0"
    assert dotted_cudnn(8906) == "8.9.6"
    assert dotted_nccl((2, 21, 5)) == "2.21.5"
    assert dotted_nccl(21805) == "2.18.5"
    assert dotted_nccl(2708) == "2.7.8"
    assert throttle_reason_names(0x48) == ["hw_slowdown", "hw_thermal_slowdown"]


def test_compare_product_catches_a_corrupted_entry():
    a, b, reference = reference_inputs(64)
    good = (a.astype("float64") @ b.astype("float64"))
    assert compare_product(good, reference)["max_rel_error"] == 0.0
    bad = good.copy()
    bad[7, 9] += 1.0
    result = compare_product(bad, reference)
    assert result["finite"] and result["max_rel_error"] > CHECK.params_from().matmul_max_rel_error
    bad[0, 0] = float("nan")
    assert compare_product(bad, reference) == {"finite": False, "max_rel_error": None}


@pytest.mark.torch
def test_float32_product_in_torch_is_within_the_default_tolerance():
    torch = pytest.importorskip("torch")
    from preflight.workers.gpu_probe import matmul_check

    size = 512
    a, b, reference = reference_inputs(size)
    result = matmul_check(torch, torch.from_numpy(a), torch.from_numpy(b), reference)
    assert result["finite"]
    # Real float32 arithmetic deviates from float64 but stays far inside the tolerance.
    assert 0 < result["max_rel_error"] < CHECK.params_from().matmul_max_rel_error / 10


# ----------------------------------------------------------- NVML collection, API shape only


class FakeNvml:
    """The real pynvml module's constants and errors, with the queries answered as a Hopper GPU would.

    Only the queries are replaced; any function the collector calls that the real bindings lack
    fails here as it would on a GPU node.
    """

    def __init__(self, gpus: int = 2, event_reasons: bool = True) -> None:
        import pynvml

        self._real = pynvml
        self.gpus = gpus
        self.event_reasons = event_reasons
        self.shutdowns = 0

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if callable(value) and name.startswith("nvml") and not isinstance(value, type):
            raise AttributeError(f"the fake does not answer {name}; add it with the documented behaviour")
        return value

    def _fail(self, code):
        raise self._real.NVMLError(code)

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shutdowns += 1
    def nvmlSystemGetDriverVersion(self): return "550.54.15"
    def nvmlSystemGetCudaDriverVersion(self): return 12040
    def nvmlSystemGetProcessName(self, pid): return b"python3"
    def nvmlDeviceGetCount(self): return self.gpus
    def nvmlDeviceGetHandleByIndex(self, index): return index
    def nvmlDeviceGetName(self, h): return b"NVIDIA H100 80GB HBM3"
    def nvmlDeviceGetUUID(self, h): return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"
    def nvmlDeviceGetPciInfo(self, h): return type("Pci", (), {"busId": f"00000000:{h:02X}:00.0".encode()})()
    def nvmlDeviceGetMemoryInfo(self, h): return type("Mem", (), {"total": 80, "free": 70, "used": 10})()
    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [type("P", (), {"pid": 4242, "usedGpuMemory": 10})()] if h == 1 else []
    def nvmlDeviceGetGraphicsRunningProcesses(self, h): return []
    def nvmlDeviceGetEccMode(self, h): return [1, 1]
    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter): return 0
    def nvmlDeviceGetRetiredPages(self, h, cause): self._fail(self._real.NVML_ERROR_NOT_SUPPORTED)
    def nvmlDeviceGetRetiredPagesPendingStatus(self, h): self._fail(self._real.NVML_ERROR_NOT_SUPPORTED)
    def nvmlDeviceGetRemappedRows(self, h): return (0, 1, 1, 0) if h == 1 else (0, 0, 0, 0)
    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if not self.event_reasons:
            self._fail(self._real.NVML_ERROR_FUNCTION_NOT_FOUND)
        return 0x1
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h): return 0x41
    def nvmlDeviceGetTemperature(self, h, sensor): return 33
    def nvmlDeviceGetTemperatureThreshold(self, h, kind): self._fail(self._real.NVML_ERROR_NOT_SUPPORTED)
    def nvmlDeviceGetPersistenceMode(self, h): return 1
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return 1
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return 5
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h): return 5
    def nvmlDeviceGetCurrPcieLinkWidth(self, h): return 16
    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return 16
    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            self._fail(self._real.NVML_ERROR_INVALID_ARGUMENT)
        return 0 if (h, link) == (1, 17) else 1
    def nvmlDeviceGetMigMode(self, h): self._fail(self._real.NVML_ERROR_UNKNOWN)


def test_nvml_collection_records_unsupported_fields_as_none(monkeypatch):
    from preflight.workers import gpu_nvml

    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts = gpu_nvml.nvml_facts(with_gpus=True, throttle_samples=2)
    assert fake.shutdowns == 1
    assert facts["available"] and facts["driver_version"] == "550.54.15" and facts["cuda_driver_version"] == "12.4"
    first, second = facts["gpus"]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["pci_bus_id"] == "00000000:00:00.0"
    assert first["retired_pages_dbe"] is None and "retired_pages_pending" in first["unsupported"]
    assert first["temperature_slowdown_c"] is None and "temperature_slowdown" in first["unsupported"]
    assert first["mig_enabled"] is None and "Unknown Error" in first["errors"]["mig_mode"]
    assert first["throttle_reason_samples"] == [1, 1]
    assert (first["nvlink_links"], first["nvlink_links_up"]) == (18, 18)
    assert second["processes"] == [{"pid": 4242, "used_bytes": 10, "name": "python3"}]
    assert second["remap_pending"] is True and second["remapped_rows_uncorrectable"] == 1
    assert second["nvlink_links_up"] == 17
    json.dumps(facts)
    # Judged as a node: the dead link and the pending remap on the second GPU.
    outcome = judge({"cuda_visible_devices": None, "nvml": facts, "torch": {"framework": "torch", "installed": False},
                     "tensorflow": {"framework": "tensorflow", "installed": False}})
    assert outcome.status is Status.FAIL
    assert named(outcome, "nvlink-down") == ["GPU 1"] and named(outcome, "remap-pending") == ["GPU 1"]


def test_nvml_collection_falls_back_to_throttle_reasons_on_older_drivers(monkeypatch):
    from preflight.workers import gpu_nvml

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus=1, event_reasons=False))
    gpu = gpu_nvml.nvml_facts(throttle_samples=1)["gpus"][0]
    assert gpu["throttle_reason_samples"] == [0x41]
    assert throttle_reason_names(0x41) == ["gpu_idle", "hw_thermal_slowdown"]


@pytest.mark.parametrize("code,kind", [("NVML_ERROR_LIBRARY_NOT_FOUND", "no_driver"),
                                       ("NVML_ERROR_DRIVER_NOT_LOADED", "no_driver"),
                                       ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "error")])
def test_nvml_start_failures_are_classified(monkeypatch, code, kind):
    from preflight.workers import gpu_nvml

    fake = FakeNvml()
    fake.nvmlInit = lambda: fake._fail(getattr(fake._real, code))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts = gpu_nvml.nvml_facts()
    assert facts["available"] is False and facts["error_kind"] == kind
    assert facts["error"].startswith("NVMLError_")


def test_cpu_only_tensorflow_beside_gpu_torch_is_information():
    # tensorflow-cpu installed next to a CUDA torch, no `frameworks` configured: not a missing GPU.
    data = healthy()
    data["tensorflow"].update(is_cuda_build=False, cuda=None, device_count=0, devices=[])
    outcome = judge(data, Expect(gpus_per_node=8))
    assert outcome.status is Status.PASS, outcome.details
    assert kinds(outcome, Status.PASS) == ["cpu-only-framework"]
    tf_count = next(m for m in outcome.measurements if m.name == "GPUs visible (tensorflow)")
    assert tf_count.value == 0 and tf_count.threshold is None  # shown, not judged
    # A CUDA build of tensorflow that sees no GPU is still a FAIL.
    data["tensorflow"]["is_cuda_build"] = True
    assert "framework-count" in kinds(judge(data))
    assert judge(data).status is Status.FAIL


def test_no_driver_reads_by_what_is_on_the_pci_bus():
    """A CPU node says "no NVIDIA GPU on this node" (SKIP); GPUs on the bus without a driver FAIL."""
    data = facts("no_driver_cpu_node.json")
    cpu_node = judge({**data, "pci_gpus": []})
    assert cpu_node.status is Status.SKIP and kinds(cpu_node) == ["no-gpu"]
    assert "no NVIDIA GPU on this node" in cpu_node.summary  # the reason says what the bus showed
    on_bus = [{"address": f"0000:{b:02x}:00.0", "class": "0x030200", "device": "0x2330", "driver": None}
              for b in (0x18, 0x2a)]
    gpu_node = judge({**data, "pci_gpus": on_bus})
    assert gpu_node.status is Status.FAIL
    assert kinds(gpu_node, Status.FAIL) == ["driver-missing"]
    assert any("nvidia-smi" in fix for fix in gpu_node.remediation)
    # Facts recorded before the bus was read keep the old wording: nothing is claimed that was not seen.
    assert "no NVIDIA GPU" not in judge(data).summary


def test_pending_page_retirement_warns_or_fails_as_a_pending_remap_does():
    data = healthy()
    data["nvml"]["gpus"][2]["retired_pages_pending"] = True
    outcome = judge(data)
    assert outcome.status is Status.WARN and kinds(outcome, Status.WARN) == ["pages-pending"]
    assert named(outcome, "pages-pending") == ["GPU 2"]
    assert judge(data, fail_on_pending_remap=True).status is Status.FAIL


def test_a_driver_that_lists_no_gpu_skips_unless_gpus_are_expected():
    data = healthy()
    data["nvml"]["gpus"] = []
    for view in ("torch", "tensorflow"):
        data[view]["device_count"], data[view]["devices"] = 0, []
    outcome = judge(data)
    assert outcome.status is Status.SKIP and kinds(outcome) == ["no-gpu"]
    assert data["nvml"]["driver_version"] in outcome.summary
    assert judge(data, Expect(gpus_per_node=8)).status is Status.FAIL


def test_frameworks_that_see_gpus_without_nvml_warn_that_health_was_not_read():
    data = healthy()
    data["nvml"] = {"available": False, "error": "NVML Shared Library Not Found", "error_kind": "missing"}
    outcome = judge(data)
    assert "nvml-unavailable" in kinds(outcome, Status.WARN)
    assert not any(m.name == "GPUs visible (NVML)" for m in outcome.measurements)


def test_a_framework_count_names_the_cuda_error():
    data = healthy()
    data["torch"]["device_count"] = 7
    data["torch"]["cuda_error"] = "CUDA error: unknown error"
    outcome = judge(data)
    count = next(f for f in outcome.findings if f.id == "gpu.visibility.framework-count")
    assert "CUDA error: unknown error" in count.message and count.level is Status.FAIL


def test_driver_610_deprecation_notes_do_not_hide_the_cuda_check():
    # nvidia-smi -q from driver 610 (as published in github.com/Jaded-Encoding-Thaumaturgy/vs-jetpack
    # issue 295) appends a note to the names it deprecated, and prints the values again under new names.
    from preflight_checks.gpu.nvidia_smi import parse_query

    header = (TESTS / "data" / "real" / "nvidia_smi" / "vsjetpack295_610.47_deprecated_header.txt").read_text()
    nvml = parse_query(header)
    assert (nvml["driver_version"], nvml["cuda_driver_version"]) == ("610.47", "13.3")
    data = healthy()
    data["nvml"].update(driver_version=nvml["driver_version"], cuda_driver_version=nvml["cuda_driver_version"])
    data["torch"]["cuda"] = "13.4"
    outcome = judge(data)
    assert "cuda-newer-than-driver" in kinds(outcome)
    assert any("(driver 610.47)" in f.message for f in outcome.findings if f.id.endswith("cuda-newer-than-driver"))


def test_where_python_cannot_load_nvml_the_drivers_nvidia_smi_is_read_instead(tmp_path, monkeypatch):
    # A stand-in for the driver's nvidia-smi that prints a real `nvidia-smi -q -x` (an RTX 4090 on
    # driver 535, tests/data/real/nvidia_smi_xml), as the node's own binary would.
    from preflight.engine.context import NodeContext
    from preflight_checks.gpu.visibility import from_nvidia_smi

    report = TESTS / "data" / "real" / "nvidia_smi_xml" / "netdata_rtx-4090-driver-535.xml"
    binary = tmp_path / "bin" / "nvidia-smi"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\n[ \"$1 $2\" = '-q -x' ] && exec cat {report}\nexit 2\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}:{os.environ['PATH']}")
    ctx = NodeContext(node="n", output_dir=tmp_path, scratch_dir=tmp_path / "s", expect=Expect(), timeout_s=30)
    unloadable = {"available": False, "error_kind": "no_bindings", "error": "pynvml is not importable: No module named 'pynvml'"}
    nvml = from_nvidia_smi(ctx, unloadable)
    assert (nvml["source"], nvml["available"], nvml["device_count"]) == ("nvidia-smi", True, 1)
    assert nvml["gpus"][0]["name"] == "NVIDIA GeForce RTX 4090" and nvml["bindings_error"] == unloadable["error"]
    assert ctx.evidence[0].command.endswith("nvidia-smi -q -x") and ctx.evidence[0].exit_code == 0
    outcome = GpuVisibility().evaluate({"nvml": nvml, "cuda_visible_devices": None}, Params(), Expect())
    assert outcome.summary == "GPU 0 (00000000:84:00.0): ECC is off"  # its health was read, as NVML's would be
    assert any("nvidia-smi -q -x" in line for line in outcome.details)
    no_driver = {"available": False, "error_kind": "no_driver", "error": "NVMLError_DriverNotLoaded"}
    assert from_nvidia_smi(ctx, no_driver) is no_driver  # the driver is absent: nvidia-smi would say the same
