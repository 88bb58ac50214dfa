"""Rules of CUDA, PCIe and the frameworks that gpu.visibility's judging applies. Pure functions.

Which GPUs CUDA_VISIBLE_DEVICES shows, what a PCIe link carries, whether a CUDA runtime runs on a
driver, whether a framework build is CPU-only.
"""

from __future__ import annotations

from typing import Any

from preflight.core.model import Status

# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def visible_gpu_indices(cuda_visible_devices: str | None, gpus: list[dict[str, Any]]) -> list[int] | None:
    """NVML indices of the GPUs a CUDA program sees, following the rules torch and CUDA apply.

    Unset: all. Integers are taken up to the first invalid entry (CUDA stops there); a repeated
    entry hides every GPU; "GPU-" entries are UUIDs or unique UUID prefixes. Returns None when the
    list names MIG instances, which have no NVML index of their own.
    Integer entries follow CUDA's device order, which matches NVML's PCI order on a node of one GPU model.
    """
    indices = [g["index"] for g in gpus]
    if cuda_visible_devices is None:
        return indices
    entries = [e.strip() for e in cuda_visible_devices.split(",")]
    if entries and entries[0].startswith("MIG-"):
        return None
    chosen: list[int] = []
    if entries and entries[0].startswith("GPU-"):
        for entry in entries:
            if not entry.startswith("GPU-"):
                break
            matches = [g["index"] for g in gpus if str(g.get("uuid") or "").startswith(entry)]
            if len(matches) != 1:
                break  # unknown or ambiguous: CUDA stops at the first such entry
            if matches[0] in chosen:
                return []
            chosen.append(matches[0])
        return chosen
    for entry in entries:
        digits = ""
        for pos, char in enumerate(entry):
            if char.isdigit() or (pos == 0 and char in "+-"):
                digits += char
            else:
                break
        try:
            number = int(digits)
        except ValueError:
            break
        if number < 0 or number >= len(indices):
            break
        if number in chosen:
            return []
        chosen.append(number)
    return [indices[n] for n in chosen]


# GB/s per lane and direction after line encoding (8b/10b to gen2, 128b/130b from gen3).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_link_gbps(generation: int | None, width: int | None) -> float | None:
    if not generation or not width or generation not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[generation] * width


def _version_tuple(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = str(text).split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def runtime_vs_driver(runtime: str | None, driver_cuda: str | None) -> tuple[Status, str] | None:
    """Judge a CUDA runtime a framework was built with against the driver's highest CUDA version.

    Same or older: fine. Newer minor within the same major: runs under CUDA minor-version
    compatibility, without the features that need the newer driver and without PTX JIT of newer
    code (WARN). Newer major: the runtime refuses to start (FAIL).
    """
    built, supported = _version_tuple(runtime), _version_tuple(driver_cuda)
    if built is None or supported is None:
        return None
    if built <= supported:
        return Status.PASS, f"CUDA {runtime} within the driver's CUDA {driver_cuda}"
    if built[0] > supported[0]:
        return Status.FAIL, f"built with CUDA {runtime}, the driver supports at most CUDA {driver_cuda}: it cannot start"
    return Status.WARN, (f"built with CUDA {runtime}, newer than the driver's CUDA {driver_cuda}: runs only under "
                         "minor-version compatibility (no PTX JIT for newer code, no features of the newer driver)")


def cpu_only(view: dict[str, Any]) -> bool:
    if view.get("framework") == "torch":
        return not view.get("cuda") and not view.get("hip")
    return not view.get("is_cuda_build") and not view.get("is_rocm_build")


def majority(samples: list[int], bit: int) -> bool:
    return sum(1 for s in samples if s & bit) * 2 > len(samples)


# ------------------------------------------------------------------------------------ thermal


def thermal_slowdown_text(gpu: dict[str, Any]) -> str:
    """Why the GPU is at its thermal slowdown point, or "" when it is not (or cannot be told). Pure.

    A margin is judged as a margin: NVML's nvmlDeviceGetMarginTemperature is "the thermal margin
    temperature (distance to nearest slowdown threshold)", nvidia-smi's "GPU T.Limit Temp"; it shrinks
    as the GPU heats and goes negative past the limit. Where the driver also gives the margin at which
    hardware slowdown begins (NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT, "GPU Slowdown T.Limit Temp",
    -2 C on H100: 2 C past the limit), the GPU is at slowdown once its margin is at or below that;
    without it, at a margin of 0. Only GPUs without a margin are judged by the old absolute threshold
    (nvmlDeviceGetTemperatureThreshold(SLOWDOWN), "GPU Slowdown Temp"): temperature at or above it.
    """
    margin, at = gpu.get("temperature_margin_c"), gpu.get("temperature_slowdown_tlimit_c")
    if margin is not None:
        limit = at if at is not None else 0
        if margin <= limit:
            past = f"{-margin} C past" if margin < 0 else ("at" if margin == 0 else f"{margin} C short of")
            return f"{past} its thermal limit (T.Limit margin {margin} C; slowdown begins at {limit} C)"
        return ""
    temp, slowdown = gpu.get("temperature_c"), gpu.get("temperature_slowdown_c")
    if temp is not None and slowdown and temp >= slowdown:
        return f"{temp} C, at its slowdown threshold of {slowdown} C"
    return ""


# --------------------------------------------------------------------------- the node's image


def device_image(facts: dict[str, Any]) -> dict[str, Any]:
    """The image fields gpu.visibility's facts hold (see Check.image): what NVML and the frameworks
    report at run time. The GPU model is the most common name (models joined by "+" on a mixed node)."""
    from collections import Counter

    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), dict) else {}
    torch = facts.get("torch") if isinstance(facts.get("torch"), dict) else {}
    tf = facts.get("tensorflow") if isinstance(facts.get("tensorflow"), dict) else {}
    gpus = [g for g in nvml.get("gpus") or [] if isinstance(g, dict)]
    names = [str(g["name"]) for g in gpus if g.get("name")] or \
        [str(d["name"]) for d in torch.get("devices") or [] if isinstance(d, dict) and d.get("name")]
    vbios = sorted({str(g.get("vbios_version") or g.get("vbios")) for g in gpus
                    if g.get("vbios_version") or g.get("vbios")})
    count = nvml.get("device_count") if isinstance(nvml.get("device_count"), int) else None
    return {"driver": nvml.get("driver_version"), "cuda": torch.get("cuda") or tf.get("cuda"),
            "cuda_driver": nvml.get("cuda_driver_version"), "nccl": torch.get("nccl"),
            "torch": torch.get("version"), "tensorflow": tf.get("version"),
            "gpu_model": "+".join(n for n, _ in Counter(names).most_common()) if names else None,
            "gpu_count": count if count is not None else (len(names) if names else None),
            "vbios": ",".join(vbios) if vbios else None}
