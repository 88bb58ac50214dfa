"""`nvidia-smi -q` read into the facts preflight.workers.gpu_nvml records from NVML. Pure.

For a node where only nvidia-smi's report is at hand (a support bundle, a saved `nvidia-smi -q`),
and to judge real readings of many drivers with the same rules as live NVML facts. The report is
an indented tree of "Name : value" lines, one `GPU 00000000:xx:00.0` block per GPU. Names moved
between drivers: "Clocks Throttle Reasons" became "Clocks Event Reasons" (535), ECC counts moved from
"Single Bit / Double Bit / Total" to "SRAM/DRAM Correctable/Uncorrectable" (Ampere+), and the
temperature thresholds became T.Limit offsets (Ada, Hopper and later: "GPU T.Limit Temp" is the
margin to the limit, "GPU Slowdown T.Limit Temp" the margin at which slowdown begins). Driver 610
renamed "Driver Version" and "CUDA Version" to "KMD Version" and "CUDA UMD Version" and appends
"[Deprecated; ...]" to the old names' values.
"""

from __future__ import annotations

import re
from typing import Any

from preflight.workers.gpu_nvml import THROTTLE_REASON_BITS
from preflight_checks.gpu.smi_values import number, version_value, whole, yes

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_REASONS = {
    "idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting", "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown", "sync boost": "sync_boost", "sw thermal slowdown": "sw_thermal_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown", "hw power brake slowdown": "hw_power_brake_slowdown",
    "display clock setting": "display_clock_setting",
}


