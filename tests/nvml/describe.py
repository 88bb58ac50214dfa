"""Node descriptions for the stand-in NVML library, from real `nvidia-smi -q` readings.

    python tests/nvml/describe.py          # rewrite tests/nvml/descriptions/
    python tests/nvml/describe.py --check  # exit 1 when a description differs from what it would write

Each reading in tests/data/real/nvidia_smi/ becomes `<reading>.json`, keeping its source (the
reading's path and where it was published). What `nvidia-smi -q` prints as N/A, or a reading leaves
out, is left out, and the stand-in answers NVML_ERROR_NOT_SUPPORTED for it. The fault variants
(`fault-*.json`) are a reading with one fault put in, each saying which and how.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
READINGS = ROOT / "tests" / "data" / "real" / "nvidia_smi"
OUT = HERE / "descriptions"
MIB = 1024 ** 2

# nvmlDeviceGetFieldValues ids (nvml.h)
FI_SHUTDOWN_TLIMIT, FI_SLOWDOWN_TLIMIT = 193, 194


def _num(text: Any) -> float | None:
    found = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text) if isinstance(text, str) else None
    return float(found.group(1)) if found else None


def _int(text: Any) -> int | None:
    value = _num(text)
    return int(value) if value is not None else None


def _hex(text: Any) -> int | None:
    return int(text, 16) if isinstance(text, str) and re.fullmatch(r"0x[0-9A-Fa-f]+", text.strip()) else None


def _text(text: Any) -> str | None:
    return text if isinstance(text, str) and text not in ("N/A", "[N/A]", "") else None


def _section(tree: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = tree
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _drop_none(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in kept.items() if v != {}}
    return value


def _correctable(section: dict[str, Any]) -> int | None:
    counts = [_int(v) for k, v in section.items() if isinstance(v, str) and "Correctable" in k]
    if isinstance(section.get("Single Bit"), dict):
        counts.append(_int(section["Single Bit"].get("Total")))
    counts = [c for c in counts if c is not None]
    return sum(counts) if counts else None


def block_processes(text: str) -> list[list[dict[str, Any]] | None]:
    """Each GPU block's process list (None where the block has no Processes section); read from the
    lines, since a list of processes repeats its names."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", line):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    out: list[list[dict[str, Any]] | None] = []
    for lines in blocks:
        found: list[dict[str, Any]] | None = None
        inside = False
        for line in lines:
            name, _, value = (part.strip() for part in line.partition(":"))
            if line.startswith("    ") and not line.startswith("     "):
                inside = name == "Processes"
                if inside:
                    found = [] if value in ("", "None") else None
                continue
            if not inside or found is None:
                continue
            if name == "Process ID":
                found.append({"pid": int(value)})
            elif found and name == "Type":
                found[-1]["type"] = value
            elif found and name == "Name":
                found[-1]["name"] = value
            elif found and name == "Used GPU Memory" and _num(value) is not None:
                found[-1]["used_memory"] = int(_num(value) * MIB)
        out.append(found)
    return out


