"""node.environment: the operating-system facts every training job depends on."""

from __future__ import annotations

import os
import resource
import shutil
import socket
from dataclasses import dataclass
from typing import Any

from preflight.check import Check, Expect, NodeContext, Outcome, measure
from preflight.model import Status, worst

GIB = 1024**3
UNLIMITED = -1  # how facts spell RLIM_INFINITY, which JSON cannot carry portably


@dataclass
class Params:
    # Docker's default /dev/shm is 64 MiB; PyTorch DataLoader workers pass batches through shm
    # and die with "bus error" on anything that small. 1 GiB is a floor, not a recommendation.
    min_shm_gib: float = 1.0
    # RDMA (InfiniBand, RoCE, EFA) pins memory; NCCL's IB transport needs memlock unlimited.
    require_unlimited_memlock: bool = True
    # Each DataLoader worker and NCCL opens many descriptors; 1024 is the common too-low default.
    min_open_files: int = 65536
    # Free space where checkpoints and the report go.
    min_free_disk_gib: float = 50.0
    min_cpus: int = 1
    min_memory_gib: float = 1.0
    # Extra directories whose free space matters (for example the checkpoint mount).
    disk_paths: list[str] | None = None


def _limit(value: int) -> int:
    return UNLIMITED if value == resource.RLIM_INFINITY else int(value)


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
    Params = Params
    timeout_s = 30.0

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
            "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "memory_total_bytes": psutil.virtual_memory().total,
            "memory_available_bytes": psutil.virtual_memory().available,
            "env": {k: os.environ[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR") if k in os.environ},
        }

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        measurements = []
        problems: list[tuple[Status, str]] = []

        shm = facts.get("shm_total_bytes")
        if shm is None:
            problems.append((Status.FAIL, "/dev/shm is missing: DataLoader workers cannot share batches"))
            measurements.append(measure("/dev/shm size", None, "GiB", at_least=params.min_shm_gib))
        else:
            m = measure("/dev/shm size", round(shm / GIB, 2), "GiB", at_least=params.min_shm_gib)
            measurements.append(m)
            if not m.ok:
                problems.append((Status.FAIL, f"/dev/shm is {shm / GIB:.2f} GiB, below {params.min_shm_gib} GiB: DataLoader workers will crash"))

        memlock = facts.get("memlock_soft")
        memlock_text = "unlimited" if memlock == UNLIMITED else f"{memlock / 1024:.0f} KiB"
        measurements.append(measure("locked-memory limit (soft)", memlock_text, ""))
        if params.require_unlimited_memlock and memlock != UNLIMITED:
            measurements[-1].threshold, measurements[-1].comparison, measurements[-1].ok = "unlimited", "==", False
            problems.append((Status.WARN, f"locked-memory limit is {memlock_text}, not unlimited: RDMA transports (InfiniBand, RoCE, EFA) need it unlimited"))
        elif params.require_unlimited_memlock:
            measurements[-1].threshold, measurements[-1].comparison, measurements[-1].ok = "unlimited", "==", True

        nofile = facts.get("nofile_soft")
        nofile_value = float("inf") if nofile == UNLIMITED else nofile
        m = measure("open-files limit (soft)", nofile if nofile != UNLIMITED else "unlimited", "", )
        m.threshold, m.comparison, m.ok = params.min_open_files, ">=", nofile_value >= params.min_open_files
        measurements.append(m)
        if not m.ok:
            hard = facts.get("nofile_hard")
            hint = " (the hard limit allows raising it)" if hard == UNLIMITED or (hard or 0) >= params.min_open_files else ""
            problems.append((Status.WARN, f"open-files limit is {nofile}, below {params.min_open_files}{hint}"))

        for path, disk in sorted(facts.get("disks", {}).items()):
            if "error" in disk:
                problems.append((Status.FAIL, f"cannot read free space of {path}: {disk['error']}"))
                continue
            m = measure(f"free disk at {path}", round(disk["free_bytes"] / GIB, 1), "GiB", at_least=params.min_free_disk_gib)
            measurements.append(m)
            if not m.ok:
                problems.append((Status.WARN, f"only {disk['free_bytes'] / GIB:.1f} GiB free at {path}, below {params.min_free_disk_gib} GiB"))

        addresses = facts.get("hostname_addresses") or []
        loopback = [a for a in addresses if a.startswith("127.") or a == "::1"]
        if not addresses:
            problems.append((Status.WARN, f"hostname {facts.get('hostname')!r} does not resolve: torchrun and NCCL bootstrap by hostname"))
        elif loopback and len(loopback) == len(addresses):
            pinned = facts.get("env", {})
            text = (f"hostname {facts.get('hostname')!r} resolves only to {', '.join(loopback)}: NCCL and gloo will "
                    "advertise a loopback address and multi-node jobs hang at rendezvous")
            if pinned.get("NCCL_SOCKET_IFNAME") or pinned.get("GLOO_SOCKET_IFNAME"):
                text += " (NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME is set, which works around it)"
            problems.append((Status.WARN, text))

        cpus = facts.get("cpu_affinity") or facts.get("cpu_count") or 0
        measurements.append(measure("usable CPUs", cpus, "", at_least=params.min_cpus))
        if cpus < params.min_cpus:
            problems.append((Status.FAIL, f"{cpus} usable CPUs, below {params.min_cpus}"))
        mem = (facts.get("memory_total_bytes") or 0) / GIB
        measurements.append(measure("memory", round(mem, 1), "GiB", at_least=params.min_memory_gib))
        if mem < params.min_memory_gib:
            problems.append((Status.FAIL, f"{mem:.1f} GiB of memory, below {params.min_memory_gib} GiB"))

        status = worst([s for s, _ in problems], default=Status.PASS)
        if not problems:
            summary = f"shm {shm / GIB:.1f} GiB, memlock {memlock_text}, nofile {nofile}, {cpus} CPUs, {mem:.0f} GiB RAM"
        else:
            summary = "; ".join(text for s, text in problems if s is status)
        return Outcome(status, summary, measurements, details=[text for _, text in problems])