def _tree(lines: list[str]) -> dict[str, Any]:
    """Nested dict of one GPU block: sections by indentation, "Name : value" leaves."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for line in lines:
        if not line.strip() or line.strip() == "[...]":
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else root
        name, colon, value = line.strip().partition(":")
        name = name.strip()
        if colon and value.strip():
            parent.setdefault(name, value.strip())
        else:
            section: dict[str, Any] = {}
            existing = parent.get(name)
            parent[name] = existing if isinstance(existing, dict) else section
            stack.append((indent, parent[name]))
    return root


def _get(tree: dict[str, Any], *path: str) -> Any:
    node: Any = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _uncorrectable(section: Any) -> int | None:
    """Volatile/Aggregate uncorrectable ECC errors, in either layout (None when not reported)."""
    if not isinstance(section, dict):
        return None
    total, seen = 0, False
    for name, value in section.items():
        if isinstance(value, dict) and name == "Double Bit":
            count = whole(value.get("Total"))
        elif isinstance(value, str) and "Uncorrectable" in name and "Threshold" not in name:
            count = whole(value)
        else:
            continue
        if count is not None:
            total, seen = total + count, True
    return total if seen else None


def _gpu(index: int, bus_id: str, tree: dict[str, Any]) -> dict[str, Any]:
    mib = 1024 ** 2
    memory = _get(tree, "FB Memory Usage") or {}
    reasons = _get(tree, "Clocks Event Reasons") or _get(tree, "Clocks Throttle Reasons") or {}
    mask = 0
    for name, value in (reasons.items() if isinstance(reasons, dict) else []):
        bit = _REASONS.get(name.lower())
        if bit and isinstance(value, str) and value.strip() == "Active":
            mask |= THROTTLE_REASON_BITS[bit]
    temp = _get(tree, "Temperature") or {}
    rows = _get(tree, "Remapped Rows")
    link = _get(tree, "PCI", "GPU Link Info") or {}
    retired = _get(tree, "Retired Pages") or {}
    processes = _get(tree, "Processes")
    return {
        "index": index,
        "name": _get(tree, "Product Name"),
        "uuid": _get(tree, "GPU UUID"),
        "pci_bus_id": _get(tree, "PCI", "Bus Id") or bus_id,
        "memory_total_bytes": int(number(memory.get("Total")) * mib) if number(memory.get("Total")) is not None else None,
        "memory_used_bytes": int(number(memory.get("Used")) * mib) if number(memory.get("Used")) is not None else None,
        "memory_free_bytes": int(number(memory.get("Free")) * mib) if number(memory.get("Free")) is not None else None,
        "processes": [] if processes == "None" else None,
        "ecc_enabled": yes(_get(tree, "ECC Mode", "Current")),
        "ecc_pending_enabled": yes(_get(tree, "ECC Mode", "Pending")),
        "ecc_volatile_uncorrected": _uncorrectable(_get(tree, "ECC Errors", "Volatile")),
        "ecc_aggregate_uncorrected": _uncorrectable(_get(tree, "ECC Errors", "Aggregate")),
        "retired_pages_sbe": whole(retired.get("Single Bit ECC")) if isinstance(retired, dict) else None,
        "retired_pages_dbe": whole(retired.get("Double Bit ECC")) if isinstance(retired, dict) else None,
        "retired_pages_pending": yes(retired.get("Pending Page Blacklist")) if isinstance(retired, dict) else None,
        "remapped_rows_correctable": whole(rows.get("Correctable Error")) if isinstance(rows, dict) else None,
        "remapped_rows_uncorrectable": whole(rows.get("Uncorrectable Error")) if isinstance(rows, dict) else None,
        "remap_pending": yes(rows.get("Pending")) if isinstance(rows, dict) else None,
        "remap_failure": yes(rows.get("Remapping Failure Occurred")) if isinstance(rows, dict) else None,
        "throttle_reason_samples": [mask] if reasons else None,
        "temperature_c": whole(temp.get("GPU Current Temp")),
        "temperature_slowdown_c": whole(temp.get("GPU Slowdown Temp")),
        "temperature_margin_c": whole(temp.get("GPU T.Limit Temp")),
        "temperature_slowdown_tlimit_c": whole(temp.get("GPU Slowdown T.Limit Temp")),
        "temperature_shutdown_tlimit_c": whole(temp.get("GPU Shutdown T.Limit Temp")),
        "persistence_mode": yes(_get(tree, "Persistence Mode")),
        "pcie_gen_current": whole(_get(link, "PCIe Generation", "Current")),
        "pcie_gen_max": whole(_get(link, "PCIe Generation", "Max")),
        "pcie_width_current": whole(_get(link, "Link Width", "Current")),
        "pcie_width_max": whole(_get(link, "Link Width", "Max")),
        "mig_enabled": yes(_get(tree, "MIG Mode", "Current")),
        "unsupported": [],
        "errors": {},
    }


def report_trees(text: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """`nvidia-smi -q` as trees: the header's, and each GPU block's with its bus id, in report order.
    A leaf keeps nvidia-smi's text ("81559 MiB", "N/A"); a section is a dict."""
    header: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        found = _GPU_HEADER.match(line.strip()) if not line.startswith(" ") else None
        if found:
            blocks.append((found.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    return _tree(header), [(bus, _tree(lines)) for bus, lines in blocks]


def parse_query(text: str) -> dict[str, Any]:
    """{"available", "driver_version", "cuda_driver_version", "device_count", "attached", "gpus"} from
    `nvidia-smi -q`, in the shape gpu_nvml.nvml_facts returns; a GPU the report leaves out is absent.
    The XML report (`nvidia-smi -q -x`) is read by nvidia_smi_xml into the same facts."""
    if text.lstrip().startswith(("<?xml", "<!DOCTYPE nvidia_smi_log", "<nvidia_smi_log")):
        from preflight_checks.gpu.nvidia_smi_xml import parse_query_xml

        return parse_query_xml(text)
    top, trees = report_trees(text)
    gpus = [_gpu(index, bus, tree) for index, (bus, tree) in enumerate(trees)]
    cuda = version_value(top.get("CUDA UMD Version") or top.get("CUDA Version"))
    return {"available": bool(gpus), "error_kind": None, "error": None,
            "driver_version": version_value(top.get("KMD Version") or top.get("Driver Version")),
            "cuda_driver_version": cuda,
            "attached": whole(top.get("Attached GPUs")), "device_count": len(gpus), "gpus": gpus}