def gpu_description(facts: dict[str, Any], tree: dict[str, Any], processes: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One GPU: the facts preflight's parser read from the block, plus what it does not keep."""
    pci = _section(tree, "PCI")
    link = _section(pci, "GPU Link Info")
    memory = _section(tree, "FB Memory Usage")
    temp = _section(tree, "Temperature")
    power = _section(tree, "GPU Power Readings") or _section(tree, "Power Readings")
    ecc_on = facts.get("ecc_enabled")
    inferred = []
    if ecc_on is None and "ECC Mode" not in tree and facts.get("ecc_volatile_uncorrected") is not None:
        ecc_on = True
        facts = {**facts, "ecc_pending_enabled": True}
        inferred.append("ecc: on, as the reading elides its ECC Mode section and prints error counts (N/A with ECC off)")
    ecc = None
    if ecc_on is not None:
        ecc = {"current": ecc_on, "pending": facts.get("ecc_pending_enabled")}
        if ecc_on:
            errors = _section(tree, "ECC Errors")
            ecc["volatile"] = {"corrected": _correctable(_section(errors, "Volatile")),
                               "uncorrected": facts.get("ecc_volatile_uncorrected")}
            ecc["aggregate"] = {"corrected": _correctable(_section(errors, "Aggregate")),
                                "uncorrected": facts.get("ecc_aggregate_uncorrected")}
    rows = None
    if facts.get("remap_pending") is not None:
        rows = {"correctable": facts["remapped_rows_correctable"], "uncorrectable": facts["remapped_rows_uncorrectable"],
                "pending": facts["remap_pending"], "failure": facts["remap_failure"]}
    pages = None
    if facts.get("retired_pages_sbe") is not None:
        pages = {"sbe": facts["retired_pages_sbe"], "dbe": facts["retired_pages_dbe"],
                 "pending": facts["retired_pages_pending"]}
    mig = None
    if facts.get("mig_enabled") is not None:
        mig = {"current": int(facts["mig_enabled"]), "pending": int(bool(_text(_section(tree, "MIG Mode").get("Pending"))
                                                                         == "Enabled"))}
    clocks = {name: _int(_section(tree, "Clocks").get(label)) for name, label in
              (("graphics", "Graphics"), ("sm", "SM"), ("memory", "Memory"), ("video", "Video"))}
    max_clocks = {name: _int(_section(tree, "Max Clocks").get(label)) for name, label in
                  (("graphics", "Graphics"), ("sm", "SM"), ("memory", "Memory"), ("video", "Video"))}
    usage, limit = _num(power.get("Power Draw")), _num(power.get("Current Power Limit") or power.get("Enforced Power Limit"))
    description = {
        "name": facts.get("name"),
        "uuid": facts.get("uuid"),
        "serial": _text(tree.get("Serial Number")),
        "vbios_version": _text(tree.get("VBIOS Version")),
        "minor_number": _int(tree.get("Minor Number")),
        "pci": {"bus_id": facts.get("pci_bus_id"), "domain": _hex(pci.get("Domain")), "bus": _hex(pci.get("Bus")),
                "device": _hex(pci.get("Device")), "pci_device_id": _hex(pci.get("Device Id")),
                "pci_subsystem_id": _hex(pci.get("Sub System Id"))},
        "pcie": {"gen_current": facts.get("pcie_gen_current"), "gen_max": facts.get("pcie_gen_max"),
                 "gen_gpu_max": _int(_section(link, "PCIe Generation").get("Device Max")),
                 "width_current": facts.get("pcie_width_current"), "width_max": facts.get("pcie_width_max")},
        "memory": {"total": facts.get("memory_total_bytes"), "free": facts.get("memory_free_bytes"),
                   "used": facts.get("memory_used_bytes"),
                   "reserved": int(_num(memory["Reserved"]) * MIB) if _num(memory.get("Reserved")) is not None else None},
        "utilization": {"gpu": _int(_section(tree, "Utilization").get("Gpu")),
                        "memory": _int(_section(tree, "Utilization").get("Memory"))},
        "processes": processes,
        "persistence_mode": facts.get("persistence_mode"),
        "ecc": ecc,
        "retired_pages": pages,
        "remapped_rows": rows,
        "clocks": clocks,
        "max_clocks": max_clocks,
        "clocks_event_reasons": (facts.get("throttle_reason_samples") or [None])[0],
        "temperature": {"gpu": facts.get("temperature_c"), "slowdown": facts.get("temperature_slowdown_c"),
                        "shutdown": _int(temp.get("GPU Shutdown Temp")), "gpu_max": _int(temp.get("GPU Max Operating Temp")),
                        "margin": facts.get("temperature_margin_c")},
        "field_values": {str(FI_SHUTDOWN_TLIMIT): facts.get("temperature_shutdown_tlimit_c"),
                         str(FI_SLOWDOWN_TLIMIT): facts.get("temperature_slowdown_tlimit_c")},
        "power": {"usage_mw": round(usage * 1000) if usage is not None else None,
                  "enforced_limit_mw": round(limit * 1000) if limit is not None else None},
        "mig": mig,
        "inferred": inferred or None,
    }
    return _drop_none(description)


def describe_reading(path: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from preflight_checks.gpu.nvidia_smi import parse_query, report_trees

    text = path.read_text()
    facts = parse_query(text)
    top, trees = report_trees(text)
    source = json.loads(path.with_name(path.name + ".source.json").read_text())
    cuda = facts.get("cuda_driver_version")
    major, _, minor = (cuda or "").partition(".")
    encoded = int(major) * 1000 + int(minor or 0) * 10 if major.isdigit() else None
    return _drop_none({
        "source": {"reading": str(path.relative_to(ROOT)), "published": source.get("source"), "note": source.get("note")},
        "driver_version": facts.get("driver_version"),
        "nvml_version": f"{major}.{facts['driver_version']}" if major.isdigit() and facts.get("driver_version") else None,
        "cuda_driver_version": encoded,
        "attached_in_reading": facts.get("attached"),
        "gpus": [gpu_description(g, tree, procs) for g, (_, tree), procs in zip(facts["gpus"], trees, block_processes(text))],
    })


# ------------------------------------------------------------------------------------ faults

H100 = "gpud_535.183.01_h100_sw_thermal"


def _gpu_missing(d: dict[str, Any]) -> None:
    d["gpus"].pop()


def _ecc_double_bit(d: dict[str, Any]) -> None:
    ecc = d["gpus"][0]["ecc"]
    ecc["volatile"]["uncorrected"] += 2
    ecc["aggregate"]["uncorrected"] += 2


def _pcie_x8_gen3(d: dict[str, Any]) -> None:
    d["gpus"][1]["pcie"].update(gen_current=3, width_current=8)


def _nvlink_down(d: dict[str, Any]) -> None:
    for gpu in d["gpus"]:
        gpu["nvlink"] = [{"active": True} for _ in range(18)]
    d["gpus"][1]["nvlink"][7]["active"] = False


def _lost_after(calls: int) -> Callable[[dict[str, Any]], None]:
    def fault(d: dict[str, Any]) -> None:
        d["gpus"][1]["lost"] = {"after_calls": calls}
    return fault


def _lost_from_start(d: dict[str, Any]) -> None:
    d["gpus"][1]["lost"] = {"from_call": "nvmlDeviceGetHandleByIndex_v2"}


def _old_driver(d: dict[str, Any]) -> None:
    d["missing_functions"] = ["nvmlDeviceGetMarginTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
                              "nvmlDeviceGetFieldValues", "nvmlDeviceGetGpuMaxPcieLinkGeneration"]


def _version_mismatch(d: dict[str, Any]) -> None:
    d["init_error"] = "LIB_RM_VERSION_MISMATCH"


# name: (reading, what is put in, how)
FAULTS: dict[str, tuple[str, str, Callable[[dict[str, Any]], None]]] = {
    "gpu-missing": (H100, "the second GPU is gone from the driver's count (fallen off the bus)", _gpu_missing),
    "ecc-double-bit": (H100, "GPU 0 has 2 uncorrectable (double-bit) DRAM ECC errors, volatile and aggregate",
                       _ecc_double_bit),
    "pcie-x8-gen3": (H100, "GPU 1's PCIe link trained down to gen3 x8 (of gen5 x16)", _pcie_x8_gen3),
    "nvlink-down": (H100, "both GPUs get the 18 NVLink links of an H100 SXM5 (NVIDIA's H100 datasheet; `nvidia-smi -q` "
                    "does not print link states), link 7 of GPU 1 down", _nvlink_down),
    "gpu-lost-midrun": (H100, "GPU 1 answers NVML_ERROR_GPU_IS_LOST after its 6th call", _lost_after(6)),
    "gpu-lost": (H100, "GPU 1 answers NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetHandleByIndex_v2 on", _lost_from_start),
    "old-driver": (H100, "a driver without nvmlDeviceGetMarginTemperature, nvmlDeviceGetCurrentClocksEventReasons, "
                   "nvmlDeviceGetFieldValues and nvmlDeviceGetGpuMaxPcieLinkGeneration (FUNCTION_NOT_FOUND)", _old_driver),
    "version-mismatch": (H100, "nvmlInit answers LIB_RM_VERSION_MISMATCH (driver upgraded, kernel module not reloaded)",
                         _version_mismatch),
}


def descriptions() -> dict[str, dict[str, Any]]:
    # A reading trimmed to its header (no GPU block) describes no node: the stand-in serves none of it.
    out = {path.stem: made for path in sorted(READINGS.glob("*.txt")) if (made := describe_reading(path))["gpus"]}
    for name, (base, what, fault) in FAULTS.items():
        variant = copy.deepcopy(out[base])
        fault(variant)
        variant["fault"] = {"derived_from": f"{base}.json", "what": what}
        out[f"fault-{name}"] = variant
    return out


def render(description: dict[str, Any]) -> str:
    return json.dumps(description, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    wanted = {f"{name}.json": render(d) for name, d in descriptions().items()}
    if "--check" in argv:
        have = {p.name: p.read_text() for p in OUT.glob("*.json")}
        stale = sorted(n for n in wanted.keys() | have.keys() if wanted.get(n) != have.get(n))
        for name in stale:
            print(f"{OUT / name}: not what tests/nvml/describe.py writes", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(exist_ok=True)
    for stale in set(p.name for p in OUT.glob("*.json")) - wanted.keys():
        (OUT / stale).unlink()
    for name, text in wanted.items():
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
