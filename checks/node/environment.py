"""node.environment: the operating-system facts every training job depends on.

Also what the node has to train with: the NVIDIA GPUs on its PCI bus (whether or not a driver is
loaded) and which frameworks are importable. The verdict reads both: a node with NVIDIA GPUs must
have every GPU check measure, and a node with neither PyTorch nor TensorFlow cannot train.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
from dataclasses import dataclass
from typing import Any

from preflight.core.check import ROLE_INVENTORY, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import NodeContext
from preflight.core.model import Finding, Status
from preflight.machine.pci import nvidia_pci_gpus  # noqa: F401 - re-exported for callers of this check

GIB = 1024**3
UNLIMITED = -1  # how facts spell RLIM_INFINITY, which JSON cannot carry portably
FRAMEWORKS = ("torch", "tensorflow")
NO_FRAMEWORK = "neither PyTorch nor TensorFlow is installed: nothing here can train"
SHM_FIX = ("Containers: run with --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory "
           "at /dev/shm.")


@dataclass
class Params:
    # Docker's default /dev/shm is 64 MiB; PyTorch DataLoader workers pass batches through shm
    # and die with "bus error" on anything that small. 1 GiB is a floor, not a recommendation.
    min_shm_gib: float = param(1.0, kind="threshold", help="smallest /dev/shm (GiB)")
    # RDMA (InfiniBand, RoCE, EFA) pins memory; NCCL's IB transport needs memlock unlimited.
    require_unlimited_memlock: bool = param(
        True, kind="flag", help="require an unlimited locked-memory limit, as RDMA needs (true/false)")
    # Each DataLoader worker and NCCL opens many descriptors; 1024 is the common too-low default.
    min_open_files: int = param(65536, kind="count", minimum=1, help="lowest open-files limit (count)")
    # Free space where checkpoints and the report go.
    min_free_disk_gib: float = param(50.0, kind="threshold",
                                     help="least free space where checkpoints and the report go (GiB)")
    min_cpus: int = param(1, kind="count", minimum=1, help="fewest usable CPUs (count)")
    min_memory_gib: float = param(1.0, kind="threshold", help="least memory (GiB)")
    # Extra directories whose free space matters (for example the checkpoint mount).
    disk_paths: list[str] | None = param(None, kind="path",
                                         help="more directories whose free space is checked (paths)")


def _limit(value: int) -> int:
    return UNLIMITED if value == resource.RLIM_INFINITY else int(value)


def importable(names: list[str]) -> dict[str, bool]:
    """Which top-level modules could be imported, without importing them, and without the working
    directory (a planted `torch/` folder or `torch.py` there is not torch): preflight.machine.frameworks."""
    from preflight.machine.frameworks import installed

    return {name: installed(name) for name in names}


def _resolve_all(name: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        return []
    return sorted({info[4][0] for info in infos})


class NodeEnvironment(Check):
    id = "node.environment"
    title = "Node environment (shm, ulimits, disk, hostname)"
    tags = ("node", "os")
    why = (
        "Training jobs die on small details of the operating system long before they reach the GPUs: "
        "DataLoader workers crash on a small /dev/shm, RDMA needs unlimited locked memory, a low open-files "
        "limit breaks many-worker loaders, a full disk loses the checkpoint, and a hostname that resolves "
        "to 127.0.0.1 makes NCCL and gloo listen where no other node can reach them."
    )
    remediation = (
        "Containers: run with --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm.",
        "Raise limits in /etc/security/limits.conf or the container runtime: memlock unlimited, nofile 1048576.",
        "Make the hostname resolve to the node's routable address (fix /etc/hosts), or set "
        "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the interface that carries training traffic.",
        "Free disk space or point the checkpoint and output directories at a larger volume.",
    )
    fixes = {
        "shm-missing": SHM_FIX,
        "shm-small": "Give /dev/shm at least the configured size: " + SHM_FIX,
        "memlock-limited": ("Set memlock unlimited in /etc/security/limits.conf or the container runtime "
                            "(docker run --ulimit memlock=-1)."),
        "nofile-low": ("Raise nofile (ulimit -n, or nofile 1048576 in /etc/security/limits.conf or the container "
                       "runtime)."),
        "disk-unreadable": "Create the directory or fix its permissions, or point the setting that names it elsewhere.",
        "disk-low": "Free disk space or point the checkpoint and output directories at a larger volume.",
        "hostname-unresolved": ("Make the hostname resolve to the node's routable address (add it to /etc/hosts or "
                                "DNS)."),
        "hostname-loopback": ("Make the hostname resolve to the node's routable address (fix /etc/hosts or DNS), or "
                              "set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the interface that carries training "
                              "traffic."),
        "cpus-few": "Give the job more CPUs (the container's --cpus or cpuset, or the scheduler's allocation).",
        "memory-low": "Give the job more memory (the container's --memory, or the scheduler's allocation).",
        "gpu-without-driver": ("Install the NVIDIA driver for these GPUs and load it (modprobe nvidia, or reboot); "
                               "`nvidia-smi` must list every GPU."),
        "no-framework": ("Install the framework the team trains with into the Python that runs preflight (pip "
                         "install torch, or pip install tensorflow), or set expect.frameworks = [] if this node is "
                         "not meant to train."),
        "framework-missing": ("Install the expected framework into the Python that runs preflight on this node, or "
                              "remove it from expect.frameworks."),
    }
    # The one thing to say first in a NO-GO: a node that cannot train at all.
    headlines = ("no-framework", "gpu-without-driver")
    Params = Params
    timeout_s = 30.0
    run_first = True
    # Its facts say what the node has: NVIDIA GPUs on the PCI bus, frameworks, host name addresses.
    role = ROLE_INVENTORY
    hook = True
    # Reads limits, /proc and the filesystem: well under a second, at every level.
    levels = {"quick": {"timeout": 5}}

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        import psutil  # core dependency; imported here to keep CLI start-up lean

        shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
        paths = [str(ctx.output_dir)] + list(params.disk_paths or [])
        disks = {}
        for path in paths:
            try:
                usage = shutil.disk_usage(path)
                disks[path] = {"free_bytes": usage.free, "total_bytes": usage.total}
            except OSError as exc:
                disks[path] = {"error": str(exc)}
        hostname = socket.gethostname()
        fqdn = socket.getfqdn()
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        return {
            "hostname": hostname,
            "fqdn": fqdn,
            "hostname_addresses": _resolve_all(hostname),
            "shm_total_bytes": shm.total if shm else None,
            "memlock_soft": _limit(memlock[0]),
            "memlock_hard": _limit(memlock[1]),
            "nofile_soft": _limit(nofile[0]),
            "nofile_hard": _limit(nofile[1]),
            "disks": disks,
            "output_dir": str(ctx.output_dir),
            "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "memory_total_bytes": psutil.virtual_memory().total,
            "memory_available_bytes": psutil.virtual_memory().available,
            "env": {k: os.environ[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR") if k in os.environ},
            "nvidia_gpus": nvidia_pci_gpus(),
            "frameworks": importable(list(dict.fromkeys([*FRAMEWORKS, *(ctx.expect.frameworks or [])]))),
        }

    image_source = "bus"

    def image(self, facts: dict[str, Any]) -> dict[str, Any]:
        """How many NVIDIA GPUs the PCI bus shows, driver or not."""
        pci = facts.get("nvidia_gpus")
        return {"gpu_count": len(pci)} if isinstance(pci, list) and pci else {}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        findings: list[Finding] = []
        measurements = []

        def found(kind: str, level: Status, message: str, fix: str | None = None) -> None:
            findings.append(self.finding(kind, level, message, fix=fix))

        shm = facts.get("shm_total_bytes")
        if shm is None:
            found("shm-missing", Status.FAIL, "/dev/shm is missing: DataLoader workers cannot share batches")
            measurements.append(measure("/dev/shm size", None, "GiB", at_least=params.min_shm_gib, param="min_shm_gib"))
        else:
            m = measure("/dev/shm size", round(shm / GIB, 2), "GiB", at_least=params.min_shm_gib, param="min_shm_gib")
            measurements.append(m)
            if not m.ok:
                found("shm-small", Status.FAIL, f"/dev/shm is {shm / GIB:.2f} GiB, below {params.min_shm_gib} GiB: "
                      "DataLoader workers will crash")

        memlock = facts.get("memlock_soft")
        memlock_text = "unlimited" if memlock == UNLIMITED else f"{memlock / 1024:.0f} KiB"
        if params.require_unlimited_memlock:
            measurements.append(measure("locked-memory limit (soft)", memlock_text, "", equals="unlimited"))
            if memlock != UNLIMITED:
                found("memlock-limited", Status.WARN, f"locked-memory limit is {memlock_text}, not unlimited: RDMA "
                      "transports (InfiniBand, RoCE, EFA) need it unlimited")
        else:
            measurements.append(measure("locked-memory limit (soft)", memlock_text, ""))

        nofile = facts.get("nofile_soft")
        nofile_value = float("inf") if nofile == UNLIMITED else nofile
        m = measure("open-files limit (soft)", nofile if nofile != UNLIMITED else "unlimited", "")
        m.threshold, m.comparison, m.ok = params.min_open_files, ">=", nofile_value >= params.min_open_files
        measurements.append(m)
        if not m.ok:
            hard = facts.get("nofile_hard")
            raisable = hard == UNLIMITED or (hard or 0) >= params.min_open_files
            hint = " (the hard limit allows raising it)" if raisable else ""
            found("nofile-low", Status.WARN, f"open-files limit is {nofile}, below {params.min_open_files}{hint}")

        for path, disk in sorted(facts.get("disks", {}).items()):
            if "error" in disk:
                found("disk-unreadable", Status.FAIL, f"cannot read free space of {path}: {disk['error']}",
                      f"Create {path} or fix its permissions, or point the setting that names it elsewhere.")
                continue
            # The output directory is a new path on many runs (a dated --out): named by its role, so
            # fleet history sees one figure across runs; a configured disk path is its own name.
            where = "the output directory" if path == facts.get("output_dir") else path
            m = measure(f"free disk at {where}", round(disk["free_bytes"] / GIB, 1), "GiB", at_least=params.min_free_disk_gib,
                        param="min_free_disk_gib")
            measurements.append(m)
            if not m.ok:
                found("disk-low", Status.WARN, f"only {disk['free_bytes'] / GIB:.1f} GiB free at {path}, below "
                      f"{params.min_free_disk_gib} GiB")

        self._judge_hostname(facts, found)

        cpus = facts.get("cpu_affinity") or facts.get("cpu_count") or 0
        measurements.append(measure("usable CPUs", cpus, "", at_least=params.min_cpus, param="min_cpus"))
        if cpus < params.min_cpus:
            found("cpus-few", Status.FAIL, f"{cpus} usable CPUs, below {params.min_cpus}")
        mem = (facts.get("memory_total_bytes") or 0) / GIB
        measurements.append(measure("memory", round(mem, 1), "GiB", at_least=params.min_memory_gib, param="min_memory_gib"))
        if mem < params.min_memory_gib:
            found("memory-low", Status.FAIL, f"{mem:.1f} GiB of memory, below {params.min_memory_gib} GiB")

        measurements += self._judge_hardware(facts, expect, found)
        passed = f"shm {(shm or 0) / GIB:.1f} GiB, memlock {memlock_text}, nofile {nofile}, {cpus} CPUs, {mem:.0f} GiB RAM"
        return outcome_from_findings(findings, measurements, passed=passed)

    @staticmethod
    def _judge_hostname(facts: dict[str, Any], found: Any) -> None:
        addresses = facts.get("hostname_addresses") or []
        loopback = [a for a in addresses if a.startswith("127.") or a == "::1"]
        if not addresses:
            found("hostname-unresolved", Status.WARN, f"hostname {facts.get('hostname')!r} does not resolve: torchrun "
                  "and NCCL bootstrap by hostname")
        elif loopback and len(loopback) == len(addresses):
            pinned = facts.get("env", {})
            text = (f"hostname {facts.get('hostname')!r} resolves only to {', '.join(loopback)}: NCCL and gloo will "
                    "advertise a loopback address and multi-node jobs hang at rendezvous")
            if pinned.get("NCCL_SOCKET_IFNAME") or pinned.get("GLOO_SOCKET_IFNAME"):
                text += " (NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME is set, which works around it)"
            found("hostname-loopback", Status.WARN, text)

    @staticmethod
    def _judge_hardware(facts: dict[str, Any], expect: Expect, found: Any) -> list:
        """GPUs on the PCI bus without a driver, and frameworks to train with. Facts recorded by an older
        preflight carry neither, and are not judged on them."""
        measurements = []
        gpus = facts.get("nvidia_gpus")
        if gpus is not None:
            measurements.append(measure("NVIDIA GPUs on the PCI bus", len(gpus), ""))
            bound = [g for g in gpus if g.get("driver") == "nvidia"]
            if gpus and not bound:
                drivers = sorted({g.get("driver") or "no driver" for g in gpus})
                found("gpu-without-driver", Status.FAIL,
                      f"{len(gpus)} NVIDIA GPU{'s' if len(gpus) != 1 else ''} on the PCI bus, but none is bound to "
                      f"the NVIDIA driver ({', '.join(drivers)}): nothing can use them")
        frameworks = facts.get("frameworks")
        if frameworks is None:
            return measurements
        wanted = expect.frameworks
        if wanted is None and not any(frameworks.get(f) for f in FRAMEWORKS):
            found("no-framework", Status.FAIL, NO_FRAMEWORK)
        for name in wanted or []:
            if name in frameworks and not frameworks[name]:
                found("framework-missing", Status.FAIL,
                      f"{name} is expected (expect.frameworks) but cannot be imported here",
                      f"Install {name} into the Python that runs preflight on this node (pip install {name}), "
                      "or remove it from expect.frameworks.")
        return measurements
