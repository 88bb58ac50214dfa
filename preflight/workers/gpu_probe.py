"""What a framework (torch or tensorflow) sees of the GPUs, in a process of its own.

    python -m preflight.workers.gpu_probe torch --output facts.json [--devices] [--matmul-size N]
    python -m preflight.workers.gpu_probe tensorflow --output facts.json [--devices] [--matmul-size N]

Without --devices it only records the framework's version and what it was built with (CUDA,
cuDNN, NCCL), touching no GPU. With --devices it counts the GPUs the framework sees (after
CUDA_VISIBLE_DEVICES) and runs a matrix product on each, compared against the same product in
float64 on the CPU: a GPU that is listed but computes wrong, or not at all, shows up here. torch
also reads each GPU's PCIe link under load and times pinned host<->device copies.

Each framework gets its own process so that a broken import or a hung GPU takes only the probe
down, and so that tensorflow, which by default reserves all GPU memory, never shares a process
with torch. Facts go to --output as JSON; a failure is a fact ("error"), not an exit status.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

from preflight.workers import wire

MATMUL_SEED = 20240611


def dotted_cudnn(version: int | None) -> str | None:
    """cuDNN 9 encodes 9.1.0 as 90100 (major*10000); cuDNN 8 and older 8.9.6 as 8906 (major*1000)."""
    if not version:
        return None
    if version >= 90000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def dotted_nccl(version: Any) -> str | None:
    """torch returns a tuple (2, 21, 5[, suffix]); very old torch returned NCCL_VERSION_CODE."""
    if version is None:
        return None
    if isinstance(version, (tuple, list)):
        return ".".join(str(part) for part in version)
    code = int(version)
    if code >= 20900:  # from NCCL 2.9 the code is major*10000 + minor*100 + patch
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def reference_inputs(size: int) -> tuple[Any, Any, Any]:
    """Seeded float32 inputs in [-1, 1) and their float64 product on the CPU, with numpy."""
    import numpy as np

    rng = np.random.default_rng(MATMUL_SEED)
    a = rng.uniform(-1.0, 1.0, (size, size)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, (size, size)).astype(np.float32)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return a, b, reference


def compare_product(result: Any, reference: Any) -> dict[str, Any]:
    """Largest deviation relative to the largest reference entry; finite-ness checked apart."""
    import numpy as np

    result = np.asarray(result, dtype=np.float64)
    finite = bool(np.isfinite(result).all())
    scale = float(np.abs(reference).max()) or 1.0
    error = float(np.abs(result - reference).max()) / scale if finite else None
    return {"finite": finite, "max_rel_error": error}


# ---------------------------------------------------------------------------------------- torch


def torch_facts(devices: bool, matmul_size: int, pcie_load_s: float, copy_mib: int = 256, copy_repeats: int = 5) -> dict[str, Any]:
    facts: dict[str, Any] = {"framework": "torch", "importable": False}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is a fact to report
        facts["error"] = _error(exc)
        return facts
    facts["importable"] = True
    facts["version"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    facts["hip"] = getattr(torch.version, "hip", None)
    try:
        facts["cudnn"] = dotted_cudnn(torch.backends.cudnn.version())
    except Exception as exc:  # noqa: BLE001
        facts["cudnn"], facts["cudnn_error"] = None, _error(exc)
    try:
        facts["nccl"] = dotted_nccl(torch.cuda.nccl.version())
    except Exception as exc:  # noqa: BLE001 - CPU builds have no NCCL at all
        facts["nccl"] = None
        facts["nccl_error"] = _error(exc) if torch.version.cuda else "not built with NCCL"
    if not devices:
        return facts

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            facts["device_count"] = int(torch.cuda.device_count())
            facts["cuda_available"] = bool(torch.cuda.is_available())
        except Exception as exc:  # noqa: BLE001
            facts["device_count"], facts["cuda_available"] = 0, False
            facts["cuda_error"] = _error(exc)
    # torch reports a failed CUDA initialisation (driver too old, no device node) as a warning.
    notes = [str(w.message) for w in caught if "cuda" in str(w.message).lower()]
    if notes and "cuda_error" not in facts:
        facts["cuda_error"] = notes[0]
    facts["devices"] = []
    if not facts["cuda_available"]:
        return facts

    a, b, reference = reference_inputs(matmul_size)
    facts["matmul"] = {"size": matmul_size, "dtype": "float32", "reference": "numpy float64 on the CPU"}
    nvml = _nvml_for_links()
    try:
        facts["fp32"] = _strict_fp32(torch)
        for index in range(facts["device_count"]):
            entry = _torch_device(torch, index, a, b, reference, nvml, pcie_load_s)
            if "error" not in entry and copy_mib > 0:
                try:
                    with numa_local(_bus_id(torch, nvml, index, entry.get("uuid"))) as numa:
                        entry["host_device"] = host_device_copy(torch, torch.device("cuda", index),
                                                                copy_mib * 2**20, copy_repeats)
                    entry["host_device"]["numa"] = numa
                except Exception as exc:  # noqa: BLE001
                    entry["host_device"] = {"error": _error(exc)}
            facts["devices"].append(entry)
    finally:
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
    return facts


def _strict_fp32(torch: Any) -> dict[str, Any]:
    """Plain IEEE float32 matmuls for the product: TF32 would differ from the float64 reference
    by ~1e-3 and hide nothing worth finding. Returns what was set, for the facts.

    Through the legacy switch, which torch keeps in step with the newer `fp32_precision` one.
    Setting only the newer one is not enough where TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 is set (NVIDIA's
    NGC PyTorch containers): the override turns the legacy state on at start-up, the two disagree,
    and torch 2.9+ raises "mix of the legacy and new APIs" before every cuBLAS matmul.
    """
    import os

    state: dict[str, Any] = {"override_env": os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")}
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        # The same consistency check cuBLAS calls make (Context::allowTF32CuBLAS).
        state["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError as exc:
        # A torch that keeps the two apart: set the newer switch too, so that both say IEEE.
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        state["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        state["note"] = f"both switches set: {_error(exc)[:120]}"
    state["fp32_precision"] = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    return state


def sysfs_bus_id(bus_id: str | None) -> str | None:
    """NVML's "00000000:18:00.0" (or torch's parts) as /sys/bus/pci/devices names it: "0000:18:00.0"."""
    if not bus_id:
        return None
    parts = str(bus_id).strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    try:
        return f"{int(parts[0], 16):04x}:{parts[1][-2:].zfill(2)}:{parts[2]}"
    except ValueError:
        return None


def parse_cpulist(text: str) -> set[int]:
    """The kernel's cpulist format ("0-15,32-47"); an empty or unreadable list is the empty set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


