"""collectives.local: all-reduce among this node's devices is correct, and how fast it is.

NCCL across the local GPUs when there are at least two, and gloo among CPU processes: on a CPU node
as the only path, on a GPU node as the fallback path (gloo also carries the CPU-side groups that
torch.distributed.checkpoint and many launchers create). The ranks are separate processes running
`preflight.workers.allreduce`, started by `preflight.launch.ranks.launch_local`; the cluster check starts
the same program with torchrun on every node.

Figures follow nccl-tests (doc/PERFORMANCE.md of NVIDIA/nccl-tests): algbw = bytes / time,
busbw = algbw x 2(n-1)/n, GB/s = 1e9 bytes/s, back-to-back operations timed between CUDA events after
warm-up. When nccl-tests' `all_reduce_perf` is on the PATH it runs too, and both figures are reported.
A busbw threshold holds at one message size (`busbw_size_bytes`, the size its source measured at),
which the check adds to its sweep: a 16 GiB figure is never compared with a 256 MiB one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from preflight_checks.collectives import nccl_tests
from preflight_checks.collectives.nccl_tests import row_at as row_at_size
from preflight.core.expectations import gpus_short
from preflight_checks.collectives.figures import MIB, allreduce_findings, human_bytes
from preflight.core.check import (
    CannotMeasure, Check, Expect, Learnable, Outcome, measure, outcome_from_findings, param,
)
from preflight.engine.context import NodeContext
from preflight.core.model import FIGURE_SIZE, Finding, Measurement, Status
from preflight.engine.faults import fault

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
    min_busbw_gbps: float | None = param(None, kind="threshold",
                                         help=("lowest all-reduce bus bandwidth across this node's GPUs (GB/s); "
                                               "unset: reported, not judged"),
                                         learn=Learnable("floor", "all-reduce bus bandwidth across the node's GPUs at "
                                                         "the largest message size", figure="size", name_has="busbw",
                                                         unit="GB/s", narrow="largest-at",
                                                         size_param="busbw_size_bytes"))
    # The message size min_busbw_gbps holds at, in bytes: the size its source measured it at. The
    # check adds it to the main backend's sweep. Unset: the largest size of the sweep.
    busbw_size_bytes: int | None = param(None, kind="size",
                                         help=("message size min_busbw_gbps holds at, added to the sweep (bytes); "
                                               "unset: the largest size"))
    # Run nccl-tests' all_reduce_perf as well when it is on the PATH (GPU nodes with NCCL).
    nccl_tests: bool = param(True, kind="flag",
                             help="also run nccl-tests' all_reduce_perf when it is on the PATH (true/false)")
    # Unset likewise: small-message latency (8 B) is reported, judged only when this is set.
    max_latency_us: float | None = param(None, kind="threshold",
                                         help=("highest all-reduce time at the smallest size (microseconds); "
                                               "unset: reported, not judged"),
                                         learn=Learnable("ceiling", "small-message all-reduce latency",
                                                         name_has="latency at", unit="us"))
    # Message sizes of the main backend; the smallest gives the latency, the largest the busbw that
    # min_busbw_gbps judges. None: GPU_SIZES with NCCL, CPU_SIZES with gloo on a CPU node.
    sizes_bytes: list[int] | None = param(None, kind="size",
                                          help=("all-reduce message sizes of the main backend (bytes); unset: a "
                                                "default sweep per backend"))
    # Sizes for the gloo fallback on GPU nodes (CPU tensors).
    fallback_sizes_bytes: list[int] = param(kind="size", factory=lambda: list(CPU_SIZES),
                                            help="message sizes of the gloo fallback on GPU nodes (bytes)")
    # nccl-tests' defaults: 5 warm-up operations, 20 timed iterations.
    iters: int = param(20, kind="count", minimum=1, help="timed all-reduce operations per size (count)")
    warmup: int = param(5, kind="count", help="untimed operations per size before timing (count)")
    # gloo processes. None: min(usable CPUs, 8), at least 2 (one all-reduce needs two ranks).
    gloo_ranks: int | None = param(None, kind="count", minimum=2,
                                   help="gloo processes (count); unset: min(usable CPUs, 8), at least 2")
    # Check gloo on GPU nodes too (the fallback path).
    check_gloo_on_gpu_nodes: bool = param(True, kind="flag",
                                          help="also check the gloo fallback on GPU nodes (true/false)")
    # Elements of the random-data correctness tensor (4 bytes each).
    check_elements: int = param(1 << 20, kind="count", minimum=1,
                                help="elements of the random-data correctness tensor (count, 4 bytes each)")
    # How long rank 0 waits for every rank to report in; a cold start of 8 CUDA processes takes
    # 10-20 s, so a minute is generous without hiding a hung rank for long.
    join_timeout_s: float = param(60.0, kind="duration",
                                  help="how long rank 0 waits for every rank to report in (seconds)")
    # init_process_group(timeout=...): a collective that waits longer than this fails. Always kept
    # shorter than what is left of this check's own timeout.
    pg_timeout_s: float = param(60.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")


FIX_RANK = ("look at that rank's output below; a process that hangs at start is often a GPU held by another "
            "process or a firewall on the rendezvous port")
FIX_WRONG = "a hardware fault (run the GPU's diagnostics, e.g. `dcgmi diag -r 3`) or a broken NCCL build"
FIX_SLOW = ("run with NCCL_DEBUG=INFO to see the transports NCCL picked and `nvidia-smi topo -m`; check that the "
            "fabric manager runs, NCCL_P2P_DISABLE is not set, and ACS/IOMMU do not route P2P through the CPU")


FIX_SLOW_GLOO = ("gloo runs over loopback on this node's CPUs: other load on the cores, or GLOO_SOCKET_IFNAME naming a "
                 "slow interface, slows it; compare with an idle node of the same kind")
FIX_NO_FLOOR = ("State the bus bandwidth this node must reach: `--set collectives.local.min_busbw_gbps=N` (GB/s; "
                "busbw_size_bytes says at which message size), or `--profile h100-8x` (h200-8x, a100-8x) for a known "
                "node type.")


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
    fixes = {
        "no-torch": "install torch (the CUDA build on GPU nodes)",
        "no-distributed": "install a torch build with distributed",
        "no-nccl": "install the CUDA build of torch",
        "no-gloo": "reinstall torch from the official wheels, which include the gloo backend",
        "no-run": "read the check's evidence: no rank of either backend could be started",
        "run-failed": FIX_RANK,
        "wrong-sums": FIX_WRONG,
        "latency": FIX_SLOW,
        "slow-busbw": FIX_SLOW,
        "threshold-size-not-measured": "run collectives.local again with this configuration; it adds the size to its sweep",
        "nccl-tests-failed": "run nccl-tests' all_reduce_perf by hand (the command is in the evidence) to see why",
        "nccl-tests-failure": "run nccl-tests' all_reduce_perf by hand (the command is in the evidence): the line "
                              "quoted is NCCL's or CUDA's own error",
        "nccl-tests-unreadable": "run nccl-tests' all_reduce_perf by hand and compare its table with the line quoted; "
                                 "report the nccl-tests version if preflight cannot read it",
        "nccl-tests-wrong": FIX_WRONG,
        "no-floor": FIX_NO_FLOOR,
    }
    Params = Params
    timeout_s = 180.0
    levels = {
        "quick": {"skip": "it starts one process per GPU and a communicator (10-20 s on 8 GPUs before the "
                          "first message), more than a 30 s quick run leaves after the probes"},
        "thorough": {"timeout": 600, "iters": 50, "warmup": 10},
    }

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
                          "sizes": main_sizes(params.sizes_bytes or GPU_SIZES, params)})
        elif gpus == 1:
            facts["notes"].append("one GPU: there is nothing to all-reduce among with NCCL on this node")
        if facts["gloo_available"] and (not gpus or params.check_gloo_on_gpu_nodes or not plans):
            # On a GPU node gloo is the CPU fallback, even with one GPU: never the figure an NCCL floor judges.
            role = "fallback" if gpus else "primary"
            # The busbw size is added on GPU nodes only: a 16 GiB tensor per CPU process is not a test.
            sizes = params.fallback_sizes_bytes if gpus else (params.sizes_bytes or CPU_SIZES)
            plans.append({"role": role, "backend": "gloo", "device": "cpu", "world_size": gloo_ranks,
                          "sizes": sizes})
        for index, plan in enumerate(plans):
            share = (ctx.time_left() - SLACK_S) / (len(plans) - index)
            facts["runs"].append(self._run(ctx, params, plan, share))
        binary = nccl_tests.find_binary() if gpus >= 2 and params.nccl_tests else None
        if binary and plans and plans[0]["backend"] == "nccl":
            facts["nccl_tests"] = self._nccl_tests(ctx, params, binary, plans[0]["sizes"], gpus)
        return facts

    def _nccl_tests(self, ctx: NodeContext, params: Params, binary: str, sizes: list[int], gpus: int) -> dict[str, Any]:
        argv = nccl_tests.argv_for(binary, sizes, gpus, params.iters, params.warmup)
        try:
            proc = ctx.run(argv, timeout=max(10.0, ctx.time_left() - SLACK_S))
        except (CannotMeasure, OSError) as exc:
            return {"argv": argv, "error": str(exc)}
        parsed = nccl_tests.parse_output(proc.stdout + "\n" + (proc.stderr or ""))
        error = nccl_tests.run_error(proc.returncode, parsed)
        return {"argv": argv, "returncode": proc.returncode, "error": error, **parsed}

    def _run(self, ctx: NodeContext, params: Params, plan: dict[str, Any], budget_s: float) -> dict[str, Any]:
        from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface, worker_argv

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
        # Tests only (preflight.engine.faults): this rank of every run never joins; it must end as ERROR naming it.
        if fault("collectives.local", "absent_rank") is not None:
            argv += ["--absent-rank", str(fault("collectives.local", "absent_rank"))]
        launch = launch_local(argv, plan["world_size"], timeout_s=launch_s, env=env, grace_s=LAUNCH_GRACE_S)
        for rank in launch.ranks:
            ctx.record(rank.command_line, rank.returncode, rank.stdout + rank.stderr, rank.duration_s)
        return {**plan, **interpret_launch(launch), "timeouts_s": {"launch": round(launch_s, 1),
                                                                   "join": round(join_s, 1), "pg": round(pg_s, 1)}}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        findings: list[Finding] = []
        if facts.get("torch_version") is None:
            level = Status.FAIL if self.expected_to_run(expect) else Status.SKIP
            findings.append(self.finding("no-torch", level, "torch is not installed: collectives are measured through "
                                         "torch.distributed"))
            return outcome_from_findings(findings, passed="")
        if not facts.get("distributed_available", True):
            findings.append(self.finding("no-distributed", Status.FAIL, "this torch build has no torch.distributed: no "
                                         "multi-process training is possible"))
            return outcome_from_findings(findings, passed="")

        details: list[str] = list(facts.get("notes", []))
        measurements: list[Measurement] = []
        gpus = facts.get("gpu_count", 0)
        short = gpus_short(self.id, facts, expect.gpus_per_node)  # gloo on CPU while GPUs are expected
        if short:
            findings.append(short)
        if gpus >= 2 and not facts.get("nccl_available"):
            findings.append(self.finding("no-nccl", Status.FAIL, f"{gpus} GPUs but this torch has no NCCL: multi-GPU "
                                         "training would fall back to gloo, far slower"))
        if not facts.get("gloo_available", True):
            findings.append(self.finding("no-gloo", Status.FAIL, "this torch has no gloo backend"))
        runs = facts.get("runs", [])
        if not runs and not findings:
            findings.append(self.finding("no-run", Status.ERROR, "no all-reduce could be run"))

        parts = []
        for run in runs:
            judged = _thresholds_apply(run, facts)
            if run.get("role") == "primary" and not judged and (params.min_busbw_gbps or params.max_latency_us):
                details.append(f"{run['backend']} on CPUs beside {gpus} GPU(s) is the fallback path: the busbw and "
                               "latency thresholds are for the GPUs' NCCL figures and do not judge it")
            run_findings, run_measurements, text = judge_run(run, params, judged)
            findings += run_findings
            measurements += run_measurements
            parts.append(text)
        findings += judge_nccl_tests(facts.get("nccl_tests"), runs, measurements, details)
        if facts.get("device_kind") == "cpu":
            details.append(f"no GPUs: gloo among {runs[0]['world_size'] if runs else '?'} CPU processes on "
                           f"{facts.get('cpu_count')} CPUs; these figures describe the CPU path, not a GPU interconnect")
        return outcome_from_findings(findings, measurements, passed="; ".join(parts), notes=details)


def main_sizes(sizes: list[int], params: Params) -> list[int]:
    """The main backend's sweep, with the size the busbw threshold holds at."""
    wanted = set(sizes) | ({params.busbw_size_bytes} if params.busbw_size_bytes else set())
    return sorted(wanted)


