"""What NVML says about the driver and every GPU, as plain JSON-able facts.

Imported by the checks (it needs no framework, only the `pynvml` bindings of nvidia-ml-py) and
runnable on its own, `python -m preflight.workers.gpu_nvml`, to print the facts of a machine, for
example to record a fixture on a GPU node.

Every query that a GPU or driver does not support is recorded as None and listed under
"unsupported"; any other NVML error on one field is recorded under "errors" for that field. One
field that fails never costs the others.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from preflight.workers import wire

# Bits of nvmlClocksEventReasons (formerly nvmlClocksThrottleReasons), from nvml.h.
THROTTLE_REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

NO_DRIVER = "no_driver"  # libnvidia-ml is missing or the kernel driver is not loaded


def throttle_reason_names(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [name for name, bit in THROTTLE_REASON_BITS.items() if mask & bit]


def cuda_version_text(encoded: int | None) -> str | None:
    """NVML encodes the CUDA version as 1000 * major + 10 * minor (12040 is CUDA 12.4)."""
    if not encoded:
        return None
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class GpuLost(Exception):
    """NVML_ERROR_GPU_IS_LOST: the GPU stopped answering (fallen off the bus, Xid 79); every later
    query on it fails the same way, so reading it stops."""


def _lost(pynvml: Any, exc: BaseException) -> bool:
    return getattr(exc, "value", None) == getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", 15)


class _FieldReader:
    """Calls NVML queries for one GPU, keeping None plus a note for each query that fails (a lost GPU
    raises GpuLost instead)."""

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml
        self.unsupported: list[str] = []
        self.errors: dict[str, str] = {}
        self._not_supported = {
            getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),  # an older driver without this query
        }

    def read(self, name: str, query: Callable[[], Any]) -> Any:
        try:
            return query()
        except _nvml_error(self.pynvml) as exc:
            if _lost(self.pynvml, exc):
                raise GpuLost(f"{type(exc).__name__}: {exc} (while reading {name})") from exc
            if getattr(exc, "value", None) in self._not_supported:
                self.unsupported.append(name)
            else:
                self.errors[name] = str(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - old bindings (pynvml 11.x) lack functions and structs
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            return None


    def read_if(self, function: str, name: str, query: Callable[[], Any]) -> Any:
        """read(), for a query that bindings older than it lack: their absence is "unsupported"."""
        if not hasattr(self.pynvml, function):
            self.unsupported.append(name)
            return None
        return self.read(name, query)


def _nvml_error(pynvml: Any) -> type[BaseException]:
    return getattr(pynvml, "NVMLError", None) or Exception


def bindings_facts() -> dict[str, Any]:
    """Which NVML bindings are installed: nvidia-ml-py (NVIDIA's) and/or the old `pynvml` package.

    Both install a module named `pynvml`; pynvml 11.x ships its own copy, which shadows
    nvidia-ml-py's when installed after it and lacks the functions newer drivers and GPUs need.
    """
    from importlib import metadata

    found: dict[str, Any] = {}
    for dist in ("nvidia-ml-py", "pynvml"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _processes(pynvml: Any, handle: Any) -> list[dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for query in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        for proc in query(handle):
            used = getattr(proc, "usedGpuMemory", None)
            entry = found.setdefault(int(proc.pid), {"pid": int(proc.pid), "used_bytes": None, "name": None})
            if used is not None:
                entry["used_bytes"] = max(entry["used_bytes"] or 0, int(used))
    for entry in found.values():
        try:
            entry["name"] = _text(pynvml.nvmlSystemGetProcessName(entry["pid"]))
        except pynvml.NVMLError:
            pass  # the process may have ended, or lives in another PID namespace
    return sorted(found.values(), key=lambda e: e["pid"])


def _nvlink(pynvml: Any, handle: Any) -> tuple[int | None, int | None]:
    """(links the GPU has, links active); (None, None) when the GPU has no NVLink."""
    total = up = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            # Links past the ones this GPU has answer NOT_SUPPORTED or INVALID_ARGUMENT.
            if _lost(pynvml, exc):
                raise
            continue
        total += 1
        up += 1 if state == pynvml.NVML_FEATURE_ENABLED else 0
    return (total, up) if total else (None, None)


def pcie_link(pynvml: Any, handle: Any) -> dict[str, Any]:
    reader = _FieldReader(pynvml)
    return {
        "gen_current": reader.read("pcie_gen_current", lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "width_current": reader.read("pcie_width_current", lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
    }


def _throttle_mask(pynvml: Any, handle: Any) -> int:
    current = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if current is None:  # bindings older than the rename (nvidia-ml-py < 12.535, pynvml 11.x)
        return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
    try:
        return int(current(handle))
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
        return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


# nvmlFieldValue_t.valueType -> the member of its value union (nvml.h, nvmlValueType_t)
_FIELD_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _tlimit_fields(pynvml: Any, handle: Any) -> dict[str, int | None]:
    """The slowdown and shutdown T.Limit margins (NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT = 194,
    _SHUTDOWN_TLIMIT = 193) by nvmlDeviceGetFieldValues; None for a field the GPU does not report."""
    ids = {"slowdown": getattr(pynvml, "NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT", 194),
           "shutdown": getattr(pynvml, "NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT", 193)}
    values = pynvml.nvmlDeviceGetFieldValues(handle, list(ids.values()))
    out: dict[str, int | None] = {}
    for name, value in zip(ids, values):
        member = _FIELD_VALUE_MEMBERS.get(int(getattr(value, "valueType", 5)), "siVal")
        ok = int(getattr(value, "nvmlReturn", 0)) == 0
        out[name] = int(getattr(value.value, member)) if ok else None
    return out


def gpu_facts(pynvml: Any, index: int, throttle_samples: int = 3, sample_interval_s: float = 0.1) -> dict[str, Any]:
    """The GPU's facts; one that is lost while being read keeps what was read before, with "lost" and
    "error" set (a GPU lost before its handle is taken raises, as any NVMLError from the handle)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    r = _FieldReader(pynvml)
    facts: dict[str, Any] = {"index": index}
    try:
        _read_gpu(pynvml, handle, r, facts, throttle_samples, sample_interval_s)
    except GpuLost as exc:
        facts.update(lost=True, error=str(exc))
    facts["unsupported"] = r.unsupported
    facts["errors"] = r.errors
    return facts


def _read_memory_health(pynvml: Any, handle: Any, r: _FieldReader, facts: dict[str, Any]) -> None:
    """Memory in use and by whom, ECC mode and uncorrectable errors, retired pages and remapped rows."""
    memory = r.read("memory", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    facts["memory_total_bytes"] = int(memory.total) if memory is not None else None
    facts["memory_free_bytes"] = int(memory.free) if memory is not None else None
    facts["memory_used_bytes"] = int(memory.used) if memory is not None else None
    facts["processes"] = r.read("processes", lambda: _processes(pynvml, handle))

    ecc = r.read("ecc_mode", lambda: pynvml.nvmlDeviceGetEccMode(handle))
    facts["ecc_enabled"] = bool(ecc[0]) if ecc is not None else None
    facts["ecc_pending_enabled"] = bool(ecc[1]) if ecc is not None else None
    if facts["ecc_enabled"]:
        facts["ecc_volatile_uncorrected"] = r.read("ecc_volatile_uncorrected", lambda: int(pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)))
        facts["ecc_aggregate_uncorrected"] = r.read("ecc_aggregate_uncorrected", lambda: int(pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC)))
    else:
        facts["ecc_volatile_uncorrected"] = facts["ecc_aggregate_uncorrected"] = None

    # Page retirement is how GPUs before Ampere handle bad memory; Ampere and later remap rows
    # instead and answer NOT_SUPPORTED here.
    facts["retired_pages_sbe"] = r.read("retired_pages_sbe", lambda: len(pynvml.nvmlDeviceGetRetiredPages(
        handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)))
    facts["retired_pages_dbe"] = r.read("retired_pages_dbe", lambda: len(pynvml.nvmlDeviceGetRetiredPages(
        handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)))
    pending = r.read("retired_pages_pending", lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    facts["retired_pages_pending"] = bool(pending) if pending is not None else None

    rows = r.read("remapped_rows", lambda: pynvml.nvmlDeviceGetRemappedRows(handle))
    facts["remapped_rows_correctable"] = int(rows[0]) if rows is not None else None
    facts["remapped_rows_uncorrectable"] = int(rows[1]) if rows is not None else None
    facts["remap_pending"] = bool(rows[2]) if rows is not None else None
    facts["remap_failure"] = bool(rows[3]) if rows is not None else None


def _throttle_samples(pynvml: Any, handle: Any, r: _FieldReader, samples: int, interval_s: float) -> list[int] | None:
    """Up to `samples` readings of the clock throttle reasons, `interval_s` apart; None if none could be read."""
    # HW slowdown "may also be reported during PState or clock change" (nvml.h), so one reading
    # can be a transient: keep several and let the judgement ask for a majority.
    masks = []
    for sample in range(max(1, samples)):
        mask = r.read("throttle_reasons", lambda: _throttle_mask(pynvml, handle))
        if mask is None:
            break
        masks.append(mask)
        if sample + 1 < samples:
            time.sleep(interval_s)
    return masks or None


def _read_temperatures(pynvml: Any, handle: Any, r: _FieldReader, facts: dict[str, Any]) -> None:
    """The temperature, the margin to slowdown and the slowdown and shutdown limits."""
    facts["temperature_c"] = r.read("temperature", lambda: int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)))
    # The thermal margin first: nvmlDeviceGetMarginTemperature is "the thermal margin temperature
    # (distance to nearest slowdown threshold)" (NVML API reference), the "GPU T.Limit Temp" nvidia-smi
    # prints; the NVML_FI_DEV_TEMPERATURE_*_TLIMIT field values are the margins at which slowdown and
    # shutdown begin (nvidia-smi's "GPU Slowdown T.Limit Temp : -2 C": 2 C past the limit). NVML's docs
    # say nvmlDeviceGetTemperatureThreshold is no longer the interface for these on Ada and later, so
    # the absolute slowdown threshold is read as the fallback for GPUs without a margin.
    facts["temperature_margin_c"] = r.read_if("nvmlDeviceGetMarginTemperature", "temperature_margin",
                                              lambda: int(pynvml.nvmlDeviceGetMarginTemperature(handle)))
    limits = r.read_if("nvmlDeviceGetFieldValues", "temperature_tlimits", lambda: _tlimit_fields(pynvml, handle)) or {}
    facts["temperature_slowdown_tlimit_c"] = limits.get("slowdown")
    facts["temperature_shutdown_tlimit_c"] = limits.get("shutdown")
    facts["temperature_slowdown_c"] = r.read("temperature_slowdown", lambda: int(pynvml.nvmlDeviceGetTemperatureThreshold(
        handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)))


