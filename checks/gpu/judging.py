"""Judging gpu.visibility's facts: pure functions of the facts NVML, torch and tensorflow gave.

Each problem is a Finding of the check (its `finding()`: a stable id under `gpu.visibility.` and the
fix FIXES declares for its kind); the Outcome comes from preflight.core.check.outcome_from_findings.
Notes that judge nothing go to the details.
"""

from __future__ import annotations

import statistics
from typing import Any

from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings
from preflight_checks.gpu.rules import (  # noqa: F401 - visible_gpu_indices and friends are re-exported
    cpu_only as _cpu_only,
    pcie_link_gbps,
    runtime_vs_driver,
    visible_gpu_indices,
)
from preflight.core.model import Finding, Measurement, Status
from preflight_checks.gpu.fixes import (  # the fixes by cause, kept apart
    FIX_FRAMEWORK, FIX_MISSING, FIX_NO_DRIVER, FIX_NO_HARDWARE,
)
from preflight_checks.gpu.one_gpu import OneGpu


class Judgement(OneGpu):
    """One evaluation; collects findings and measurements as it goes through the facts."""

    def __init__(self, check: type[Check], facts: dict[str, Any], params: Any, expect: Expect) -> None:
        self.check = check
        self.facts, self.params, self.expect = facts, params, expect
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self.measurements: list[Measurement] = []
        self.nvml = facts.get("nvml") or {}
        self.torch = facts.get("torch") or {}
        self.tf = facts.get("tensorflow") or {}
        self.expected = expect.gpus_per_node if expect.gpus_per_node else None

    def add(self, kind: str, level: Status, text: str, fix: str | None = None) -> None:
        self.findings.append(self.check.finding(kind, level, text, fix=fix))

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
            self.add("nvml-broken", Status.FAIL, f"NVML cannot start: {self.nvml.get('error')}")
        self._judge_bindings(nvml_ok, bool(torch_count or tf_count))
        if not nvml_ok and not torch_count and not tf_count:
            return self._no_gpus()

        gpus, nvml_visible, judged = self._visible_gpus(nvml_ok)
        if nvml_ok and not gpus and not torch_count and not tf_count:
            return self._no_gpus(driver_loaded=True)
        if nvml_ok and nvml_visible == 0 and gpus and not torch_count and not tf_count:
            return self._no_gpus(hidden=len(gpus))

        if not nvml_ok:
            self._judge_without_nvml(torch_count)
        self._judge_counts(nvml_ok, len(gpus), nvml_visible, torch_count, tf_count, judged)
        for gpu in judged:
            self._judge_gpu(gpu)
        self._judge_node_wide(judged)
        self._judge_products(nvml_visible if nvml_visible is not None else self.expected,
                             any(g.get("mig_enabled") for g in judged))
        self._judge_host_device(gpus)
        self._judge_cuda_compat()
        return self._finish(judged, nvml_visible, torch_count)

    def _visible_gpus(self, nvml_ok: bool) -> tuple[list[dict[str, Any]], int | None, list[dict[str, Any]]]:
        """NVML's GPUs, how many CUDA_VISIBLE_DEVICES leaves visible (None: all), and those to judge."""
        gpus = [g for g in self.nvml.get("gpus") or []] if nvml_ok else []
        visible = visible_gpu_indices(self.facts.get("cuda_visible_devices"), gpus) if nvml_ok else None
        judged = [g for g in gpus if visible is None or g["index"] in visible]
        nvml_visible = len(visible) if visible is not None else None
        cvd = self.facts.get("cuda_visible_devices")
        if nvml_ok and cvd is not None and nvml_visible is not None and nvml_visible < len(gpus):
            self.notes.append(f"CUDA_VISIBLE_DEVICES={cvd!r} shows {nvml_visible} of the {len(gpus)} GPUs NVML lists; "
                              "the others are not judged")
        return gpus, nvml_visible, judged

    def _judge_without_nvml(self, torch_count: int | None) -> None:
        """Frameworks see GPUs but NVML does not start: a ROCm note, or a warning that health went unread."""
        if self.torch.get("hip") and torch_count:
            self.notes.append("ROCm build of torch: NVML health facts do not apply to these GPUs")
        elif self.nvml.get("error_kind") not in ("error", "bindings"):
            self.add("nvml-unavailable", Status.WARN,
                     f"frameworks see GPUs but NVML does not start ({self.nvml.get('error')}): "
                     "memory errors, throttling and links were not read")

    def _judge_bindings(self, nvml_ok: bool, frameworks_see_gpus: bool) -> None:
        bindings = self.nvml.get("bindings") or {}
        old = str(bindings.get("pynvml") or "")
        shadowed = old and old.split(".")[0].isdigit() and int(old.split(".")[0]) < 12
        if not nvml_ok and self.nvml.get("error_kind") == "bindings":
            why = f" (pynvml {old} installed beside nvidia-ml-py {bindings.get('nvidia-ml-py')})" if shadowed else ""
            level = Status.WARN if frameworks_see_gpus or not self.expected else Status.FAIL
            self.add("nvml-bindings", level, f"the NVML bindings fail: {self.nvml.get('error')}{why}: memory errors, "
                     "throttling and links were not read")
        elif shadowed:
            self.notes.append(f"pynvml {old} is installed; its old module can shadow nvidia-ml-py's")
        if self.nvml.get("source") == "nvidia-smi":
            self.notes.append(f"NVML read through `nvidia-smi -q -x`, as Python cannot load it ({self.nvml.get('bindings_error')})")

    # no GPU at all -------------------------------------------------------------------------
    def _no_gpus(self, driver_loaded: bool = False, hidden: int = 0) -> Outcome:
        if hidden:
            reason = f"CUDA_VISIBLE_DEVICES={self.facts.get('cuda_visible_devices')!r} hides all {hidden} GPUs"
        elif driver_loaded:
            reason = f"the NVIDIA driver {self.nvml.get('driver_version')} is loaded but lists no GPU"
        else:
            reason = f"no NVIDIA driver ({self.nvml.get('error') or 'NVML unavailable'})"
            on_bus = self.facts.get("pci_gpus")
            if on_bus == []:
                # sysfs was read and holds no NVIDIA display controller: a CPU node, not a broken GPU node.
                reason = f"no NVIDIA GPU on this node ({reason})"
            elif on_bus:
                self.add("driver-missing", Status.FAIL,
                         f"{len(on_bus)} NVIDIA GPU{'s' if len(on_bus) != 1 else ''} on the PCI bus "
                         f"({', '.join(g['address'] for g in on_bus[:4])}{', ...' if len(on_bus) > 4 else ''}) "
                         f"but {reason}")
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
        measurements = [measure("GPUs visible", 0, "", equals=self.expected or None)]
        if self.expected:
            no_hardware = not hidden and not driver_loaded and self.facts.get("pci_gpus") == []
            if no_hardware:
                # Neither a driver nor an NVIDIA device on the PCI bus: nothing to reseat, a CPU node.
                self.add("no-nvidia-hardware", Status.FAIL, f"expected {self.expected} GPUs on this node, found none: "
                         f"{reason}", FIX_NO_HARDWARE)
            else:
                fix = FIX_FRAMEWORK if hidden else FIX_MISSING if driver_loaded else FIX_NO_DRIVER
                self.add("no-gpu", Status.FAIL, f"expected {self.expected} GPUs on this node, found none: {reason}", fix)
        if any(f.level is Status.FAIL for f in self.findings):
            return outcome_from_findings(self.findings, measurements, passed="", notes=self.notes)
        self.add("no-gpu", Status.SKIP, reason, fix="")  # a node without GPUs: nothing to fix
        return outcome_from_findings(self.findings, measurements, passed="", details=self.notes)

    # counts ----------------------------------------------------------------------------------
    def _judge_counts(self, nvml_ok: bool, nvml_total: int, nvml_visible: int | None,
                      torch_count: int | None, tf_count: int | None, judged: list[dict[str, Any]]) -> None:
        mig = any(g.get("mig_enabled") for g in judged)
        if mig:
            self.notes.append("MIG is enabled on some GPUs: frameworks count MIG instances, NVML counts GPUs")
        reference = nvml_visible if nvml_visible is not None else (torch_count if torch_count is not None else tf_count)
        if nvml_ok:
            shown = nvml_visible if nvml_visible is not None else nvml_total
            self.measurements.append(measure("GPUs visible (NVML)", shown, "", equals=self.expected or None))
        target = reference if reference is not None else self.expected
        views = ((self.torch, torch_count), (self.tf, tf_count))
        sees_all = [v for v, c in views if target is not None and c == target]
        for view, count in views:
            name = view.get("framework", "")
            if count is None:
                self._judge_probe_error(view)
                continue
            label = self._framework_label(view)
            source = "NVML" if nvml_visible is not None else "the other framework"
            # Nobody said tensorflow trains here, and torch sees every GPU: tensorflow-cpu beside a
            # CUDA torch is information, not a missing GPU. (A CPU-only torch stays a finding: the
            # collectives, scaling and checkpoint checks all run on torch.)
            information = name == "tensorflow" and _cpu_only(view) and not self.expect.frameworks and bool(sees_all)
            judge_count = target is not None and not mig and not information
            self.measurements.append(measure(f"GPUs visible ({name})", count, "", equals=target if judge_count else None))
            if information and count != target:
                self.add("cpu-only-framework", Status.PASS,
                         f"{label} is a CPU-only build and sees no GPU ({source} {reference}); "
                         f"{', '.join(self._framework_label(v) for v in sees_all)} sees them all")
            if not judge_count or count == target:
                continue
            level = Status.FAIL if self._framework_required(name) else Status.WARN
            self.add("framework-count", level, f"{label} sees {count} GPUs, {source} {reference}"
                     f"{self._why_count_differs(view, judged)}")
        if self.expected is not None and reference is not None and reference != self.expected:
            self._judge_expected_count(reference, nvml_ok, nvml_total)

    def _judge_probe_error(self, view: dict[str, Any]) -> None:
        """A framework installed and probed that gave no count: its error, blocking if the config needs it."""
        name = view.get("framework", "")
        if view.get("installed") is not False and view.get("probed") is not False and view.get("error"):
            level = Status.FAIL if self._framework_required(name) else Status.WARN
            self.add("framework-probe", level, f"{name} could not be probed: {view['error']}")

    @staticmethod
    def _why_count_differs(view: dict[str, Any], judged: list[dict[str, Any]]) -> str:
        """What explains a framework's short count: a CPU-only build, its CUDA error, the GPUs it does not see."""
        why = " (a CPU-only build)" if _cpu_only(view) else ""
        if view.get("cuda_error"):
            why += f": {view['cuda_error']}"
        seen = {str(d["uuid"]).lower() for d in view.get("devices") or [] if d.get("uuid")}
        unseen = [f"GPU {g['index']}" + (f" ({g['pci_bus_id']})" if g.get("pci_bus_id") else "")
                  for g in judged if seen and g.get("uuid") and str(g["uuid"]).lower() not in seen]
        return why + (f"; not seen: {', '.join(unseen)}" if unseen else "")

    def _judge_expected_count(self, reference: int, nvml_ok: bool, nvml_total: int) -> None:
        """The node shows another number of GPUs than the job expects: FAIL, hinting at CUDA_VISIBLE_DEVICES."""
        cvd = self.facts.get("cuda_visible_devices")
        hint = f" (CUDA_VISIBLE_DEVICES={cvd!r}; NVML lists {nvml_total})" if cvd is not None and nvml_ok else ""
        self.add("count", Status.FAIL, f"{reference} GPUs visible, {self.expected} expected{hint}",
                 FIX_FRAMEWORK if hint else None)

    # across the GPUs of the node -------------------------------------------------------------
    def _judge_node_wide(self, judged: list[dict[str, Any]]) -> None:
        healthy = [g for g in judged if not g.get("error")]
        names = sorted({g.get("name") for g in healthy if g.get("name")})
        if len(names) > 1:
            self.add("mixed-models", Status.WARN, f"mixed GPU models on one node: {', '.join(names)}")
        links = [g for g in healthy if g.get("nvlink_links")]
        if links:
            want = self.params.expected_nvlink_links or max(g.get("nvlink_links_up") or 0 for g in links)
            for gpu in links:
                up = gpu.get("nvlink_links_up") or 0
                if up < want:
                    self.add("nvlink-down", Status.FAIL, f"GPU {gpu['index']}: {up} of {want} NVLink links up")
            self.measurements.append(measure("fewest NVLink links up on a GPU", min(g.get("nvlink_links_up") or 0 for g in links),
                                             "", at_least=want))
        temps = [g["temperature_c"] for g in healthy if g.get("temperature_c") is not None]
        if temps:
            self.measurements.append(measure("hottest GPU", max(temps), "C", at_most=self.params.max_idle_temperature_c,
                                             param="max_idle_temperature_c",
                                             samples=temps))
        fractions = [g["memory_free_bytes"] / g["memory_total_bytes"] for g in healthy
                     if g.get("memory_total_bytes") and g.get("memory_free_bytes") is not None]
        if fractions:
            self.measurements.append(measure("least free GPU memory", round(min(fractions), 4), "fraction",
                                             at_least=self.params.min_free_memory_fraction,
                                             param="min_free_memory_fraction"))

    # products -------------------------------------------------------------------------------
    def _judge_products(self, should_compute: int | None, mig: bool) -> None:
        runs = [("torch", d) for d in self.torch.get("devices") or [] if "max_rel_error" in d or "error" in d]
        if not runs:
            runs = [("tensorflow", d) for d in self.tf.get("devices") or [] if "max_rel_error" in d or "error" in d]
        if not runs:
            if (self.torch.get("device_count") or self.tf.get("device_count")):
                self.add("no-product", Status.FAIL, "no framework ran the matrix product on the GPUs")
            else:
                # Information, not a fault: the framework counts are judged above; this says what is left.
                self.add("not-compared", Status.PASS, self._not_compared())
            return
        tol = self.params.matmul_max_rel_error
        errors = []
        for framework, device in runs:
            label = f"{framework} cuda:{device['index']}"
            if device.get("error"):
                self.add("product-failed", Status.FAIL, f"{label}: the matrix product failed: {device['error']}")
            elif not device.get("finite", True):
                self.add("product-wrong", Status.FAIL, f"{label}: the matrix product has NaN or infinite entries")
            elif device["max_rel_error"] > tol:
                self.add("product-wrong", Status.FAIL, f"{label}: the matrix product is off by "
                         f"{device['max_rel_error']:.2e} (relative), more than {tol:.0e}")
            if device.get("max_rel_error") is not None:
                errors.append(device["max_rel_error"])
        self._matmul_rates(runs)
        correct = sum(1 for _, d in runs if not d.get("error") and d.get("finite", True)
                      and d.get("max_rel_error") is not None and d["max_rel_error"] <= tol)
        want = max(len(runs), should_compute or 0)
        self.measurements.append(measure("GPUs computing correctly", correct, "", at_least=want))
        if len(runs) < want:
            # Fewer GPUs ran the product than NVML shows: never a PASS that says "8 x H100".
            if mig:
                self.add("mig-enabled", Status.WARN, f"MIG is enabled: a framework sees MIG instances, and only "
                         f"{len(runs)} of {want} GPUs computed the check product")
            else:
                self.add("not-all-computed", Status.FAIL, f"only {len(runs)} of {want} GPUs computed the check product")
        if errors:
            self.measurements.append(measure("largest matmul error (relative)", float(f"{max(errors):.3g}"), "", at_most=tol,
                                             param="matmul_max_rel_error",
                                             samples=errors))

    def _not_compared(self) -> str:
        """What was compared, and what could not be, when no framework sees a GPU that NVML lists."""
        counts = [f"{self._framework_label(v)} ({v['device_count']})" for v in (self.torch, self.tf) if self._probed(v)]
        unprobed = [v.get("framework", "") for v in (self.torch, self.tf)
                    if not self._probed(v) and v.get("framework")]
        compared = (f"compared NVML's GPU count with {' and '.join(counts)}" if counts and self.nvml.get("available")
                    else "compared no framework's view with NVML's")
        if unprobed:
            compared += f" ({', '.join(unprobed)} not probed)"
        return (f"no framework sees a GPU: {compared}; not compared: which GPUs a framework sees (UUIDs), the "
                "matrix product on each GPU, the PCIe link under load and host<->device copy speed")

    def _matmul_rates(self, runs: list[tuple[str, dict[str, Any]]]) -> None:
        """Each GPU's matrix-multiply rate, declared per GPU: judged by no floor here, it is compared with
        the run's other GPUs of the same kind (fleet.fail-slow, preflight.history.outliers)."""
        for framework, device in runs:
            size = ((self.torch if framework == "torch" else self.tf).get("matmul") or {}).get("size")
            timed = [t for t in device.get("matmul_rate_s") or [] if isinstance(t, (int, float)) and t > 0]
            if device.get("error") or not size or not timed or not isinstance(device.get("index"), int):
                continue  # a probe of an older version timed only the cold first product: no rate
            rates = [round(2 * size ** 3 / t / 1e9, 3) for t in timed]
            self.measurements.append(Measurement("matmul rate", statistics.median(rates), "GFLOP/s", samples=rates,
                                                 series=framework, better="higher", gpu=device["index"]))

    # host <-> device copies -------------------------------------------------------------------
    def _judge_host_device(self, gpus: list[dict[str, Any]]) -> None:
        by_uuid = {str(g.get("uuid") or "").lower(): g for g in gpus if g.get("uuid")}
        slowest: dict[str, tuple[float, float | None]] = {}
        medians: dict[str, list[float]] = {"h2d": [], "d2h": []}
        local = True
        for device in self.torch.get("devices") or []:
            copies = device.get("host_device")
            if not copies:
                continue
            label = f"torch cuda:{device['index']}"
            if copies.get("error"):
                self.add("copy-untimed", Status.WARN, f"{label}: host<->device copies could not be timed: "
                         f"{copies['error']}")
                continue
            numa = copies.get("numa") or {}
            bound = numa.get("bound") is not False  # facts from before binding was recorded count as bound
            local = local and bound
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
                    if bound:
                        self.add("copy-slow", Status.FAIL, f"{label}: {text} copies at {rate:.1f} GB/s, "
                                 f"below {floor:g} GB/s")
                    else:
                        self.add("copy-slow-not-numa-local", Status.WARN, f"{label}: {text} copies at {rate:.1f} "
                                 f"GB/s, below {floor:g} GB/s, timed from CPUs outside the GPU's NUMA node "
                                 f"({numa.get('reason') or 'not bound'})")
        suffix = "" if local else " (not NUMA-local)"
        given = self.params.min_host_device_gbps is not None
        floor_param = "min_host_device_gbps" if given else "min_host_device_link_fraction"
        for direction, text in (("h2d", "host-to-device"), ("d2h", "device-to-host")):
            if direction in slowest:
                rate, floor = slowest[direction]
                self.measurements.append(measure(f"slowest {text} copy{suffix}", round(rate, 1), "GB/s",
                                                 at_least=floor if local else None, samples=medians[direction],
                                                 param=floor_param))

    # CUDA runtime vs driver ------------------------------------------------------------------
    def _judge_cuda_compat(self) -> None:
        driver_cuda = self.nvml.get("cuda_driver_version")
        builds = [("torch", self.torch.get("cuda")),
                  ("tensorflow", self.tf.get("cuda") if self.tf.get("is_cuda_build") else None)]
        for name, runtime in builds:
            verdict = runtime_vs_driver(runtime, driver_cuda)
            if verdict is None:
                continue
            level, text = verdict
            label = self._framework_label(self.torch if name == "torch" else self.tf)
            if level is Status.PASS:
                self.notes.append(f"{label}: {text}")
            else:
                self.add("cuda-newer-than-driver", level, f"{label}: {text} (driver {self.nvml.get('driver_version')})")

    # summary ---------------------------------------------------------------------------------
    def _finish(self, judged: list[dict[str, Any]], nvml_visible: int | None, torch_count: int | None) -> Outcome:
        info = [f.message for f in self.findings if f.level is Status.PASS]
        count = nvml_visible if nvml_visible is not None else torch_count
        names = sorted({g.get("name") for g in judged if g.get("name")})
        views = [("nvidia-smi" if self.nvml.get("source") == "nvidia-smi" else "NVML")] if self.nvml.get("available") else []
        views += [v["framework"] for v in (self.torch, self.tf) if self._probed(v) and not _cpu_only(v)]
        summary = f"{count} x {', '.join(names) or 'GPU'} visible to {', '.join(views)}"
        errors = [d["max_rel_error"] for d in (self.torch.get("devices") or self.tf.get("devices") or [])
                  if d.get("max_rel_error") is not None]
        if errors:
            size = (self.facts.get("params") or {}).get("matmul_size")
            summary += f"; each computed a correct {size}x{size} product (largest error {max(errors):.1e})"
        copies = [m for m in self.measurements if m.name.startswith("slowest ") and " copy" in m.name]
        if copies:
            summary += f"; host<->device copies at {min(m.value for m in copies):.1f} GB/s or more"
        if self.nvml.get("driver_version"):
            summary += f"; driver {self.nvml['driver_version']} (CUDA {self.nvml.get('cuda_driver_version')})"
        return outcome_from_findings(self.findings, self.measurements, passed=summary, notes=info + self.notes)