def size_not_measured_fix(run: dict[str, Any], at_size: int) -> str | None:
    """The fix for a floor whose size has no figure, by what the run planned (its `sizes`): None (the
    declared "run again with this configuration") only where that configuration would add the size."""
    planned = run.get("sizes") or []
    if at_size in planned:
        return (f"the sweep planned {human_bytes(at_size)} but has no figure there: read the check's evidence "
                "(memory, time) for why that size did not finish")
    if run.get("device") != "cuda":
        return ("the floor's size is a GPU figure, which the CPU sweep never adds (a tensor that size per CPU "
                "process is no test): judge GPU nodes with it, or set collectives.local.busbw_size_bytes to a "
                "size the sweep measures (sizes_bytes)")
    return None


def _thresholds_apply(run: dict[str, Any], facts: dict[str, Any]) -> bool:
    """Thresholds judge the main path only: NCCL on a GPU node, gloo on a node without GPUs."""
    if run.get("role") != "primary":
        return False
    return run.get("backend") == "nccl" or facts.get("device_kind", "cpu") == "cpu" and not facts.get("gpu_count")


def judge_run(run: dict[str, Any], params: Params, judged: bool) -> tuple[list[Finding], list[Measurement], str]:
    """Findings, measurements and a one-line account of one backend's run. Pure."""
    backend = run["backend"]
    label = f"{backend} ({run['world_size']} {'GPUs' if run['device'] == 'cuda' else 'processes'})"
    if run.get("role") == "fallback":
        label += " fallback"
    if not run.get("ok"):
        return [CollectivesLocal.finding("run-failed", Status.ERROR, f"{label}: {run.get('error') or 'failed'}")], [], \
            f"{label}: failed"

    result = run["result"]
    # Exact sums, as collectives.cluster judges them; the figures are declared here, by size.
    findings, shared = allreduce_findings(result, label, CollectivesLocal, min_busbw_gbps=None, max_latency_us=None)
    measurements = [shared[0]]
    sizes = sorted(result["sizes"], key=lambda s: s["bytes"])
    small, largest = sizes[0], sizes[-1]
    max_latency = params.max_latency_us if judged else None
    latency_us = small["time_s"] * 1e6
    latency = measure(f"{label}: latency at {human_bytes(small['bytes'])}", round(latency_us, 1), "us",
                      at_most=max_latency, param="max_latency_us", samples=[round(t * 1e6, 2) for t in small["time_samples_s"]])
    measurements.append(latency)
    if latency.ok is False:
        findings.append(CollectivesLocal.finding("latency", Status.FAIL, f"{label}: latency {latency_us:.1f} us above "
                                                 f"{max_latency:g} us", fix=None if backend == "nccl" else FIX_SLOW_GLOO))
    floor = params.min_busbw_gbps if judged else None
    at_size = params.busbw_size_bytes or largest["bytes"]
    if floor is not None and not any(e["bytes"] == at_size for e in sizes):
        findings.append(CollectivesLocal.finding(
            "threshold-size-not-measured", Status.WARN, f"{label}: min_busbw_gbps {floor:g} holds at "
            f"{human_bytes(at_size)}, which this run did not measure (largest: {human_bytes(largest['bytes'])}): "
            "not judged", fix=size_not_measured_fix(run, at_size)))
    for entry in sizes[1:] or sizes:  # with one size only, that size gives both figures
        m = measure(f"{label}: busbw at {human_bytes(entry['bytes'])}", round(entry["busbw_gbps"], 3), "GB/s",
                    at_least=floor if entry["bytes"] == at_size else None, param="min_busbw_gbps",
                    samples=[round(v, 3) for v in entry["busbw_samples_gbps"]],
                    figure=FIGURE_SIZE, series=backend, at=entry["bytes"], better="higher")
        measurements.append(m)
        if m.ok is False:
            findings.append(CollectivesLocal.finding(
                "slow-busbw", Status.FAIL, f"{label}: busbw {entry['busbw_gbps']:.2f} GB/s at "
                f"{human_bytes(entry['bytes'])}, below {floor:g} GB/s", fix=None if backend == "nccl" else FIX_SLOW_GLOO))
    if judged and floor is None:
        findings.append(CollectivesLocal.finding(
            "no-floor", Status.WARN, f"{label}: busbw {largest['busbw_gbps']:.2f} GB/s at {human_bytes(largest['bytes'])} "
            "is reported, not judged: no min_busbw_gbps says what this node must reach (only the sums were checked)"))
    measurements.append(shared[-1])  # algbw at the largest size
    text = (f"{label}: sums exact, latency {latency_us:.0f} us, busbw {largest['busbw_gbps']:.2f} GB/s "
            f"at {human_bytes(largest['bytes'])}")
    return findings, measurements, text


