"""Judging one GPU of gpu.visibility's facts: what NVML read of its memory, ECC, heat and PCIe link. Pure.

A part of preflight_checks.gpu.judging's Judgement, kept in a module of its own.
"""

from __future__ import annotations

from typing import Any, Callable

from preflight.core.model import Status
from preflight.workers.gpu_nvml import THROTTLE_REASON_BITS
from preflight_checks.gpu.rules import majority as _majority, thermal_slowdown_text

GIB = 1024**3


class OneGpu:
    """The judging of each GPU on its own; Judgement supplies params, torch, notes and add()."""

    params: Any
    torch: dict[str, Any]
    notes: list[str]
    add: Callable[..., None]

    def _judge_gpu(self, gpu: dict[str, Any]) -> None:
        """One GPU's health: lost or unreadable, then its memory, ECC, heat, persistence mode and PCIe link."""
        label = f"GPU {gpu['index']}"
        if gpu.get("pci_bus_id"):
            label += f" ({gpu['pci_bus_id']})"
        if gpu.get("lost"):
            # NVML_ERROR_GPU_IS_LOST: the GPU stopped answering (Xid 79); nothing read of it before holds.
            self.add("gpu-lost", Status.FAIL, f"{label}: the GPU is lost: {gpu.get('error')}")
            return
        if gpu.get("error"):
            self.add("gpu-unreadable", Status.FAIL, f"{label}: NVML cannot read it: {gpu['error']}")
            return
        for name, error in sorted((gpu.get("errors") or {}).items()):
            self.notes.append(f"{label}: NVML {name}: {error}")

        self._judge_memory(label, gpu)
        self._judge_ecc(label, gpu)
        self._judge_heat(label, gpu)

        if gpu.get("persistence_mode") is False and self.params.require_persistence_mode:
            self.add("persistence-off", Status.WARN, f"{label}: persistence mode is off")
        self._judge_pcie(label, gpu)

    def _judge_memory(self, label: str, gpu: dict[str, Any]) -> None:
        """Memory already taken before training starts, and the processes holding it."""
        p = self.params
        total, free = gpu.get("memory_total_bytes"), gpu.get("memory_free_bytes")
        if total and free is not None and free / total < p.min_free_memory_fraction:
            self.add("memory-in-use", Status.FAIL, f"{label}: only {free / GIB:.1f} of {total / GIB:.1f} GiB free "
                     f"(below {p.min_free_memory_fraction:.0%}) before training starts")
        processes = gpu.get("processes") or []
        if processes and p.warn_on_processes:
            listed = ", ".join(
                f"pid {proc['pid']}" + (f" ({proc['name']})" if proc.get("name") else "")
                + (f" {proc['used_bytes'] / GIB:.1f} GiB" if proc.get("used_bytes") is not None else "")
                for proc in processes)
            self.add("processes", Status.WARN, f"{label}: already in use by {listed}")

    def _judge_ecc(self, label: str, gpu: dict[str, Any]) -> None:
        """ECC off or missing, uncorrectable errors, and row remapping or page retirement failed or pending."""
        p = self.params
        if gpu.get("ecc_enabled") is None and "ecc_mode" in (gpu.get("unsupported") or []) and p.require_ecc:
            # NVML answers NOT_SUPPORTED: a GPU without ECC (GeForce, TITAN), not one with ECC turned off.
            self.add("ecc-unsupported", Status.WARN, f"{label}: {gpu.get('name') or 'this GPU'} has no ECC: "
                     "memory errors go undetected")
        if gpu.get("ecc_enabled") is False and p.require_ecc:
            pending = " (enabled after the next reset)" if gpu.get("ecc_pending_enabled") else ""
            self.add("ecc-off", Status.WARN, f"{label}: ECC is off{pending}")
        volatile = gpu.get("ecc_volatile_uncorrected")
        if volatile is not None and volatile > p.max_volatile_uncorrectable_ecc:
            self.add("ecc-uncorrectable", Status.FAIL,
                     f"{label}: {volatile} uncorrectable ECC errors since the driver loaded")
        if gpu.get("remap_failure"):
            self.add("remap-failed", Status.FAIL,
                     f"{label}: a row remapping has failed: the GPU has run out of spare memory rows")
        pending_level = Status.FAIL if p.fail_on_pending_remap else Status.WARN
        if gpu.get("remap_pending"):
            self.add("remap-pending", pending_level,
                     f"{label}: row remapping pending ({gpu.get('remapped_rows_uncorrectable') or 0} rows "
                     "remapped for uncorrectable errors): a GPU reset applies it")
        if gpu.get("retired_pages_pending"):
            self.add("pages-pending", pending_level,
                     f"{label}: page retirement pending: a GPU reset or reboot applies it")
        aggregate = gpu.get("ecc_aggregate_uncorrected")
        if aggregate:
            self.notes.append(f"{label}: {aggregate} uncorrectable ECC errors over its lifetime")

    def _judge_heat(self, label: str, gpu: dict[str, Any]) -> None:
        """Clocks held down by throttle reasons, a GPU at its slowdown temperature or hot at idle."""
        p = self.params
        samples = gpu.get("throttle_reason_samples") or []
        if samples:
            for reasons, level in ((p.fail_throttle_reasons, Status.FAIL), (p.warn_throttle_reasons, Status.WARN)):
                active = [r for r in reasons if r in THROTTLE_REASON_BITS and _majority(samples, THROTTLE_REASON_BITS[r])]
                if active:
                    self.add("throttled", level,
                             f"{label}: clocks held down by {', '.join(r.replace('_', ' ') for r in active)}")

        temp = gpu.get("temperature_c")
        at_slowdown = thermal_slowdown_text(gpu)
        if at_slowdown:
            self.add("at-slowdown", Status.FAIL, f"{label}: {at_slowdown}")
        elif temp is not None:
            if temp > p.max_idle_temperature_c:
                self.add("hot-idle", Status.WARN, f"{label}: {temp} C at idle, above {p.max_idle_temperature_c:g} C")

    def _judge_pcie(self, label: str, gpu: dict[str, Any]) -> None:
        gen_max, width_max = gpu.get("pcie_gen_max"), gpu.get("pcie_width_max")
        loaded = self._under_load(gpu)
        if loaded and loaded.get("gen_current") is not None:
            gen, width, when = loaded.get("gen_current"), loaded.get("width_current"), "under load"
        else:
            gen, width, when = gpu.get("pcie_gen_current"), gpu.get("pcie_width_current"), "at idle"
        if gen is None or width is None or gen_max is None or width_max is None:
            return
        text = f"{label}: PCIe link gen{gen} x{width} of gen{gen_max} x{width_max} ({when})"
        if when == "under load":
            if gen < gen_max or width < width_max:
                self.add("pcie-degraded", Status.FAIL, text)
        elif width < width_max:
            self.add("pcie-degraded", Status.WARN, text + ": could not be read under load")
        elif gen < gen_max:
            self.notes.append(text + ": GPUs lower the link speed when idle, not judged")
        if gpu.get("pcie_gen_gpu_max") and gpu["pcie_gen_gpu_max"] > gen_max:
            self.notes.append(f"{label}: the GPU supports PCIe gen{gpu['pcie_gen_gpu_max']}, the slot only gen{gen_max}")

    def _under_load(self, gpu: dict[str, Any]) -> dict[str, Any] | None:
        uuid = str(gpu.get("uuid") or "").lower()
        for device in self.torch.get("devices") or []:
            if uuid and str(device.get("uuid") or "").lower() == uuid:
                return device.get("pcie_under_load")
        return None