def _read_gpu(pynvml: Any, handle: Any, r: _FieldReader, facts: dict[str, Any], throttle_samples: int,
              sample_interval_s: float) -> None:
    """Every fact of one GPU into `facts`, in a fixed order; a field NVML cannot read is None, with its error in `r`."""
    facts["name"] = r.read("name", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
    facts["uuid"] = r.read("uuid", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
    facts["pci_bus_id"] = r.read("pci_bus_id", lambda: _text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
    # The board itself: what a node's image is fingerprinted by (VBIOS) and what an RMA names (serial).
    facts["vbios_version"] = r.read("vbios_version", lambda: _text(pynvml.nvmlDeviceGetVbiosVersion(handle)))
    facts["serial"] = r.read("serial", lambda: _text(pynvml.nvmlDeviceGetSerial(handle)))
    _read_memory_health(pynvml, handle, r, facts)
    facts["throttle_reason_samples"] = _throttle_samples(pynvml, handle, r, throttle_samples, sample_interval_s)
    _read_temperatures(pynvml, handle, r, facts)
    persistence = r.read("persistence_mode", lambda: pynvml.nvmlDeviceGetPersistenceMode(handle))
    facts["persistence_mode"] = bool(persistence) if persistence is not None else None

    facts["pcie_gen_current"] = r.read("pcie_gen_current", lambda: int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
    facts["pcie_gen_max"] = r.read("pcie_gen_max", lambda: int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
    facts["pcie_gen_gpu_max"] = r.read("pcie_gen_gpu_max", lambda: int(pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)))
    facts["pcie_width_current"] = r.read("pcie_width_current", lambda: int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)))
    facts["pcie_width_max"] = r.read("pcie_width_max", lambda: int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)))

    links = r.read("nvlink", lambda: _nvlink(pynvml, handle))
    facts["nvlink_links"], facts["nvlink_links_up"] = links if links is not None else (None, None)

    mig = r.read("mig_mode", lambda: pynvml.nvmlDeviceGetMigMode(handle))
    facts["mig_enabled"] = bool(mig[0]) if mig is not None else None


