"""`nvidia-smi -q -x` (the XML report) read into the facts preflight.workers.gpu_nvml records. Pure.

The same report as `nvidia-smi -q` (read by checks/gpu/nvidia_smi.py), with tags for labels (the DTD
nvsmi_device_vN.dtd; N grew from 4 to 12 over the drivers): `clocks_throttle_reasons` became
`clocks_event_reasons` (535), ECC counts `single_bit/double_bit/total` became
`sram_uncorrectable/dram_uncorrectable` (Ampere+), remapped rows `remapped_row_unc/_pending/_failure`,
and T.Limit offsets `gpu_temp_tlimit`, `gpu_temp_slow_tlimit_threshold`, `gpu_temp_max_tlimit_threshold`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from preflight.workers.gpu_nvml import THROTTLE_REASON_BITS
from preflight_checks.gpu.smi_values import number, version_value, whole, yes

_REASON_TAG = re.compile(r"^clocks_(?:throttle|event)_reason_(.+)$")
_REASON_NAMES = {"display_clocks_setting": "display_clock_setting"}


class NvidiaSmiXmlError(ValueError):
    """The text is not an nvidia-smi XML report."""


def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    if found is None or found.text is None:
        return None
    text = " ".join(found.text.split())
    return text or None


def _uncorrectable(section: ET.Element | None) -> int | None:
    """Volatile/aggregate uncorrectable ECC errors in either layout; None when not reported."""
    if section is None:
        return None
    counts = [whole(_text(section, "double_bit/total"))]
    counts += [whole(_text(section, tag)) for tag in ("sram_uncorrectable", "dram_uncorrectable")]
    counts = [c for c in counts if c is not None]
    return sum(counts) if counts else None


def _mib(node: ET.Element, path: str) -> int | None:
    value = number(_text(node, path))
    return int(value * 1024 ** 2) if value is not None else None


def _gpu(index: int, gpu: ET.Element) -> dict[str, Any]:
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    mask = 0
    for child in list(reasons) if reasons is not None else []:
        found = _REASON_TAG.match(child.tag)
        name = _REASON_NAMES.get(found.group(1), found.group(1)) if found else None
        if name in THROTTLE_REASON_BITS and (child.text or "").strip() == "Active":
            mask |= THROTTLE_REASON_BITS[name]
    rows = gpu.find("remapped_rows")
    rows = rows if rows is not None and len(rows) else None
    processes = gpu.find("processes")
    return {
        "index": index,
        "name": _text(gpu, "product_name"),
        "uuid": _text(gpu, "uuid"),
        "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
        "memory_total_bytes": _mib(gpu, "fb_memory_usage/total"),
        "memory_used_bytes": _mib(gpu, "fb_memory_usage/used"),
        "memory_free_bytes": _mib(gpu, "fb_memory_usage/free"),
        "processes": [] if processes is not None and not len(processes) else None,
        "ecc_enabled": yes(_text(gpu, "ecc_mode/current_ecc")),
        "ecc_pending_enabled": yes(_text(gpu, "ecc_mode/pending_ecc")),
        "ecc_volatile_uncorrected": _uncorrectable(gpu.find("ecc_errors/volatile")),
        "ecc_aggregate_uncorrected": _uncorrectable(gpu.find("ecc_errors/aggregate")),
        "retired_pages_sbe": whole(_text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
        "retired_pages_dbe": whole(_text(gpu, "retired_pages/double_bit_retirement/retired_count")),
        "retired_pages_pending": yes(_text(gpu, "retired_pages/pending_blacklist")),
        "remapped_rows_correctable": whole(_text(rows, "remapped_row_corr")),
        "remapped_rows_uncorrectable": whole(_text(rows, "remapped_row_unc")),
        "remap_pending": yes(_text(rows, "remapped_row_pending")),
        "remap_failure": yes(_text(rows, "remapped_row_failure")),
        "throttle_reason_samples": [mask] if reasons is not None else None,
        "temperature_c": whole(_text(gpu, "temperature/gpu_temp")),
        "temperature_slowdown_c": whole(_text(gpu, "temperature/gpu_temp_slow_threshold")),
        "temperature_margin_c": whole(_text(gpu, "temperature/gpu_temp_tlimit")),
        "temperature_slowdown_tlimit_c": whole(_text(gpu, "temperature/gpu_temp_slow_tlimit_threshold")),
        "temperature_shutdown_tlimit_c": whole(_text(gpu, "temperature/gpu_temp_max_tlimit_threshold")),
        "persistence_mode": yes(_text(gpu, "persistence_mode")),
        "pcie_gen_current": whole(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        "pcie_gen_max": whole(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
        "pcie_width_current": whole(_text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")),
        "pcie_width_max": whole(_text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")),
        "mig_enabled": yes(_text(gpu, "mig_mode/current_mig")),
        "unsupported": [],
        "errors": {},
    }


def parse_query_xml(text: str) -> dict[str, Any]:
    """The facts of parse_query (the text report), from `nvidia-smi -q -x`; NvidiaSmiXmlError when the
    text is no nvidia_smi_log document."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise NvidiaSmiXmlError(f"not XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiXmlError(f"an XML document whose root is <{root.tag}>, not <nvidia_smi_log>")
    gpus = [_gpu(index, gpu) for index, gpu in enumerate(root.findall("gpu"))]
    cuda = version_value(_text(root, "cuda_version"))
    return {"available": bool(gpus), "error_kind": None, "error": None,
            "driver_version": version_value(_text(root, "driver_version")),
            "cuda_driver_version": cuda,
            "attached": whole(_text(root, "attached_gpus")), "device_count": len(gpus), "gpus": gpus}