def judge_nccl_tests(run: dict[str, Any] | None, runs: list[dict[str, Any]], measurements: list[Measurement],
                     details: list[str]) -> list[Finding]:
    """nccl-tests' all_reduce_perf figures beside preflight's NCCL ones, at the sizes both measured."""
    if not run:
        return []
    by_hand = "run `" + " ".join(run.get("argv") or [nccl_tests.BINARY]) + "` by hand to see why"
    findings = _nccl_tests_trouble(run, by_hand)
    if run.get("error") and not run.get("rows"):
        if not findings:
            findings.append(CollectivesLocal.finding("nccl-tests-failed", Status.WARN,
                                                     f"nccl-tests all_reduce_perf did not run: {run['error']}", fix=by_hand))
        return findings
    findings += _nccl_tests_out_of_bounds(run)
    ours = next((r["result"] for r in runs if r.get("ok") and r.get("backend") == "nccl"), None)
    ours_sizes = sorted((ours or {}).get("sizes", []), key=lambda e: e["bytes"])
    first = row_at_size(run, ours_sizes[0]["bytes"]) if ours_sizes else None
    if first and first["out_of_place"] and first["out_of_place"]["time_us"] is not None:
        theirs = first["out_of_place"]["time_us"]
        details.append(f"latency at {human_bytes(ours_sizes[0]['bytes'])}: preflight {ours_sizes[0]['time_s'] * 1e6:.1f} us, "
                       f"nccl-tests {theirs:.1f} us")
    ours_by_size = {e["bytes"]: e for e in ours_sizes[1:] or ours_sizes}  # the smallest gives latency, not busbw
    for row in run.get("rows") or []:
        findings += _nccl_tests_wrong_row(row)
        _compare_busbw(row, ours_by_size, measurements, details)
    return findings


