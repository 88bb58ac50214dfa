"""collectives.local: all-reduce among this node's devices is correct, and how fast it is.

NCCL across the local GPUs when there are at least two, and gloo among CPU processes: on a CPU node
as the only path, on a GPU node as the fallback path (gloo also carries the CPU-side groups that
torch.distributed.checkpoint and many launchers create). The ranks are separate processes running
`preflight.workers.allreduce`, started by `preflight.launch.launch_local`; the cluster check starts
the same program with torchrun on every node.

Figures follow nccl-tests (doc/PERFORMANCE.md of NVIDIA/nccl-tests): algbw = bytes / time,
busbw = algbw x 2(n-1)/n, GB/s = 1e9 bytes/s, median over iterations after warm-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from preflight.allreduce_figures import MIB, human_bytes, judge_allreduce
from preflight.check import Check, Expect, NodeContext, Outcome
from preflight.model import Measurement, Status, worst

# nccl-tests' sweep is 8 B .. 8 GiB; these points cover latency, the middle, and a message large
# enough (256 MiB, a typical DDP/FSDP bucket set) for NVLink busbw to approach its plateau.
GPU_SIZES = [8, MIB, 32 * MIB, 256 * MIB]
# gloo on CPU moves data at memory-copy speed through loopback; 16 MiB is past its plateau and keeps
# an 8-rank run within seconds.
CPU_SIZES = [8, MIB, 16 * MIB]
MAX_GLOO_RANKS = 8
LAUNCH_GRACE_S = 5.0
SLACK_S = 5.0  # kept back from the check's deadline for reporting


@dataclass
class Params:
    # Unset: busbw is measured and reported, not judged, because the right floor depends on the
    # interconnect (8x H100 SXM with NVLink 4 reaches several hundred GB/s at 256 MiB in
    # nccl-tests, PCIe-only nodes tens). Set it from a known-good node of the same kind.
    min_busbw_gbps: float | None = None
    # Unset likewise: small-message latency (8 B) is reported, judged only when this is set.
    max_latency_us: float | None = None
    # Message sizes of the main backend; the smallest gives the latency, the largest the busbw that
    # min_busbw_gbps judges. None: GPU_SIZES with NCCL, CPU_SIZES with gloo on a CPU node.
    sizes_bytes: list[int] | None = None
    # Sizes for the gloo fallback on GPU nodes (CPU tensors).
    fallback_sizes_bytes: list[int] = field(default_factory=lambda: list(CPU_SIZES))
    # nccl-tests' defaults: 5 warm-up operations, 20 timed iterations.
    iters: int = 20
    warmup: int = 5
    # gloo processes. None: min(usable CPUs, 8), at least 2 (one all-reduce needs two ranks).
    gloo_ranks: int | None = None
    # Check gloo on GPU nodes too (the fallback path).
    check_gloo_on_gpu_nodes: bool = True
    # Elements of the random-data correctness tensor (4 bytes each).
    check_elements: int = 1 << 20
    # How long rank 0 waits for every rank to report in; a cold start of 8 CUDA processes takes
    # 10-20 s, so a minute is generous without hiding a hung rank for long.
    join_timeout_s: float = 60.0
    # init_process_group(timeout=...): a collective that waits longer than this fails. Always kept
    # shorter than what is left of this check's own timeout.
    pg_timeout_s: float = 60.0
    # Fault injection, for tests and demonstrations only: this rank of every run never joins (its
    # process stays alive without reporting in), which must end as ERROR naming it.
    inject_absent_rank: int | None = None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class CollectivesLocal(Check):
    id = "collectives.local"
    title = "All-reduce among the node's devices (NCCL, gloo)"
    tags = ("node", "collectives", "torch", "nccl", "gloo")
    why = (
        "Data-parallel training all-reduces every gradient on every step. A node whose GPUs cannot "
        "all-reduce (a missing NCCL, a broken peer-to-peer path, a rank that never joins) hangs the "
        "whole job at start; one whose bus bandwidth is a fraction of what its interconnect allows "
        "(PCIe instead of NVLink, a disabled P2P) makes every step slow. Wrong sums silently corrupt "
        "the model."
    )
    remediation = (
        "Run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,P2P) to see the transports NCCL picked; "
        "`nvidia-smi topo -m` shows whether the GPUs talk over NVLink or PCIe.",
        "Low busbw with NVLink present: check that the fabric manager runs (NVSwitch systems), that "
        "NCCL_P2P_DISABLE is not set, and that ACS/IOMMU settings do not force PCIe traffic through the CPU.",
        "A rank that never joins: look at that rank's output below; a process that hangs at start is "
        "often a GPU held by another process or a firewall on the rendezvous port.",
        "gloo errors on a single node usually mean GLOO_SOCKET_IFNAME names an interface that does not exist.",
        "Wrong sums: a hardware fault (run the GPU's diagnostics, e.g. `dcgmi diag -r 3`) or a broken NCCL build.",
    )
    Params = Params
    timeout_s = 180.0

    def expected_to_run(self, expect: Expect) -> bool:
        return "torch" in (expect.frameworks or [])

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        cpus = usable_cpus()
        facts: dict[str, Any] = {"cpu_count": cpus, "runs": [], "notes": []}
        try:
            import torch
        except ImportError:
            facts["torch_version"] = None
            return facts
        import torch.distributed as dist

        facts["torch_version"] = torch.__version__
        facts["distributed_available"] = dist.is_available()
        if not dist.is_available():
            return facts
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        facts["gpu_count"] = gpus
        facts["nccl_available"] = bool(dist.is_nccl_available())
        facts["gloo_available"] = bool(dist.is_gloo_available())
        facts["device_kind"] = "cuda" if gpus else "cpu"
        gloo_ranks = params.gloo_ranks or max(2, min(cpus, MAX_GLOO_RANKS))

        plans: list[dict[str, Any]] = []
        if gpus >= 2 and facts["nccl_available"]:
            plans.append({"role": "primary", "backend": "nccl", "device": "cuda", "world_size": gpus,
                          "sizes": params.sizes_bytes or GPU_SIZES})
        elif gpus == 1:
            facts["notes"].append("one GPU: there is nothing to all-reduce among with NCCL on this node")
        if facts["gloo_available"] and (not gpus or params.check_gloo_on_gpu_nodes or not plans):
            role = "fallback" if plans else "primary"
            sizes = params.fallback_sizes_bytes if gpus else (params.sizes_bytes or CPU_SIZES)
            plans.append({"role": role, "backend": "gloo", "device": "cpu", "world_size": gloo_ranks,
                          "sizes": sizes})
        for index, plan in enumerate(plans):
            share = (ctx.time_left() - SLACK_S) / (len(plans) - index)
            facts["runs"].append(self._run(ctx, params, plan, share))
        return facts

    def _run(self, ctx: NodeContext, params: Params, plan: dict[str, Any], budget_s: float) -> dict[str, Any]:
        from preflight.launch import interpret_launch, launch_local, loopback_interface, worker_argv

        launch_s = max(10.0, budget_s)
        # Non-zero ranks give up on an absent rank 0 after 1.5 x join + 10 s (process_group.join);
        # that, plus start-up, must end before the launcher's deadline.
        join_s = max(3.0, min(params.join_timeout_s, (launch_s - 20.0) / 1.5))
        pg_s = max(5.0, min(params.pg_timeout_s, launch_s - join_s - 5.0))
        argv = worker_argv(
            "allreduce",
            "--backend", plan["backend"], "--device", plan["device"],
            "--sizes", ",".join(str(s) for s in plan["sizes"]),
            "--iters", str(params.iters), "--warmup", str(params.warmup),
            "--check-elements", str(params.check_elements),
            "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}",
        )
        env = {"OMP_NUM_THREADS": "1"}
        if plan["backend"] == "gloo":
            # All ranks are on this node: loopback, whatever the hostname resolves to.
            env["GLOO_SOCKET_IFNAME"] = loopback_interface()
        if params.inject_absent_rank is not None:
            argv += ["--absent-rank", str(params.inject_absent_rank)]
        launch = launch_local(argv, plan["world_size"], timeout_s=launch_s, env=env, grace_s=LAUNCH_GRACE_S)
        for rank in launch.ranks:
            ctx.record(rank.command_line, rank.returncode, rank.stdout + rank.stderr, rank.duration_s)
        return {**plan, **interpret_launch(launch), "timeouts_s": {"launch": round(launch_s, 1),
                                                                   "join": round(join_s, 1), "pg": round(pg_s, 1)}}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if facts.get("torch_version") is None:
            status = Status.FAIL if self.expected_to_run(expect) else Status.SKIP
            return Outcome(status, "torch is not installed: collectives are measured through torch.distributed")
        if not facts.get("distributed_available", True):
            return Outcome(Status.FAIL, "this torch build has no torch.distributed: no multi-process training is possible")

        problems: list[tuple[Status, str]] = []
        details: list[str] = list(facts.get("notes", []))
        measurements: list[Measurement] = []
        gpus = facts.get("gpu_count", 0)
        if gpus >= 2 and not facts.get("nccl_available"):
            problems.append((Status.FAIL, f"{gpus} GPUs but this torch has no NCCL: multi-GPU training "
                                          "would fall back to gloo, far slower"))
        if not facts.get("gloo_available", True):
            problems.append((Status.FAIL, "this torch has no gloo backend"))
        runs = facts.get("runs", [])
        if not runs and not problems:
            return Outcome(Status.ERROR, "no all-reduce could be run", details=details)

        parts = []
        for run in runs:
            run_problems, run_measurements, text = judge_run(run, params)
            problems += run_problems
            measurements += run_measurements
            parts.append(text)
        if facts.get("device_kind") == "cpu":
            details.append(f"no GPUs: gloo among {runs[0]['world_size'] if runs else '?'} CPU processes on "
                           f"{facts.get('cpu_count')} CPUs; these figures describe the CPU path, not a GPU interconnect")
        details += [text for _, text in problems]
        status = worst([s for s, _ in problems], default=Status.PASS)
        if problems:
            summary = "; ".join(text for s, text in problems if s is status)
        else:
            summary = "; ".join(parts)
        return Outcome(status, summary, measurements, details=details)


def judge_run(run: dict[str, Any], params: Params) -> tuple[list[tuple[Status, str]], list[Measurement], str]:
    """Problems, measurements and a one-line account of one backend's run. Pure."""
    backend = run["backend"]
    label = f"{backend} ({run['world_size']} {'GPUs' if run['device'] == 'cuda' else 'processes'})"
    if run.get("role") == "fallback":
        label += " fallback"
    if not run.get("ok"):
        return [(Status.ERROR, f"{label}: {run.get('error') or 'failed'}")], [], f"{label}: failed"

    result = run["result"]
    primary = run.get("role") == "primary"
    # Thresholds apply to the primary backend; the gloo fallback on GPU nodes is reported only.
    problems, measurements = judge_allreduce(
        result, label, min_busbw_gbps=params.min_busbw_gbps if primary else None,
        max_latency_us=params.max_latency_us if primary else None)
    sizes = sorted(result["sizes"], key=lambda s: s["bytes"])
    latency_us, largest = sizes[0]["time_s"] * 1e6, sizes[-1]
    text = (f"{label}: sums exact, latency {latency_us:.0f} us, busbw {largest['busbw_gbps']:.2f} GB/s "
            f"at {human_bytes(largest['bytes'])}")
    return problems, measurements, text