class numa_local:  # noqa: N801 - used as a context manager, like a function
    """Runs the block on the CPUs of the GPU's NUMA node (sysfs local_cpulist), then restores.

    Pinned host buffers allocated inside then also live on that node (first touch). The value is
    the record for the facts: {"bound": True, "cpus": "0-55"} or {"bound": False, "reason": ...}.
    """

    def __init__(self, bus_id: str | None, sysfs: str = "/sys/bus/pci/devices") -> None:
        self.bus_id, self.sysfs = bus_id, sysfs
        self.previous: set[int] | None = None

    def __enter__(self) -> dict[str, Any]:
        import os

        if not hasattr(os, "sched_setaffinity"):
            return {"bound": False, "reason": "this platform cannot set CPU affinity"}
        name = sysfs_bus_id(self.bus_id)
        if name is None:
            return {"bound": False, "reason": "the GPU's PCI bus id is unknown"}
        try:
            with open(f"{self.sysfs}/{name}/local_cpulist", encoding="ascii") as handle:
                text = handle.read().strip()
        except OSError as exc:
            return {"bound": False, "reason": f"cannot read {name}/local_cpulist: {exc.strerror or exc}"}
        allowed = os.sched_getaffinity(0)
        cpus = parse_cpulist(text) & allowed
        if not cpus:
            return {"bound": False, "reason": f"none of the GPU's CPUs ({text}) is allowed to this process"}
        self.previous = allowed
        os.sched_setaffinity(0, cpus)
        return {"bound": True, "cpus": text, "pci": name}

    def __exit__(self, *exc: Any) -> None:
        import os

        if self.previous is not None:
            os.sched_setaffinity(0, self.previous)


