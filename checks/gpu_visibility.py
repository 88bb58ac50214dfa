"""gpu.visibility: the GPUs are there, healthy, and compute correctly.

Three views of the GPUs are compared: NVML (the driver: every GPU on the node), torch and
tensorflow (what a training job sees, after CUDA_VISIBLE_DEVICES). NVML's per-GPU health facts are
judged against the defaults below, and every GPU a framework sees multiplies two matrices whose
product is compared with a float64 reference computed on the CPU: listed is not the same as working.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from preflight.check import Check, Expect, NodeContext, Outcome, measure
from preflight.model import Measurement, Status, worst

GIB = 1024**3


def _default_fail_throttle() -> list[str]:
    # Hardware slowdowns halve the clocks or worse: too hot, the power supply asserting the brake,
    # or power draw tripping fast protection. A node doing this at idle trains at a fraction of speed.
    return ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]


def _default_warn_throttle() -> list[str]:
    # The driver slowing the clocks to hold the temperature target: cooling is marginal.
    return ["sw_thermal_slowdown"]


@dataclass
class Params:
    # Probe tensorflow's view too when it is installed (its import alone costs several seconds).
    probe_tensorflow: bool = True
    # Side of the float32 matrices each GPU multiplies. 2048 keeps the float64 CPU reference near a
    # second on a server CPU while using every SM of an H100; the GPU side takes milliseconds.
    matmul_size: int = 2048
    # Largest allowed deviation from the float64 product, relative to its largest entry. IEEE float32
    # stays near 1e-6 at this size; TF32 would show ~1e-3, a faulty SM or memory far more.
    matmul_max_rel_error: float = 1e-4
    # Busy time before the PCIe link is read under load: GPUs drop the link speed at idle and
    # retrain it within milliseconds of work.
    pcie_load_s: float = 0.5
    # Pinned host<->device copy bandwidth each GPU must reach in both directions, in GB/s (the
    # shipped profiles set it from cloud health checks: 52 for H100 SXM on PCIe gen5 x16). Unset,
    # the floor is min_host_device_link_fraction of what the GPU's PCIe link carries at its maximum
    # generation and width: healthy GPUs copy at 80-90% of it, half means a slow or shared path.
    min_host_device_gbps: float | None = None
    min_host_device_link_fraction: float = 0.5
    # Size and count of the timed copies; 256 MiB is long enough to reach full speed on gen5.
    host_device_copy_mib: int = 256
    host_device_repeats: int = 5
    # Each framework probe (import, CUDA start-up, products, copies) must finish within this.
    probe_timeout_s: float = 120.0
    # NVML throttle reasons are read this many times; a reason counts when most readings show it.
    throttle_samples: int = 3
    # An idle GPU this hot has a cooling problem (H100/H200 SXM slow their clocks near 87-90 C);
    # at the GPU's own slowdown threshold it is FAIL.
    max_idle_temperature_c: float = 80.0
    # Memory already taken before training starts means another job or a leftover process, and an
    # out-of-memory error waiting to happen. The driver's own reservation is well under 2%.
    min_free_memory_fraction: float = 0.9
    # A process holding GPU memory is WARN even when memory is plentiful: it competes for the GPU.
    warn_on_processes: bool = True
    # Datacenter GPUs run with ECC on; off means silent memory corruption goes unnoticed.
    require_ecc: bool = True
    # Uncorrectable ECC errors since the driver loaded; any one of them kills the job that hit it.
    max_volatile_uncorrectable_ecc: int = 0
    # NVML: a pending row remap or page retirement "won't affect future work" until the reset that
    # applies it, so it is WARN; set True to make it block.
    fail_on_pending_remap: bool = False
    fail_throttle_reasons: list[str] = field(default_factory=_default_fail_throttle)
    warn_throttle_reasons: list[str] = field(default_factory=_default_warn_throttle)
    # Without persistence mode the driver tears down between jobs: slow starts and lost settings.
    require_persistence_mode: bool = True
    # NVLink links each GPU must have up (18 on H100/H200 SXM). Unset: as many as the best GPU
    # on this node, so that one GPU with a dead link stands out without knowing the platform.
    expected_nvlink_links: int | None = None


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


def _cpu_only(view: dict[str, Any]) -> bool:
    if view.get("framework") == "torch":
        return not view.get("cuda") and not view.get("hip")
    return not view.get("is_cuda_build") and not view.get("is_rocm_build")


def _majority(samples: list[int], bit: int) -> bool:
    return sum(1 for s in samples if s & bit) * 2 > len(samples)


# --------------------------------------------------------------------------------------- check


class GpuVisibility(Check):
    id = "gpu.visibility"
    title = "GPUs visible, healthy and computing"
    tags = ("node", "gpu")
    why = (
        "A training job assumes every GPU is there and works. A GPU missing from the driver, hidden by "
        "CUDA_VISIBLE_DEVICES, or invisible to a CPU-only framework build shrinks or hangs the job; memory "
        "errors, thermal or power slowdowns, a degraded PCIe link or a dead NVLink make one GPU the straggler "
        "that every all-reduce waits for; a GPU that is listed but computes wrong corrupts the model silently."
    )
    remediation = (
        "A GPU missing from nvidia-smi: check `dmesg` for Xid/fallen-off-the-bus errors, reseat or replace it.",
        "Framework sees fewer GPUs than the driver: unset or fix CUDA_VISIBLE_DEVICES; install the CUDA build of "
        "torch/tensorflow, not the CPU one.",
        "Uncorrectable ECC errors or a failed row remap: drain the node, reset the GPU (nvidia-smi -r) and run "
        "NVIDIA's field diagnostics; a failed remap means RMA.",
        "Pending row remaps or page retirements: reset the GPU or reboot the node to apply them.",
        "Thermal or hardware slowdown: check fans, airflow, inlet temperature and power supplies (nvidia-smi -q -d PERFORMANCE).",
        "Degraded PCIe link or NVLink down: reseat the GPU/riser, check `nvidia-smi nvlink -s` and `lspci -vv`.",
        "Enable persistence mode (nvidia-persistenced, or nvidia-smi -pm 1) and ECC (nvidia-smi -e 1, then reset).",
        "Framework built for a newer CUDA than the driver: upgrade the driver, or install the framework build for the driver's CUDA.",
    )
    Params = Params
    timeout_s = 300.0

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.gpus_per_node and expect.gpus_per_node > 0)

    # ----------------------------------------------------------------------------------- collect

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        from preflight.workers.gpu_nvml import nvml_facts
        from preflight.workers.gpu_probe import framework_installed, run_probe

        facts: dict[str, Any] = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        # NVML first, before any probe holds a GPU: memory and processes are then what a job would meet.
        facts["nvml"] = nvml_facts(with_gpus=True, throttle_samples=params.throttle_samples)

        def budget() -> float:
            return min(params.probe_timeout_s, ctx.time_left() - 10)

        device_options = ["--devices", "--matmul-size", str(params.matmul_size), "--pcie-load-s", str(params.pcie_load_s)]
        torch_options = device_options + ["--copy-mib", str(params.host_device_copy_mib),
                                          "--copy-repeats", str(params.host_device_repeats)]
        if framework_installed("torch"):
            facts["torch"] = run_probe(ctx, "torch", torch_options, budget())
        else:
            facts["torch"] = {"framework": "torch", "installed": False}
        torch_products = [d for d in facts["torch"].get("devices") or [] if "max_rel_error" in d or "error" in d]

        if not framework_installed("tensorflow"):
            facts["tensorflow"] = {"framework": "tensorflow", "installed": False}
        elif not params.probe_tensorflow:
            facts["tensorflow"] = {"framework": "tensorflow", "installed": True, "probed": False}
        else:
            # The products run with torch when it can; tensorflow only counts, unless torch could not.
            options = device_options[:] + ([] if torch_products else ["--matmul"])
            facts["tensorflow"] = run_probe(ctx, "tensorflow", options, budget())
        facts["params"] = {"matmul_size": params.matmul_size}
        return facts

    # ---------------------------------------------------------------------------------- evaluate

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        return _Judgement(facts, params, expect).outcome()


class _Judgement:
    """One evaluation; collects problems and measurements as it goes through the facts."""

    def __init__(self, facts: dict[str, Any], params: Params, expect: Expect) -> None:
        self.facts, self.params, self.expect = facts, params, expect
        self.problems: list[tuple[Status, str]] = []
        self.notes: list[str] = []
        self.measurements: list[Measurement] = []
        self.nvml = facts.get("nvml") or {}
        self.torch = facts.get("torch") or {}
        self.tf = facts.get("tensorflow") or {}
        self.expected = expect.gpus_per_node if expect.gpus_per_node else None

    def add(self, status: Status, text: str) -> None:
        self.problems.append((status, text))

    # framework views -------------------------------------------------------------------------
    @staticmethod
    def _probed(view: dict[str, Any]) -> bool:
        return bool(view.get("importable")) and "device_count" in view

    def _framework_label(self, view: dict[str, Any]) -> str:
        name = view.get("framework", "framework")
        return f"{name} {view['version']}" if view.get("version") else name

    def _framework_required(self, name: str) -> bool:
        # A framework the config does not list is reported, but does not block.
        wanted = [f.lower() for f in self.expect.frameworks or []]
        return not wanted or any(name in w for w in wanted)

    def outcome(self) -> Outcome:
        nvml_ok = bool(self.nvml.get("available"))
        torch_count = self.torch.get("device_count") if self._probed(self.torch) else None
        tf_count = self.tf.get("device_count") if self._probed(self.tf) else None

        if not nvml_ok and self.nvml.get("error_kind") == "error":
            # The library is there but broken (e.g. "Driver/library version mismatch" after an
            # upgrade without a reboot): a GPU node that cannot work, whatever the config says.
            self.add(Status.FAIL, f"NVML cannot start: {self.nvml.get('error')}")
        if not nvml_ok and not torch_count and not tf_count:
            return self._no_gpus()

        gpus = [g for g in self.nvml.get("gpus") or []] if nvml_ok else []
        visible = visible_gpu_indices(self.facts.get("cuda_visible_devices"), gpus) if nvml_ok else None
        judged = [g for g in gpus if visible is None or g["index"] in visible]
        nvml_visible = len(visible) if visible is not None else None
        cvd = self.facts.get("cuda_visible_devices")
        if nvml_ok and cvd is not None and nvml_visible is not None and nvml_visible < len(gpus):
            self.notes.append(f"CUDA_VISIBLE_DEVICES={cvd!r} shows {nvml_visible} of the {len(gpus)} GPUs NVML lists; "
                              "the others are not judged")
        if nvml_ok and not gpus and not torch_count and not tf_count:
            return self._no_gpus(driver_loaded=True)
        if nvml_ok and nvml_visible == 0 and gpus and not torch_count and not tf_count:
            return self._no_gpus(hidden=len(gpus))

        if not nvml_ok:
            if self.torch.get("hip") and torch_count:
                self.notes.append("ROCm build of torch: NVML health facts do not apply to these GPUs")
            elif self.nvml.get("error_kind") != "error":
                self.add(Status.WARN, f"frameworks see GPUs but NVML does not start ({self.nvml.get('error')}): "
                                      "memory errors, throttling and links were not read")
        self._judge_counts(nvml_ok, len(gpus), nvml_visible, torch_count, tf_count, judged)
        for gpu in judged:
            self._judge_gpu(gpu)
        self._judge_node_wide(judged)
        self._judge_products(nvml_visible if nvml_visible is not None else self.expected)
        self._judge_host_device(gpus)
        self._judge_cuda_compat()
        return self._finish(judged, nvml_visible, torch_count)

    # no GPU at all -------------------------------------------------------------------------
    def _no_gpus(self, driver_loaded: bool = False, hidden: int = 0) -> Outcome:
        if hidden:
            reason = f"CUDA_VISIBLE_DEVICES={self.facts.get('cuda_visible_devices')!r} hides all {hidden} GPUs"
        elif driver_loaded:
            reason = f"the NVIDIA driver {self.nvml.get('driver_version')} is loaded but lists no GPU"
        else:
            reason = f"no NVIDIA driver ({self.nvml.get('error') or 'NVML unavailable'})"
        views = []
        for view in (self.torch, self.tf):
            if view.get("installed") is False:
                continue
            if self._probed(view):
                build = " (a CPU-only build)" if _cpu_only(view) else ""
                views.append(f"{self._framework_label(view)}{build} sees no GPU")
            elif view.get("error"):
                views.append(f"{view.get('framework')}: {view['error']}")
        reason += ("; " + "; ".join(views)) if views else ""
        measurements = [measure("GPUs visible", 0, "")]
        if self.expected:
            measurements[0].threshold, measurements[0].comparison, measurements[0].ok = self.expected, "==", False
            self.add(Status.FAIL, f"expected {self.expected} GPUs on this node, found none: {reason}")
        problems = [t for s, t in self.problems if s is Status.FAIL]
        if problems:
            return Outcome(Status.FAIL, "; ".join(problems), measurements, details=problems + self.notes)
        return Outcome(Status.SKIP, reason, measurements, details=self.notes, remediation=[])

    # counts ----------------------------------------------------------------------------------
    def _judge_counts(self, nvml_ok: bool, nvml_total: int, nvml_visible: int | None,
                      torch_count: int | None, tf_count: int | None, judged: list[dict[str, Any]]) -> None:
        mig = any(g.get("mig_enabled") for g in judged)
        if mig:
            self.notes.append("MIG is enabled on some GPUs: frameworks count MIG instances, NVML counts GPUs")
        reference = nvml_visible if nvml_visible is not None else (torch_count if torch_count is not None else tf_count)
        if nvml_ok:
            m = measure("GPUs visible (NVML)", nvml_visible if nvml_visible is not None else nvml_total, "")
            if self.expected:
                m.threshold, m.comparison, m.ok = self.expected, "==", m.value == self.expected
            self.measurements.append(m)
        for view, count in ((self.torch, torch_count), (self.tf, tf_count)):
            name = view.get("framework", "")
            if count is None:
                if view.get("installed") is not False and view.get("probed") is not False and view.get("error"):
                    status = Status.FAIL if self._framework_required(name) else Status.WARN
                    self.add(status, f"{name} could not be probed: {view['error']}")
                continue
            target = reference if reference is not None else self.expected
            m = measure(f"GPUs visible ({name})", count, "")
            if target is not None and not mig:
                m.threshold, m.comparison, m.ok = target, "==", count == target
            self.measurements.append(m)
            if target is None or mig or count == target:
                continue
            status = Status.FAIL if self._framework_required(name) else Status.WARN
            why = " (a CPU-only build)" if _cpu_only(view) else ""
            if view.get("cuda_error"):
                why += f": {view['cuda_error']}"
            source = "NVML" if nvml_visible is not None else "the other framework"
            seen = {str(d["uuid"]).lower() for d in view.get("devices") or [] if d.get("uuid")}
            unseen = [f"GPU {g['index']}" + (f" ({g['pci_bus_id']})" if g.get("pci_bus_id") else "")
                      for g in judged if seen and g.get("uuid") and str(g["uuid"]).lower() not in seen]
            if unseen:
                why += f"; not seen: {', '.join(unseen)}"
            self.add(status, f"{self._framework_label(view)} sees {count} GPUs, {source} {reference}{why}")
        if self.expected is not None and reference is not None and reference != self.expected:
            cvd = self.facts.get("cuda_visible_devices")
            hint = f" (CUDA_VISIBLE_DEVICES={cvd!r}; NVML lists {nvml_total})" if cvd is not None and nvml_ok else ""
            self.add(Status.FAIL, f"{reference} GPUs visible, {self.expected} expected{hint}")

    # one GPU -------------------------------------------------------------------------------------
    def _judge_gpu(self, gpu: dict[str, Any]) -> None:
        p = self.params
        label = f"GPU {gpu['index']}"
        if gpu.get("pci_bus_id"):
            label += f" ({gpu['pci_bus_id']})"
        if gpu.get("error"):
            self.add(Status.FAIL, f"{label}: NVML cannot read it: {gpu['error']}")
            return
        for name, error in sorted((gpu.get("errors") or {}).items()):
            self.notes.append(f"{label}: NVML {name}: {error}")

        total, free = gpu.get("memory_total_bytes"), gpu.get("memory_free_bytes")
        if total and free is not None and free / total < p.min_free_memory_fraction:
            self.add(Status.FAIL, f"{label}: only {free / GIB:.1f} of {total / GIB:.1f} GiB free "
                                  f"(below {p.min_free_memory_fraction:.0%}) before training starts")
        processes = gpu.get("processes") or []
        if processes and p.warn_on_processes:
            listed = ", ".join(
                f"pid {proc['pid']}" + (f" ({proc['name']})" if proc.get("name") else "")
                + (f" {proc['used_bytes'] / GIB:.1f} GiB" if proc.get("used_bytes") is not None else "")
                for proc in processes)
            self.add(Status.WARN, f"{label}: already in use by {listed}")

        if gpu.get("ecc_enabled") is False and p.require_ecc:
            pending = " (enabled after the next reset)" if gpu.get("ecc_pending_enabled") else ""
            self.add(Status.WARN, f"{label}: ECC is off{pending}")
        volatile = gpu.get("ecc_volatile_uncorrected")
        if volatile is not None and volatile > p.max_volatile_uncorrectable_ecc:
            self.add(Status.FAIL, f"{label}: {volatile} uncorrectable ECC errors since the driver loaded")
        if gpu.get("remap_failure"):
            self.add(Status.FAIL, f"{label}: a row remapping has failed: the GPU has run out of spare memory rows")
        pending_status = Status.FAIL if p.fail_on_pending_remap else Status.WARN
        if gpu.get("remap_pending"):
            self.add(pending_status, f"{label}: row remapping pending ({gpu.get('remapped_rows_uncorrectable') or 0} rows "
                                     "remapped for uncorrectable errors): a GPU reset applies it")
        if gpu.get("retired_pages_pending"):
            self.add(pending_status, f"{label}: page retirement pending: a GPU reset or reboot applies it")
        aggregate = gpu.get("ecc_aggregate_uncorrected")
        if aggregate:
            self.notes.append(f"{label}: {aggregate} uncorrectable ECC errors over its lifetime")

        samples = gpu.get("throttle_reason_samples") or []
        if samples:
            from preflight.workers.gpu_nvml import THROTTLE_REASON_BITS

            for reasons, status in ((p.fail_throttle_reasons, Status.FAIL), (p.warn_throttle_reasons, Status.WARN)):
                active = [r for r in reasons if r in THROTTLE_REASON_BITS and _majority(samples, THROTTLE_REASON_BITS[r])]
                if active:
                    self.add(status, f"{label}: clocks held down by {', '.join(r.replace('_', ' ') for r in active)}")

        temp, slowdown = gpu.get("temperature_c"), gpu.get("temperature_slowdown_c")
        if temp is not None:
            if slowdown and temp >= slowdown:
                self.add(Status.FAIL, f"{label}: {temp} C, at its slowdown threshold of {slowdown} C")
            elif temp > p.max_idle_temperature_c:
                self.add(Status.WARN, f"{label}: {temp} C at idle, above {p.max_idle_temperature_c:g} C")

        if gpu.get("persistence_mode") is False and p.require_persistence_mode:
            self.add(Status.WARN, f"{label}: persistence mode is off")
        self._judge_pcie(label, gpu)

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
                self.add(Status.FAIL, text)
        elif width < width_max:
            self.add(Status.WARN, text + ": could not be read under load")
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

    # across the GPUs of the node -------------------------------------------------------------
    def _judge_node_wide(self, judged: list[dict[str, Any]]) -> None:
        healthy = [g for g in judged if not g.get("error")]
        names = sorted({g.get("name") for g in healthy if g.get("name")})
        if len(names) > 1:
            self.add(Status.WARN, f"mixed GPU models on one node: {', '.join(names)}")
        links = [g for g in healthy if g.get("nvlink_links")]
        if links:
            want = self.params.expected_nvlink_links or max(g.get("nvlink_links_up") or 0 for g in links)
            for gpu in links:
                up = gpu.get("nvlink_links_up") or 0
                if up < want:
                    self.add(Status.FAIL, f"GPU {gpu['index']}: {up} of {want} NVLink links up")
            self.measurements.append(measure("fewest NVLink links up on a GPU", min(g.get("nvlink_links_up") or 0 for g in links),
                                             "", at_least=want))
        temps = [g["temperature_c"] for g in healthy if g.get("temperature_c") is not None]
        if temps:
            self.measurements.append(measure("hottest GPU", max(temps), "C", at_most=self.params.max_idle_temperature_c,
                                             samples=temps))
        fractions = [g["memory_free_bytes"] / g["memory_total_bytes"] for g in healthy
                     if g.get("memory_total_bytes") and g.get("memory_free_bytes") is not None]
        if fractions:
            self.measurements.append(measure("least free GPU memory", round(min(fractions), 4), "fraction",
                                             at_least=self.params.min_free_memory_fraction))

    # products -------------------------------------------------------------------------------
    def _judge_products(self, should_compute: int | None) -> None:
        runs = [("torch", d) for d in self.torch.get("devices") or [] if "max_rel_error" in d or "error" in d]
        if not runs:
            runs = [("tensorflow", d) for d in self.tf.get("devices") or [] if "max_rel_error" in d or "error" in d]
        if not runs:
            if (self.torch.get("device_count") or self.tf.get("device_count")):
                self.add(Status.FAIL, "no framework ran the matrix product on the GPUs")
            else:
                self.notes.append("no framework sees a GPU, so no GPU computed the check product")
            return
        tol = self.params.matmul_max_rel_error
        errors = []
        for framework, device in runs:
            label = f"{framework} cuda:{device['index']}"
            if device.get("error"):
                self.add(Status.FAIL, f"{label}: the matrix product failed: {device['error']}")
            elif not device.get("finite", True):
                self.add(Status.FAIL, f"{label}: the matrix product has NaN or infinite entries")
            elif device["max_rel_error"] > tol:
                self.add(Status.FAIL, f"{label}: the matrix product is off by {device['max_rel_error']:.2e} "
                                      f"(relative), more than {tol:.0e}")
            if device.get("max_rel_error") is not None:
                errors.append(device["max_rel_error"])
        correct = sum(1 for _, d in runs if not d.get("error") and d.get("finite", True)
                      and d.get("max_rel_error") is not None and d["max_rel_error"] <= tol)
        self.measurements.append(measure("GPUs computing correctly", correct, "", at_least=max(len(runs), should_compute or 0)))
        if errors:
            self.measurements.append(measure("largest matmul error (relative)", float(f"{max(errors):.3g}"), "", at_most=tol,
                                             samples=errors))

    # host <-> device copies -------------------------------------------------------------------
    def _judge_host_device(self, gpus: list[dict[str, Any]]) -> None:
        by_uuid = {str(g.get("uuid") or "").lower(): g for g in gpus if g.get("uuid")}
        slowest: dict[str, tuple[float, float | None]] = {}
        medians: dict[str, list[float]] = {"h2d": [], "d2h": []}
        for device in self.torch.get("devices") or []:
            copies = device.get("host_device")
            if not copies:
                continue
            label = f"torch cuda:{device['index']}"
            if copies.get("error"):
                self.add(Status.WARN, f"{label}: host<->device copies could not be timed: {copies['error']}")
                continue
            gpu = by_uuid.get(str(device.get("uuid") or "").lower(), {})
            floor = self.params.min_host_device_gbps
            if floor is None:
                link = pcie_link_gbps(gpu.get("pcie_gen_max"), gpu.get("pcie_width_max"))
                floor = round(link * self.params.min_host_device_link_fraction, 1) if link else None
            for direction, text in (("h2d", "host-to-device"), ("d2h", "device-to-host")):
                samples = copies.get(f"{direction}_gbps_samples") or []
                if not samples:
                    continue
                rate = statistics.median(samples)
                medians[direction].append(rate)
                if direction not in slowest or rate < slowest[direction][0]:
                    slowest[direction] = (rate, floor)
                if floor is not None and rate < floor:
                    self.add(Status.FAIL, f"{label}: {text} copies at {rate:.1f} GB/s, below {floor:g} GB/s")
        for direction, text in (("h2d", "host-to-device"), ("d2h", "device-to-host")):
            if direction in slowest:
                rate, floor = slowest[direction]
                self.measurements.append(measure(f"slowest {text} copy", round(rate, 1), "GB/s", at_least=floor,
                                                 samples=medians[direction]))

    # CUDA runtime vs driver ------------------------------------------------------------------
    def _judge_cuda_compat(self) -> None:
        driver_cuda = self.nvml.get("cuda_driver_version")
        builds = [("torch", self.torch.get("cuda")),
                  ("tensorflow", self.tf.get("cuda") if self.tf.get("is_cuda_build") else None)]
        for name, runtime in builds:
            verdict = runtime_vs_driver(runtime, driver_cuda)
            if verdict is None:
                continue
            status, text = verdict
            label = self._framework_label(self.torch if name == "torch" else self.tf)
            if status is Status.PASS:
                self.notes.append(f"{label}: {text}")
            else:
                self.add(status, f"{label}: {text} (driver {self.nvml.get('driver_version')})")

    # summary ---------------------------------------------------------------------------------
    def _finish(self, judged: list[dict[str, Any]], nvml_visible: int | None, torch_count: int | None) -> Outcome:
        status = worst([s for s, _ in self.problems], default=Status.PASS)
        details = [t for _, t in self.problems] + self.notes
        if self.problems:
            return Outcome(status, "; ".join(t for s, t in self.problems if s is status), self.measurements, details=details)
        count = nvml_visible if nvml_visible is not None else torch_count
        names = sorted({g.get("name") for g in judged if g.get("name")})
        views = ["NVML"] if self.nvml.get("available") else []
        views += [v["framework"] for v in (self.torch, self.tf) if self._probed(v)]
        summary = f"{count} x {', '.join(names) or 'GPU'} visible to {', '.join(views)}"
        errors = [d["max_rel_error"] for d in (self.torch.get("devices") or self.tf.get("devices") or [])
                  if d.get("max_rel_error") is not None]
        if errors:
            size = (self.facts.get("params") or {}).get("matmul_size")
            summary += f"; each computed a correct {size}x{size} product (largest error {max(errors):.1e})"
        copies = [m for m in self.measurements if m.name.startswith("slowest ") and m.name.endswith(" copy")]
        if copies:
            summary += f"; host<->device copies at {min(m.value for m in copies):.1f} GB/s or more"
        if self.nvml.get("driver_version"):
            summary += f"; driver {self.nvml['driver_version']} (CUDA {self.nvml.get('cuda_driver_version')})"
        return Outcome(Status.PASS, summary, self.measurements, details=details)