def _nccl_tests_trouble(run: dict[str, Any], by_hand: str) -> list[Finding]:
    """What nccl-tests said went wrong, and table rows preflight could not read."""
    findings = []
    for line in run.get("failures") or []:
        # nccl-tests' own words ("Test NCCL failure common.cu:1204 'unhandled cuda error ...'"), whether
        # or not some rows were printed before it stopped.
        findings.append(CollectivesLocal.finding("nccl-tests-failure", Status.FAIL, f"nccl-tests all_reduce_perf: {line}",
                                                 fix=by_hand))
    if run.get("unparsed"):
        findings.append(CollectivesLocal.finding("nccl-tests-unreadable", Status.WARN, "nccl-tests all_reduce_perf printed "
                                                 f"table rows preflight could not read, e.g. {run['unparsed'][0]!r}",
                                                 fix=by_hand))
    return findings


def _nccl_tests_out_of_bounds(run: dict[str, Any]) -> list[Finding]:
    """Wrong results counted only in the summary line (no row says how many, at which size)."""
    if not run.get("out_of_bounds") or any(half and half.get("wrong") for row in run.get("rows") or []
                                           for half in (row["out_of_place"], row["in_place"])):
        return []
    return [CollectivesLocal.finding("nccl-tests-wrong", Status.FAIL, "nccl-tests all_reduce_perf: "
                                     f"{run['out_of_bounds']} results out of bounds (# Out of bounds values)")]