def _bus_id(torch: Any, nvml: Any, index: int, uuid: str | None) -> str | None:
    if nvml is not None and uuid and uuid.startswith("GPU-"):
        try:
            return _text_value(nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByUUID(uuid)).busId)
        except Exception:  # noqa: BLE001 - fall back to what torch knows
            pass
    props = torch.cuda.get_device_properties(index)
    if hasattr(props, "pci_bus_id"):
        return f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return None


def _text_value(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_for_links() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no NVML: the link is then only read at idle, by the check
        return None


def _torch_device(torch: Any, index: int, a: Any, b: Any, reference: Any, nvml: Any, pcie_load_s: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index}
    try:
        props = torch.cuda.get_device_properties(index)
        entry["name"] = props.name
        entry["total_memory_bytes"] = int(props.total_memory)
        # torch prints the CUDA UUID bare; NVML and CUDA_VISIBLE_DEVICES spell it "GPU-<lowercase hex>".
        uuid = str(getattr(props, "uuid", "") or "").lower()
        entry["uuid"] = f"GPU-{uuid}" if uuid and not uuid.startswith(("gpu-", "mig-")) else (
            uuid[:4].upper() + uuid[4:] if uuid else None)
    except Exception as exc:  # noqa: BLE001
        entry["error"] = _error(exc)
        return entry
    device = torch.device("cuda", index)
    try:
        da = torch.from_numpy(a).to(device)
        db = torch.from_numpy(b).to(device)
        entry.update(matmul_check(torch, da, db, reference))
        entry["pcie_under_load"] = _link_under_load(torch, nvml, entry.get("uuid"), da, db, device, pcie_load_s)
        del da, db
        torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - a CUDA error on one GPU is that GPU's finding
        entry["error"] = _error(exc)
    return entry


RATE_REPEATS = 3


def matmul_check(torch: Any, da: Any, db: Any, reference: Any) -> dict[str, Any]:
    """Multiply two tensors already on their device and compare with the float64 reference."""
    synchronize = torch.cuda.synchronize if da.device.type == "cuda" else (lambda device=None: None)
    synchronize(da.device)
    start = time.perf_counter()
    product = da @ db
    synchronize(da.device)
    seconds = time.perf_counter() - start
    # The rate: the same product again, warm (the first call above pays for cuBLAS's set-up), timed
    # RATE_REPEATS times, so that the GPU is compared with its peers on more than one reading.
    timed = []
    for _ in range(RATE_REPEATS):
        start = time.perf_counter()
        da @ db
        synchronize(da.device)
        timed.append(time.perf_counter() - start)
    return {"matmul_s": seconds, "matmul_rate_s": timed, **compare_product(product.cpu().numpy(), reference)}


def host_device_copy(torch: Any, device: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    """Pinned host memory to the GPU and back, timed with CUDA events, in GB/s (1e9 bytes).

    The figure nvbandwidth and the cloud vendors' health checks report as host<->device bandwidth:
    one GPU at a time, so it is the link and the host side being measured, not contention.
    """
    with torch.cuda.device(device):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        on_device = torch.empty(nbytes, dtype=torch.uint8, device=device)
        on_device.copy_(host, non_blocking=True)  # warm-up: first-touch and DMA set-up
        host.copy_(on_device, non_blocking=True)
        torch.cuda.synchronize(device)
        samples: dict[str, list[float]] = {"h2d": [], "d2h": []}
        for _ in range(max(1, repeats)):
            for direction, (target, source) in (("h2d", (on_device, host)), ("d2h", (host, on_device))):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                target.copy_(source, non_blocking=True)
                end.record()
                end.synchronize()
                samples[direction].append(nbytes / (start.elapsed_time(end) / 1000.0) / 1e9)
        del host, on_device
    return {"bytes": nbytes, "h2d_gbps_samples": samples["h2d"], "d2h_gbps_samples": samples["d2h"]}


def _link_under_load(torch: Any, nvml: Any, uuid: str | None, da: Any, db: Any, device: Any, load_s: float) -> dict[str, Any] | None:
    """PCIe generation and width read while the GPU computes.

    GPUs lower their PCIe link speed when idle to save power, so a reading at idle says little
    about the link; after some busy time, and with kernels still queued, it shows what training gets.
    """
    if nvml is None or not uuid or not uuid.startswith("GPU-"):
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # noqa: BLE001 - NVMLError, or old bindings without the function: read at idle only
        return None
    deadline = time.monotonic() + load_s
    while time.monotonic() < deadline:
        for _ in range(8):
            da @ db
        torch.cuda.synchronize(device)
    for _ in range(16):
        da @ db  # still queued while NVML reads the link
    from preflight.workers.gpu_nvml import pcie_link

    link = pcie_link(nvml, handle)
    torch.cuda.synchronize(device)
    return link


# ----------------------------------------------------------------------------------- tensorflow


def tensorflow_facts(devices: bool, matmul: bool, matmul_size: int) -> dict[str, Any]:
    facts: dict[str, Any] = {"framework": "tensorflow", "importable": False}
    try:
        import tensorflow as tf
    except Exception as exc:  # noqa: BLE001
        facts["error"] = _error(exc)
        return facts
    facts["importable"] = True
    facts["version"] = tf.__version__
    try:
        build = dict(tf.sysconfig.get_build_info())
    except Exception as exc:  # noqa: BLE001
        build = {}
        facts["build_info_error"] = _error(exc)
    facts["is_cuda_build"] = bool(build.get("is_cuda_build", False))
    facts["is_rocm_build"] = bool(build.get("is_rocm_build", False))
    facts["cuda"] = build.get("cuda_version")
    facts["cudnn"] = build.get("cudnn_version")
    if not devices:
        return facts
    try:
        gpus = tf.config.list_physical_devices("GPU")
    except Exception as exc:  # noqa: BLE001
        facts["device_count"], facts["devices"], facts["gpu_error"] = 0, [], _error(exc)
        return facts
    facts["device_count"] = len(gpus)
    facts["devices"] = [{"index": i, "name": gpu.name} for i, gpu in enumerate(gpus)]
    if not gpus or not matmul:
        return facts
    for gpu in gpus:
        try:
            # Otherwise tensorflow reserves nearly all memory of every GPU at the first op.
            tf.config.experimental.set_memory_growth(gpu, True)
        except Exception:  # noqa: BLE001 - already initialised; the product still runs
            pass
    tf.config.experimental.enable_tensor_float_32_execution(False)
    a, b, reference = reference_inputs(matmul_size)
    facts["matmul"] = {"size": matmul_size, "dtype": "float32", "reference": "numpy float64 on the CPU"}
    for entry in facts["devices"]:
        try:
            with tf.device(f"/GPU:{entry['index']}"):
                start = time.perf_counter()
                product = tf.linalg.matmul(tf.constant(a), tf.constant(b)).numpy()
                entry["matmul_s"] = time.perf_counter() - start
            entry.update(compare_product(product, reference))
        except Exception as exc:  # noqa: BLE001
            entry["error"] = _error(exc)
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("framework", choices=["torch", "tensorflow"])
    parser.add_argument("--output", help="write the facts here (default: stdout)")
    parser.add_argument("--devices", action="store_true", help="count the GPUs and run a product on each")
    parser.add_argument("--matmul", action="store_true", help="tensorflow: also run the product (torch always does)")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--pcie-load-s", type=float, default=0.5)
    parser.add_argument("--copy-mib", type=int, default=256, help="torch: pinned host<->device copy size (0: none)")
    parser.add_argument("--copy-repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.framework == "torch":
        facts = torch_facts(args.devices, args.matmul_size, args.pcie_load_s, args.copy_mib, args.copy_repeats)
    else:
        facts = tensorflow_facts(args.devices, args.matmul, args.matmul_size)
    text = wire.dumps(facts, sort_keys=True, default=str)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
