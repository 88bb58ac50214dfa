"""gpu.visibility: the GPUs are there, healthy, and compute correctly.

Three views of the GPUs are compared: NVML (the driver: every GPU on the node; read through
`nvidia-smi -q -x` where Python cannot load NVML), torch and tensorflow (what a training job sees,
after CUDA_VISIBLE_DEVICES). NVML's per-GPU health facts are
judged against the defaults below, and every GPU a framework sees multiplies two matrices whose
product is compared with a float64 reference computed on the CPU: listed is not the same as working.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from preflight.core.check import Check, Expect, Learnable, Outcome, param
from preflight.engine.context import NodeContext
from preflight.engine.faults import fault
from preflight_checks.gpu.fixes import FIXES
from preflight_checks.gpu.judging import (  # noqa: F401 - re-exported: part of this check's interface
    Judgement,
    pcie_link_gbps,
    runtime_vs_driver,
    visible_gpu_indices,
)
from preflight_checks.gpu.rules import device_image


def from_nvidia_smi(ctx: NodeContext, nvml: dict[str, Any]) -> dict[str, Any]:
    """NVML's facts as they came, unless Python cannot load NVML (no nvidia-ml-py, or bindings that fail)
    while the driver's own nvidia-smi is here: then `nvidia-smi -q -x` read into the same facts
    (source "nvidia-smi"), keeping the bindings' error. A driver that is absent or broken is judged as
    NVML found it; nvidia-smi would only say the same."""
    import shutil

    from preflight.core.check import CannotMeasure
    from preflight_checks.gpu.nvidia_smi import parse_query
    from preflight_checks.gpu.nvidia_smi_xml import NvidiaSmiXmlError

    binary = shutil.which("nvidia-smi")
    if nvml.get("available") or nvml.get("error_kind") not in ("no_bindings", "bindings") or not binary:
        return nvml
    try:
        proc = ctx.run([binary, "-q", "-x"], timeout=max(5.0, min(30.0, ctx.time_left() / 4)))
        read = parse_query(proc.stdout) if proc.returncode == 0 else None
    except (CannotMeasure, OSError, NvidiaSmiXmlError):
        read = None
    if not read or not read.get("available"):
        return nvml
    return {**read, "source": "nvidia-smi", "bindings": nvml.get("bindings"), "bindings_error": nvml.get("error")}


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
    probe_tensorflow: bool = param(True, kind="flag",
                                   help="also check what tensorflow sees (its import costs seconds) (true/false)")
    # Side of the float32 matrices each GPU multiplies. 2048 keeps the float64 CPU reference near a
    # second on a server CPU while using every SM of an H100; the GPU side takes milliseconds.
    matmul_size: int = param(2048, kind="count", minimum=1,
                             help=("side of the float32 matrices each GPU multiplies to prove it computes right "
                                   "(elements)"))
    # Largest allowed deviation from the float64 product, relative to its largest entry. IEEE float32
    # stays near 1e-6 at this size; TF32 would show ~1e-3, a faulty SM or memory far more.
    matmul_max_rel_error: float = param(1e-4, kind="threshold",
                                        help=("largest deviation from the float64 product, relative to its largest "
                                              "entry (fraction)"))
    # Busy time before the PCIe link is read under load: GPUs drop the link speed at idle and
    # retrain it within milliseconds of work.
    pcie_load_s: float = param(0.5, kind="duration",
                               help="busy time before the PCIe link is read under load (seconds)")
    # Pinned host<->device copy bandwidth each GPU must reach in both directions, in GB/s (the
    # shipped profiles set it from cloud health checks: 52 for H100 SXM on PCIe gen5 x16). Unset,
    # the floor is min_host_device_link_fraction of what the GPU's PCIe link carries at its maximum
    # generation and width: healthy GPUs copy at 80-90% of it, half means a slow or shared path.
    min_host_device_gbps: float | None = param(None, kind="threshold",
                                               help=("lowest pinned host<->device copy speed per GPU, each "
                                                     "direction (GB/s); unset: a share of the link"),
                                               learn=Learnable("floor", "pinned host<->device copy bandwidth, the "
                                                               "slower direction",
                                                               names=("slowest host-to-device copy",
                                                                      "slowest device-to-host copy")))
    min_host_device_link_fraction: float = param(0.5, kind="fraction",
                                                 help=("lowest copy speed as a share of what the GPU's PCIe link "
                                                       "carries (fraction, 0-1)"))
    # Size and count of the timed copies; 256 MiB is long enough to reach full speed on gen5.
    host_device_copy_mib: int = param(256, kind="size", help="size of each timed host<->device copy (MiB)")
    host_device_repeats: int = param(5, kind="count", minimum=1, help="timed copies per direction (count)")
    # Each framework probe (import, CUDA start-up, products, copies) must finish within this.
    probe_timeout_s: float = param(120.0, kind="duration", help="time allowed for each framework probe (seconds)")
    # NVML throttle reasons are read this many times; a reason counts when most readings show it.
    throttle_samples: int = param(3, kind="count", minimum=1,
                                  help=("times NVML throttle reasons are read; a reason counts when most readings "
                                        "show it (count)"))
    # An idle GPU this hot has a cooling problem (H100/H200 SXM slow their clocks near 87-90 C);
    # at the GPU's own slowdown threshold it is FAIL.
    max_idle_temperature_c: float = param(80.0, kind="threshold", help="highest idle GPU temperature (degrees C)")
    # Memory already taken before training starts means another job or a leftover process, and an
    # out-of-memory error waiting to happen. The driver's own reservation is well under 2%.
    min_free_memory_fraction: float = param(0.9, kind="fraction",
                                            help="least free GPU memory before training starts (fraction, 0-1)")
    # A process holding GPU memory is WARN even when memory is plentiful: it competes for the GPU.
    warn_on_processes: bool = param(True, kind="flag", help="warn when any process holds GPU memory (true/false)")
    # Datacenter GPUs run with ECC on; off means silent memory corruption goes unnoticed.
    require_ecc: bool = param(True, kind="flag", help="require ECC on (true/false)")
    # Uncorrectable ECC errors since the driver loaded; any one of them kills the job that hit it.
    max_volatile_uncorrectable_ecc: int = param(0, kind="count",
                                                help="most uncorrectable ECC errors since the driver loaded (count)")
    # NVML: a pending row remap or page retirement "won't affect future work" until the reset that
    # applies it, so it is WARN; set True to make it block.
    fail_on_pending_remap: bool = param(False, kind="flag",
                                        help=("make a pending row remap or page retirement block instead of warn "
                                              "(true/false)"))
    fail_throttle_reasons: list[str] = param(kind="list", factory=_default_fail_throttle,
                                             help="NVML throttle reasons that fail the check (names)")
    warn_throttle_reasons: list[str] = param(kind="list", factory=_default_warn_throttle,
                                             help="NVML throttle reasons that warn (names)")
    # Without persistence mode the driver tears down between jobs: slow starts and lost settings.
    require_persistence_mode: bool = param(True, kind="flag", help="require persistence mode on (true/false)")
    # NVLink links each GPU must have up (18 on H100/H200 SXM). Unset: as many as the best GPU
    # on this node, so that one GPU with a dead link stands out without knowing the platform.
    expected_nvlink_links: int | None = param(None, kind="count",
                                              help=("NVLink links each GPU must have up (count); unset: as many as "
                                                    "the best GPU on the node"))


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
    fixes = FIXES
    Params = Params
    timeout_s = 300.0
    # Its idle readings (temperature, throttle reasons, free memory, leftover processes) describe the
    # node only before the other checks load the GPUs for minutes: it runs before every other node check.
    run_first = True
    hook = True
    # quick: NVML and one torch probe with a small product and short copies (torch import and CUDA
    # start-up dominate: 5-10 s on an 8-GPU node); tensorflow's import alone would cost several more.
    levels = {
        "quick": {"timeout": 20, "probe_timeout_s": 10.0, "probe_tensorflow": False, "matmul_size": 1024,
                  "pcie_load_s": 0.2, "host_device_copy_mib": 64, "host_device_repeats": 2},
        "thorough": {"timeout": 600, "host_device_copy_mib": 1024, "host_device_repeats": 10,
                     "throttle_samples": 10, "pcie_load_s": 1.0},
    }

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.gpus_per_node and expect.gpus_per_node > 0)

    # ----------------------------------------------------------------------------------- collect

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        from preflight.workers.gpu_nvml import nvml_facts
        from preflight.launch.gpu_probe import framework_installed, run_probe

        from preflight.machine.pci import nvidia_pci_gpus

        # What is on the PCI bus tells a GPU node without a driver from a node that has no GPU at all.
        facts: dict[str, Any] = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 "pci_gpus": nvidia_pci_gpus()}
        # NVML first, before any probe holds a GPU: memory and processes are then what a job would meet.
        facts["nvml"] = from_nvidia_smi(ctx, nvml_facts(with_gpus=True, throttle_samples=params.throttle_samples))

        def budget() -> float:
            return min(params.probe_timeout_s, ctx.time_left() - 10)

        device_options = ["--devices", "--matmul-size", str(params.matmul_size), "--pcie-load-s", str(params.pcie_load_s)]
        torch_options = device_options + ["--copy-mib", str(params.host_device_copy_mib),
                                          "--copy-repeats", str(params.host_device_repeats)]
        if framework_installed("torch"):
            facts["torch"] = run_probe(ctx, "torch", torch_options, budget(), hang=fault(self.id, "probe_hangs"))
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
            facts["tensorflow"] = run_probe(ctx, "tensorflow", options, budget(),
                                            hang=fault(self.id, "probe_hangs"))
        facts["params"] = {"matmul_size": params.matmul_size}
        return facts

    # ---------------------------------------------------------------------------------- evaluate

    image_source = "device"

    def image(self, facts: dict[str, Any]) -> dict[str, Any]:
        """What NVML and the frameworks report: the GPUs' model, count and VBIOS, driver and CUDA."""
        return device_image(facts)

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        return Judgement(type(self), facts, params, expect).outcome()


