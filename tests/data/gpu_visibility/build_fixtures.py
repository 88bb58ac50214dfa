"""Writes the GPU fixtures of gpu.visibility next to this file: `python build_fixtures.py`.

No GPU node was available when these were made, so the facts are built, not recorded: field by
field in the shape preflight.workers.gpu_nvml and gpu_probe produce, with values taken from the
NVML API reference (docs.nvidia.com/deploy/nvml-api) and the figures `nvidia-smi -q` prints on an
8-GPU H100 SXM node. Each fixture says so in its "_source" key. Where NVML documents a field as
unsupported on Hopper (page retirement, replaced by row remapping since Ampere), it is None and
listed under "unsupported", as the collector records it.

`python build_fixtures.py --record FILE.json` instead writes the real facts of the machine it runs
on, from GpuVisibility.collect(): no_driver_cpu_node.json was recorded that way on a machine without
an NVIDIA driver, and the same command records a real GPU node.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = (
    "Built from the NVML API reference (nvmlDeviceGetMemoryInfo, nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors, "
    "nvmlDeviceGetRemappedRows, nvmlDeviceGetCurrentClocksEventReasons bit values from nvml.h, "
    "nvmlDeviceGetTemperatureThreshold, nvmlDeviceGetCurr/MaxPcieLinkGeneration and Width, nvmlDeviceGetNvLinkState, "
    "nvmlSystemGetCudaDriverVersion encoding 1000*major+10*minor) and typical `nvidia-smi -q` figures of an HGX H100 "
    "80GB SXM node; memory used at idle as NVML's v1 nvmlDeviceGetMemoryInfo counts it (the driver's reservation, "
    "~0.5 GiB); host<->device copy rates near the 52 GB/s floor cloud health checks use for H100 on PCIe gen5 x16, "
    "timed bound to each GPU's NUMA node; not recorded on real hardware."
)
BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
           "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
TOTAL = 85520809984  # 81559 MiB, what NVML reports for an H100 80GB HBM3
# nvmlDeviceGetMemoryInfo (v1 struct, what nvidia-ml-py's default call fills) counts the driver's own
# reservation as used: 0.3-0.6 GiB on an idle H100 80GB; nvidia-smi's "Reserved" line is the v2 split.
USED_IDLE = 534118400  # 509 MiB
# Two sockets; GPUs 0-3 hang off NUMA node 0, 4-7 off node 1 (sysfs local_cpulist of each GPU's PCI device).
NUMA_CPUS = ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle
SW_THERMAL, HW_THERMAL = 0x20, 0x40


def uuid(index: int) -> str:
    return f"GPU-5f1c{index:04x}-8d2e-4b7a-9c3d-0e1f2a3b4c{index:02x}"


def nvml_gpu(index: int) -> dict:
    return {
        "index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid(index), "pci_bus_id": BUS_IDS[index],
        "memory_total_bytes": TOTAL, "memory_free_bytes": TOTAL - USED_IDLE, "memory_used_bytes": USED_IDLE,
        "processes": [],
        "ecc_enabled": True, "ecc_pending_enabled": True, "ecc_volatile_uncorrected": 0, "ecc_aggregate_uncorrected": 0,
        # Hopper uses row remapping; page retirement queries answer NVML_ERROR_NOT_SUPPORTED.
        "retired_pages_sbe": None, "retired_pages_dbe": None, "retired_pages_pending": None,
        "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
        "throttle_reason_samples": [GPU_IDLE, GPU_IDLE, GPU_IDLE],
        "temperature_c": 31 + index % 4, "temperature_slowdown_c": 87,
        "persistence_mode": True,
        # At idle the link runs at gen1 to save power; under load it trains to gen5.
        "pcie_gen_current": 1, "pcie_gen_max": 5, "pcie_gen_gpu_max": 5, "pcie_width_current": 16, "pcie_width_max": 16,
        "nvlink_links": 18, "nvlink_links_up": 18,
        "mig_enabled": False,
        "unsupported": ["retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"],
        "errors": {},
    }


def torch_device(index: int) -> dict:
    return {
        "index": index, "name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": TOTAL, "uuid": uuid(index),
        "matmul_s": 0.0021, "finite": True, "max_rel_error": 2.9e-07 + index * 1e-09,
        "pcie_under_load": {"gen_current": 5, "width_current": 16},
        # 256 MiB pinned copies, 5 each way: ~87% of the 63 GB/s a gen5 x16 link carries.
        "host_device": {"bytes": 268435456,
                        "h2d_gbps_samples": [round(55.1 + 0.1 * ((index + k) % 3 - 1), 2) for k in range(5)],
                        "d2h_gbps_samples": [round(55.6 + 0.1 * ((index + k) % 3 - 1), 2) for k in range(5)],
                        "numa": {"bound": True, "cpus": NUMA_CPUS[index],
                                 "pci": "0000:" + BUS_IDS[index][9:].lower()}},
    }


def healthy(gpus: int = 8) -> dict:
    return {
        "_source": SOURCE,
        "cuda_visible_devices": None,
        "nvml": {"available": True, "error_kind": None, "error": None, "driver_version": "550.54.15",
                 "bindings": {"nvidia-ml-py": "12.550.52", "pynvml": None},
                 "cuda_driver_version": "12.4", "device_count": gpus, "gpus": [nvml_gpu(i) for i in range(gpus)]},
        "torch": {"framework": "torch", "importable": True, "version": "2.5.1+cu124", "cuda": "12.4", "hip": None,
                  "cudnn": "9.1.0", "nccl": "2.21.5", "device_count": gpus, "cuda_available": True,
                  "fp32": {"override_env": None, "allow_tf32": False, "fp32_precision": None},
                  "matmul": {"size": 2048, "dtype": "float32", "reference": "numpy float64 on the CPU"},
                  "devices": [torch_device(i) for i in range(gpus)]},
        "tensorflow": {"framework": "tensorflow", "importable": True, "version": "2.17.0", "is_cuda_build": True,
                       "is_rocm_build": False, "cuda": "12.3", "cudnn": "8", "device_count": gpus,
                       "devices": [{"index": i, "name": f"/physical_device:GPU:{i}"} for i in range(gpus)]},
        "params": {"matmul_size": 2048},
    }


def fixtures() -> dict[str, dict]:
    out: dict[str, dict] = {"healthy_8x_h100.json": healthy()}

    # One GPU fell off the bus: the driver lists 7 and so does everything above it.
    missing = healthy(7)
    missing["_case"] = "7 of 8 GPUs present; expect.gpus_per_node = 8"
    out["gpu_missing.json"] = missing

    ecc = healthy()
    ecc["_case"] = "GPU 3: 2 volatile uncorrectable ECC errors, one row remap pending"
    gpu = ecc["nvml"]["gpus"][3]
    gpu.update(ecc_volatile_uncorrected=2, ecc_aggregate_uncorrected=2, remapped_rows_uncorrectable=1, remap_pending=True)
    out["ecc_errors.json"] = ecc

    thermal = healthy()
    thermal["_case"] = "GPU 5 at its slowdown temperature, HW and SW thermal slowdown in every reading"
    gpu = thermal["nvml"]["gpus"][5]
    gpu.update(temperature_c=88, throttle_reason_samples=[SW_THERMAL | HW_THERMAL] * 3)
    out["thermal_throttle.json"] = thermal

    pcie = healthy()
    pcie["_case"] = "GPU 2's link trains to gen4 x8 of gen5 x16, under load and at idle"
    pcie["nvml"]["gpus"][2].update(pcie_gen_current=1, pcie_width_current=8)
    pcie["torch"]["devices"][2]["pcie_under_load"] = {"gen_current": 4, "width_current": 8}
    # gen4 x8 carries 15.75 GB/s; copies reach ~85% of that.
    pcie["torch"]["devices"][2]["host_device"].update(h2d_gbps_samples=[13.3, 13.4, 13.4, 13.5, 13.4],
                                                      d2h_gbps_samples=[13.5, 13.6, 13.6, 13.7, 13.6])
    out["pcie_degraded.json"] = pcie

    remap = healthy()
    remap["_case"] = "GPU 6: a row remapping failed (no spare rows left in a bank)"
    remap["nvml"]["gpus"][6].update(remapped_rows_uncorrectable=8, remap_failure=True, ecc_aggregate_uncorrected=9)
    out["remap_failure.json"] = remap

    mismatch = healthy()
    mismatch["_case"] = "NVML lists 8 GPUs, torch and tensorflow see 7 (CUDA cannot initialise GPU 7)"
    mismatch["torch"]["device_count"] = 7
    mismatch["torch"]["devices"] = mismatch["torch"]["devices"][:7]
    mismatch["tensorflow"]["device_count"] = 7
    mismatch["tensorflow"]["devices"] = mismatch["tensorflow"]["devices"][:7]
    out["torch_nvml_mismatch.json"] = mismatch

    mig = healthy()
    mig["_case"] = ("MIG enabled on all 8 GPUs; a CUDA process sees one MIG instance (CUDA enumerates at most one "
                    "per process), so one product runs where NVML lists 8 GPUs")
    for gpu in mig["nvml"]["gpus"]:
        gpu["mig_enabled"] = True
    instance = torch_device(0)
    instance.update(name="NVIDIA H100 80GB HBM3 MIG 7g.80gb", uuid="MIG-8c1a2b3c-4d5e-5f60-8a9b-0c1d2e3f4a5b",
                    total_memory_bytes=85144371200, pcie_under_load=None)
    mig["torch"].update(device_count=1, devices=[instance])
    mig["tensorflow"].update(device_count=1, devices=mig["tensorflow"]["devices"][:1])
    out["mig_1_of_8.json"] = mig
    return out


def record(path: Path) -> None:
    import platform
    import tempfile

    from preflight.core.check import Expect
    from preflight.engine.context import NodeContext
    from preflight_checks.gpu.visibility import GpuVisibility

    check = GpuVisibility()
    with tempfile.TemporaryDirectory() as scratch:
        ctx = NodeContext(node=platform.node(), output_dir=Path(scratch), scratch_dir=Path(scratch), expect=Expect(),
                          timeout_s=check.timeout_s)
        facts = check.collect(ctx, check.params_from())
    facts["_source"] = (f"Recorded with `python tests/data/gpu_visibility/build_fixtures.py --record {path.name}` "
                        f"(GpuVisibility.collect) on a real machine: {platform.platform()}, {platform.machine()}.")
    path.write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main() -> None:
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--record":
        record(HERE / sys.argv[2])
        return
    for name, facts in fixtures().items():
        (HERE / name).write_text(json.dumps(copy.deepcopy(facts), indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