def nvml_facts(with_gpus: bool = True, throttle_samples: int = 3) -> dict[str, Any]:
    """Driver and GPU facts; never raises. "available" is False when NVML cannot start.

    Errors that are not NVMLError (bindings that lack a function, a struct of another size) are
    facts too, with error_kind "bindings", and so are the bindings installed.
    """
    try:
        import pynvml
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken module
        return {"available": False, "error_kind": "no_bindings", "error": f"pynvml is not importable: {exc}",
                "bindings": bindings_facts()}
    try:
        return _nvml_facts(pynvml, with_gpus, throttle_samples)
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "error_kind": "bindings", "error": f"{type(exc).__name__}: {exc}",
                "bindings": bindings_facts()}


def _nvml_facts(pynvml: Any, with_gpus: bool, throttle_samples: int) -> dict[str, Any]:
    error = _nvml_error(pynvml)
    try:
        pynvml.nvmlInit()
    except error as exc:
        code = getattr(exc, "value", None)
        missing = (getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12), getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9))
        kind = NO_DRIVER if code in missing else "error"
        return {"available": False, "error_kind": kind, "error": f"{type(exc).__name__}: {exc}",
                "bindings": bindings_facts()}
    try:
        facts: dict[str, Any] = {"available": True, "error_kind": None, "error": None, "bindings": bindings_facts()}
        facts["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            facts["cuda_driver_version"] = cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion())
        except Exception:  # noqa: BLE001 - NVMLError, or bindings without the function
            facts["cuda_driver_version"] = None
        facts["device_count"] = int(pynvml.nvmlDeviceGetCount())
        if with_gpus:
            gpus = []
            for index in range(facts["device_count"]):
                try:
                    gpus.append(gpu_facts(pynvml, index, throttle_samples=throttle_samples))
                except error as exc:
                    # A GPU that has fallen off the bus fails even nvmlDeviceGetHandleByIndex.
                    gpus.append({"index": index, "error": f"{type(exc).__name__}: {exc}", "lost": _lost(pynvml, exc)})
            facts["gpus"] = gpus
        return facts
    except error as exc:
        return {"available": False, "error_kind": "error", "error": f"{type(exc).__name__}: {exc}",
                "bindings": bindings_facts()}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def main() -> None:
    sys.stdout.write(wire.dumps(nvml_facts(), indent=2, sort_keys=True))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
