"""gpu.visibility's fixes, one per cause: the check's own hints, split by the finding they answer."""

from __future__ import annotations

FIX_DRIVER = ("install the NVIDIA driver that matches the CUDA version of the image (or load it: `modprobe nvidia`), "
              "then confirm with `nvidia-smi`")
FIX_MISSING = "check `dmesg` for Xid/fallen-off-the-bus errors; reseat or replace the GPU"
FIX_NO_HARDWARE = ("this node has no NVIDIA GPU and no NVIDIA driver: run preflight on the GPU nodes (--nodes hosts.txt, "
                   "or --slurm inside a GPU allocation), or, if this node is not meant to have GPUs, fix what expects "
                   "them (expect.gpus_per_node, the hosts file's slots=, or --profile)")
FIX_NO_DRIVER = ("load or install the NVIDIA driver (`modprobe nvidia`; `nvidia-smi` must list every GPU); if "
                 "`lspci -d 10de:` shows no NVIDIA device either, this is not a GPU node: run preflight on the GPU "
                 "nodes or fix expect.gpus_per_node")
FIX_FRAMEWORK = ("unset or fix CUDA_VISIBLE_DEVICES; install the CUDA build of torch/tensorflow, not the CPU one")
FIX_NVML_BINDINGS = ("install NVIDIA's bindings alone: `pip uninstall -y pynvml && pip install --force-reinstall "
                     "nvidia-ml-py` (pynvml 11.x ships an old copy of the module that shadows nvidia-ml-py)")
FIX_NVML = "reboot after a driver upgrade (\"Driver/library version mismatch\"), or reinstall the driver"
FIX_ECC = ("drain the node, reset the GPU (nvidia-smi -r) and run NVIDIA's field diagnostics; "
           "a failed remap means RMA")
FIX_PENDING = "reset the GPU or reboot the node to apply pending row remaps or page retirements"
FIX_THERMAL = "check fans, airflow, inlet temperature and power supplies (nvidia-smi -q -d PERFORMANCE)"
FIX_LINK = "reseat the GPU/riser; check `nvidia-smi nvlink -s` and `lspci -vv`"
FIX_PERSISTENCE = "enable persistence mode (nvidia-persistenced, or nvidia-smi -pm 1)"
FIX_ECC_OFF = "enable ECC (nvidia-smi -e 1, then reset the GPU)"
FIX_BUSY = "end the processes holding the GPUs (nvidia-smi lists them) before training starts"
FIX_COMPAT = ("upgrade the driver, or install the framework build for the driver's CUDA")
FIX_PRODUCT = "run the GPU's diagnostics (dcgmi diag -r 3) and drain the node until they pass"
FIX_MIG = "disable MIG for training (nvidia-smi -mig 0, then reset the GPUs), or size the job to the MIG slices"
FIX_NUMA = ("time the copies bound to the GPU's NUMA node (numactl --cpunodebind): the profiles' floors are "
            "NUMA-local figures")

# Finding kind -> its fix (gpu.visibility's `fixes`). Kinds that share a fix share its cause.
FIXES = {
    "no-nvidia-hardware": FIX_NO_HARDWARE,
    "nvml-broken": FIX_NVML,
    "nvml-unavailable": ("install the NVIDIA driver's NVML library (libnvidia-ml, part of the driver) where preflight "
                         "runs, e.g. in the container image, matching the loaded driver"),
    "nvml-bindings": FIX_NVML_BINDINGS,
    "driver-missing": FIX_DRIVER,
    "no-gpu": ("the node should have GPUs: check that they are on the bus (lspci | grep -i nvidia) and that the "
               "NVIDIA driver lists them (nvidia-smi)"),
    "framework-probe": ("run the probe by hand (python -m preflight.workers.gpu_probe torch) to see the error; "
                        "install the CUDA build of the framework"),
    "framework-count": FIX_FRAMEWORK,
    "count": FIX_MISSING,
    "gpu-unreadable": FIX_MISSING,
    "gpu-lost": ("drain the node and look for Xid 79 (fallen off the bus) in `dmesg`; reset the GPU (nvidia-smi -r) "
                 "or reboot, and reseat or replace it if it is lost again"),
    "memory-in-use": FIX_BUSY,
    "processes": FIX_BUSY,
    "ecc-off": FIX_ECC_OFF,
    "ecc-unsupported": ("train on GPUs with ECC memory (datacenter GPUs), or accept undetected memory errors: "
                        "`--set gpu.visibility.require_ecc=false`"),
    "ecc-uncorrectable": FIX_ECC,
    "remap-failed": FIX_ECC,
    "remap-pending": FIX_PENDING,
    "pages-pending": FIX_PENDING,
    "throttled": FIX_THERMAL,
    "at-slowdown": FIX_THERMAL,
    "hot-idle": FIX_THERMAL,
    "persistence-off": FIX_PERSISTENCE,
    "pcie-degraded": FIX_LINK,
    "nvlink-down": FIX_LINK,
    "mixed-models": "replace the odd GPU with the node's model: the slowest GPU sets every step's pace",
    "no-product": ("install the CUDA build of torch or tensorflow: the GPUs are listed but no framework ran the "
                   "check product on them"),
    "product-failed": FIX_PRODUCT,
    "product-wrong": FIX_PRODUCT,
    "mig-enabled": FIX_MIG,
    "not-all-computed": FIX_FRAMEWORK,
    "copy-untimed": FIX_LINK,
    "copy-slow": FIX_LINK,
    "copy-slow-not-numa-local": FIX_NUMA,
    "cuda-newer-than-driver": FIX_COMPAT,
}