def _nccl_tests_wrong_row(row: dict[str, Any]) -> list[Finding]:
    wrong = [half["wrong"] for half in (row["out_of_place"], row["in_place"]) if half and half["wrong"]]
    if not wrong:
        return []
    return [CollectivesLocal.finding("nccl-tests-wrong", Status.FAIL, f"nccl-tests all_reduce_perf: "
                                     f"{sum(wrong)} wrong elements at {human_bytes(row['bytes'])}")]


def _compare_busbw(row: dict[str, Any], ours_by_size: dict[int, dict[str, Any]], measurements: list[Measurement],
                   details: list[str]) -> None:
    """nccl-tests' busbw at a size preflight measured too, as a figure and beside preflight's."""
    if row["bytes"] not in ours_by_size:
        return
    busbw = (row["out_of_place"] or row["in_place"] or {}).get("busbw_gbps")
    if busbw is None:
        return
    measurements.append(measure(f"nccl-tests all_reduce_perf: busbw at {human_bytes(row['bytes'])}", busbw, "GB/s",
                                figure=FIGURE_SIZE, series="nccl-tests", at=row["bytes"], better="higher"))
    mine = ours_by_size[row["bytes"]]["busbw_gbps"]
    ratio = f" ({mine / busbw:.2f}x)" if busbw else ""
    details.append(f"busbw at {human_bytes(row['bytes'])}: preflight {mine:.1f} GB/s, nccl-tests {busbw:.1f} GB/s"
                   f"{ratio}")
