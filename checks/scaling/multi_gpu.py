"""scaling.multi_gpu: does doubling the devices on this node double the training throughput?

Weak scaling of a real DistributedDataParallel training step: the same model and the same batch per
device on 1, 2, 4, 8 devices, each device count in its own launch of `preflight.workers.ddp_scaling`
(GPUs with NCCL, or CPU processes with gloo). For each count n:

    X(n)  throughput, samples/s (n x batch per device / median step time)
    E(n)  = X(n) / (n X(1)), the scaling efficiency
    n E(n) effective devices: "8 GPUs deliver the throughput of 6.9"
    step = compute + exposed communication, where compute is the same step under DDP's no_sync()

With tensorflow installed, the same model is timed under MirroredStrategy in its own process
(`preflight.workers.tf_scaling`) and reported beside torch's.

Judged on E at the largest count: PASS at min_efficiency and above, WARN down to warn_efficiency,
FAIL below. On a node without GPUs the ranks are CPU processes sharing its cores: the figure is
reported as information about that node (a SKIP-level finding), never judged by GPU thresholds. The
facts carry `training_samples_per_s` (the node's throughput at its largest measured
count), which dataloader.throughput reads as the rate its loader must feed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from preflight.machine.frameworks import installed
from preflight.core.expectations import gpus_short
from preflight.core.check import (
    CannotMeasure, Check, Expect, Learnable, Outcome, measure, outcome_from_findings, param,
)
from preflight.engine.context import NodeContext
from preflight.core.model import FIGURE_SCALING, Finding, Measurement, Status
from preflight.core.jsonlines import last_json
from preflight.engine.faults import fault
from preflight_checks.scaling.table import (
    count_text, points_of, replica_text, scaling_table, step_text, superlinear_note,
)

MAX_DEFAULT_DEVICES = 8
LAUNCH_GRACE_S = 5.0
SLACK_S = 5.0
# Per-device compute that grows by more than this between 1 and n devices is worth a sentence: the
# loss is not communication.
COMPUTE_GROWTH_NOTE = 1.2
# Reference model per device kind. On GPUs the step must be compute-heavy enough that a healthy
# NVLink node hides most of the gradient all-reduce behind the backward pass, as a real mid-size
# data-parallel job does: 8 x 4096^2 parameters (134 M, 537 MB of fp32 gradients) and 4096 samples per
# GPU are ~3.3 TFLOP per step against ~3 ms of NVLink all-reduce. A PCIe-only or degraded fabric
# then shows up as lost efficiency. On CPU the model is small enough for one thread per rank.
GPU_MODEL = {"hidden": 4096, "layers": 8, "batch": 4096}
CPU_MODEL = {"hidden": 512, "layers": 4, "batch": 128}


@dataclass
class Params:
    # E at the largest device count. A healthy 8-GPU NVLink node keeps more than 90% on a
    # compute-bound data-parallel step; below 75% the fabric (PCIe fallback, a lost NVLink, P2P off)
    # or a straggler GPU costs a quarter of the node.
    min_efficiency: float = param(0.90, kind="fraction",
                                  help="lowest scaling efficiency at the largest device count (fraction, 0-1)",
                                  learn=Learnable("floor", "training scaling efficiency at the most GPUs",
                                                  name_prefix="efficiency on ", narrow="largest-count"))
    warn_efficiency: float = param(0.75, kind="fraction", at_most="min_efficiency",
                                   help=("efficiency below which it fails; between this and min_efficiency it "
                                         "warns (fraction, 0-1)"))
    # Device counts to measure. None: 1, 2, 4, 8 up to the node's GPUs (and the GPU count itself when
    # it is not a power of two); on a CPU node the same up to min(usable CPUs / cpu_threads_per_rank,
    # 8), and at least 1 and 2.
    device_counts: list[int] | None = param(None, kind="count", minimum=1,
                                            help=("device counts to measure (counts); unset: 1, 2, 4, 8 up to the "
                                                  "node's GPUs"))
    # Reference MLP: width, depth and samples per device per step. None: GPU_MODEL or CPU_MODEL.
    hidden_size: int | None = param(None, kind="count", minimum=1,
                                    help=("width of the reference model (units per layer); unset: a default per "
                                          "device kind"))
    layers: int | None = param(None, kind="count", minimum=1,
                               help="depth of the reference model (layers); unset: a default per device kind")
    batch_per_device: int | None = param(None, kind="count", minimum=1,
                                         help="samples per device per step (count); unset: a default per device kind")
    # "package.module:factory" to time the team's own model (see preflight.workers.ddp_scaling for
    # the contract); importable by the Python that runs the check.
    workload: str | None = param(None, kind="text", runs_code=True,
                                 help='your model to time instead of the reference one: "package.module:factory"')
    steps: int = param(10, kind="count", minimum=1,
                       help="timed step pairs (a normal step and a no_sync step) (count)")
    warmup: int = param(3, kind="count", help="untimed steps before timing (count)")
    # Threads per CPU rank, the same at every count. Weak scaling compares one rank with n ranks doing
    # the same work each; if one rank got all the cores at n=1 and a share of them at n=2, the figure
    # would measure the matmul library's thread scaling, not data-parallel training. One thread per
    # rank keeps per-rank compute constant while n stays within the cores; past them the ranks share
    # cores and that shows as lost efficiency, a finding about the node.
    cpu_threads_per_rank: int = param(1, kind="count", minimum=1,
                                      help="threads per CPU process, the same at every count (count)")
    # Also time tensorflow's MirroredStrategy when tensorflow is installed.
    tensorflow: bool = param(True, kind="flag",
                             help=("also time tensorflow's MirroredStrategy where tensorflow is installed "
                                   "(true/false)"))
    join_timeout_s: float = param(60.0, kind="duration",
                                  help="how long rank 0 waits for every rank to report in (seconds)")
    pg_timeout_s: float = param(120.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_device_counts(device_kind: str, gpus: int, cpus: int, threads_per_rank: int) -> list[int]:
    if device_kind == "cuda":
        limit = gpus
    else:
        limit = max(2, min(cpus // max(1, threads_per_rank), MAX_DEFAULT_DEVICES))
    counts = []
    n = 1
    while n <= limit:
        counts.append(n)
        n *= 2
    if device_kind == "cuda" and gpus not in counts:
        counts.append(gpus)
    return counts


class ScalingMultiGpu(Check):
    id = "scaling.multi_gpu"
    title = "Data-parallel scaling across the node's devices"
    tags = ("node", "scaling", "torch", "tensorflow", "performance")
    why = (
        "Eight GPUs are bought to train eight times as fast. If a DDP step on eight GPUs delivers the "
        "throughput of five, the node burns three GPUs' worth of time on communication: a PCIe path "
        "where NVLink was expected, a disabled peer-to-peer transport, a GPU running slow. This measures "
        "a real training step at 1, 2, 4 and 8 devices and says how many devices' worth of throughput "
        "the node delivers."
    )
    remediation = (
        "Compare the communication share of the step with collectives.local's busbw: low busbw means the "
        "interconnect (check `nvidia-smi topo -m`, NVLink status, fabric manager, NCCL_P2P_DISABLE).",
        "Efficiency falling only at the largest count while busbw is fine: look for a straggler GPU "
        "(gpu.visibility's clocks and throttle reasons) or CPU contention from other processes.",
        "Time the team's own model with scaling.workload = \"package.module:factory\": a model with more "
        "compute per parameter hides communication better than the reference network.",
        "On CPU-only nodes, ranks share the CPU cores: low efficiency there describes the CPU, not a GPU fabric.",
    )
    fixes = {
        "no-torch": "Install torch into the Python that runs preflight (pip install torch, the CUDA build on GPU nodes).",
        "launch-failed": ("Look at the ranks' output in the evidence: a rank that never joins is often a GPU held by "
                          "another process, or GLOO_SOCKET_IFNAME naming an interface that does not exist."),
        "nothing-measured": "Read the check's evidence: no device count produced a throughput.",
        "low-efficiency": ("Compare the communication share of the step with collectives.local's busbw: low busbw means "
                           "the interconnect (check `nvidia-smi topo -m`, NVLink status, fabric manager, "
                           "NCCL_P2P_DISABLE); fine busbw points at a straggler GPU (gpu.visibility's clocks and "
                           "throttle reasons)."),
        "tensorflow-not-installed": "Install tensorflow (pip install tensorflow), or remove it from expect.frameworks.",
        "tensorflow-failed": ("Run the tensorflow worker by hand (python -m preflight.workers.tf_scaling) and read its "
                              "error."),
        "tensorflow-efficiency": ("tensorflow scales worse than expected: check its NCCL all-reduce (TF_CPP_VMODULE) "
                                  "and its device placement."),
    }
    Params = Params
    # Eight launches on an 8-GPU node (torch and tensorflow at 1, 2, 4, 8) with cold CUDA starts.
    timeout_s = 480.0
    levels = {
        "quick": {"skip": "it trains at 1, 2, 4 and 8 devices, minutes on a GPU node"},
        "thorough": {"timeout": 1200, "steps": 30, "warmup": 5},
    }

    def expected_to_run(self, expect: Expect) -> bool:
        return "torch" in (expect.frameworks or [])

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        facts: dict[str, Any] = {"cpu_count": usable_cpus()}
        try:
            import torch
        except ImportError:
            facts["torch_version"] = None
            return facts
        import torch.distributed as dist

        facts["torch_version"] = torch.__version__
        if not dist.is_available():
            raise CannotMeasure("this torch build has no torch.distributed")
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        use_gpus = gpus > 0 and dist.is_nccl_available()
        device_kind = "cuda" if use_gpus else "cpu"
        facts.update({"gpu_count": gpus, "device_kind": device_kind,
                      "backend": "nccl" if use_gpus else "gloo",
                      "threads_per_rank": params.cpu_threads_per_rank})
        if gpus and not use_gpus:
            facts["notes"] = [f"{gpus} GPUs but this torch has no NCCL: measured CPU processes with gloo instead"]
        counts = sorted(set(params.device_counts or default_device_counts(
            device_kind, gpus, facts["cpu_count"], params.cpu_threads_per_rank)))
        if device_kind == "cuda" and counts and counts[-1] > gpus:
            raise CannotMeasure(f"device_counts asks for {counts[-1]} GPUs; this node has {gpus}")
        if 1 not in counts:
            counts = [1] + counts  # E(n) is relative to one device
        facts["device_counts"] = counts
        model = dict(GPU_MODEL if device_kind == "cuda" else CPU_MODEL)
        model.update({k: v for k, v in (("hidden", params.hidden_size), ("layers", params.layers),
                                        ("batch", params.batch_per_device)) if v is not None})
        facts["model"] = {**model, "workload": params.workload}

        want_tf = params.tensorflow and installed("tensorflow")
        launches = len(counts) * (2 if want_tf else 1)
        runs = []
        for index, n in enumerate(counts):
            share = (ctx.time_left() - SLACK_S) / (launches - index)
            runs.append(self._run_torch(ctx, params, facts, model, n, share))
        facts["torch"] = runs
        table = scaling_table(points_of(runs))
        facts["table"] = table
        largest = table[-1] if table else None
        facts["training_samples_per_s"] = largest["samples_per_s"] if largest else None
        facts["training_devices"] = largest["devices"] if largest else None

        if not params.tensorflow:
            facts["tensorflow"] = {"skipped": "scaling.tensorflow is off"}
        elif not want_tf:
            facts["tensorflow"] = {"skipped": "tensorflow is not installed"}
        else:
            tf_runs = []
            for index, n in enumerate(counts):
                share = (ctx.time_left() - SLACK_S) / (len(counts) - index)
                tf_runs.append(self._run_tensorflow(ctx, params, device_kind, model, n, share))
            facts["tensorflow"] = {"runs": tf_runs, "table": scaling_table(points_of(tf_runs))}
        return facts

    def _run_torch(self, ctx: NodeContext, params: Params, facts: dict[str, Any], model: dict[str, Any],
                   n: int, budget_s: float) -> dict[str, Any]:
        from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface, worker_argv

        launch_s = max(15.0, budget_s)
        join_s = max(3.0, min(params.join_timeout_s, (launch_s - 20.0) / 1.5))
        pg_s = max(5.0, min(params.pg_timeout_s, launch_s - join_s - 5.0))
        argv = worker_argv(
            "ddp_scaling", "--backend", facts["backend"],
            "--hidden", str(model["hidden"]), "--layers", str(model["layers"]), "--batch", str(model["batch"]),
            "--steps", str(params.steps), "--warmup", str(params.warmup),
            "--threads", str(params.cpu_threads_per_rank),
            "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}",
        )
        if params.workload:
            argv += ["--workload", params.workload]
        if fault("scaling.multi_gpu", "absent_rank") is not None:  # tests only: this rank never joins
            argv += ["--absent-rank", str(fault("scaling.multi_gpu", "absent_rank"))]
        threads = str(params.cpu_threads_per_rank)
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "GLOO_SOCKET_IFNAME": loopback_interface()}
        launch = launch_local(argv, n, timeout_s=launch_s, env=env, grace_s=LAUNCH_GRACE_S)
        for rank in launch.ranks:
            ctx.record(rank.command_line, rank.returncode, rank.stdout + rank.stderr, rank.duration_s)
        return {"devices": n, **interpret_launch(launch),
                "timeouts_s": {"launch": round(launch_s, 1), "join": round(join_s, 1), "pg": round(pg_s, 1)}}

    def _run_tensorflow(self, ctx: NodeContext, params: Params, device_kind: str, model: dict[str, Any],
                        n: int, budget_s: float) -> dict[str, Any]:
        from preflight.launch.ranks import worker_argv

        argv = worker_argv(
            "tf_scaling", "--replicas", str(n), "--device", "gpu" if device_kind == "cuda" else "cpu",
            "--hidden", str(model["hidden"]), "--layers", str(model["layers"]), "--batch", str(model["batch"]),
            "--steps", str(params.steps), "--warmup", str(params.warmup),
            "--threads", str(params.cpu_threads_per_rank),
        )
        run: dict[str, Any] = {"devices": n, "ok": False, "error": None, "result": None}
        try:
            proc = ctx.run(argv, timeout=max(15.0, budget_s), env={"TF_CPP_MIN_LOG_LEVEL": "2"})
        except CannotMeasure as exc:
            run["error"] = str(exc)
            return run
        payload = last_json(proc.stdout)
        if proc.returncode == 0 and payload and payload.get("ok"):
            run["ok"] = True
            run["result"] = {k: v for k, v in payload.items() if k != "ok"}
        else:
            run["error"] = (payload or {}).get("error") or f"exited with code {proc.returncode}"
        return run

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if facts.get("torch_version") is None:
            level = Status.FAIL if self.expected_to_run(expect) else Status.SKIP
            return outcome_from_findings([self.finding(
                "no-torch", level, "torch is not installed: scaling is measured with torch DistributedDataParallel")],
                passed="")
        kind = facts.get("device_kind", "cpu")
        short = gpus_short(self.id, facts, expect.gpus_per_node)  # scaled CPU processes while GPUs are expected
        findings: list[Finding] = [short] if short else []
        details: list[str] = list(facts.get("notes", []))
        runs = facts.get("torch", [])
        table = scaling_table(points_of(runs))
        samples_by_n = {r["devices"]: r["result"] for r in runs if r.get("ok")}
        measurements: list[Measurement] = []
        for row in table:
            measurements += self._row_measurements(row, samples_by_n[row["devices"]], kind, params, table)
        unjudged = self._not_judged(runs, table, kind)
        if unjudged:
            finding, extra = unjudged
            return outcome_from_findings(findings + [finding], measurements, passed="", details=details + extra)
        top = table[-1]
        judged_at = ("" if kind == "cpu" else
                     f"; PASS at {params.min_efficiency:.2f}, WARN down to {params.warn_efficiency:.2f}")
        summary = (f"{count_text(top['devices'], kind)} deliver the throughput of {top['effective_devices']:.1f} "
                   f"(efficiency {top['efficiency']:.2f}{judged_at}); {top['samples_per_s']:,.0f} samples/s")
        if top.get("comm_s") is not None:
            summary += "; " + step_text(top["step_s"], top["compute_s"])
        details += self._table_details(table, kind, measurements)
        note = superlinear_note(top["efficiency"], kind == "cpu")
        if note:
            details.append(note)
        model = facts.get("model", {})
        details.append("model: " + (model.get("workload") or f"reference MLP {model.get('layers')} x {model.get('hidden')}")
                       + f", {model.get('batch')} samples per device per step")
        findings.append(self._efficiency_finding(facts, params, summary, top, measurements, details))
        tf_findings, tf_measurements, tf_details = self._judge_tensorflow(
            facts.get("tensorflow") or {}, params, expect, kind)
        return outcome_from_findings(findings + tf_findings, measurements + tf_measurements, passed=summary,
                                     details=details + tf_details)

    def _not_judged(self, runs: list[dict[str, Any]], table: list[dict[str, Any]],
                    kind: str) -> tuple[Finding, list[str]] | None:
        """Why there is no efficiency to judge (a launch failed, nothing or one device measured), with the
        details to add; None when there is."""
        failed = [r for r in runs if not r.get("ok")]
        if failed:
            text = "; ".join(f"{count_text(r['devices'], kind)}: {r.get('error') or 'failed'}" for r in failed)
            return self.finding("launch-failed", Status.ERROR, f"could not measure: {text}"), [text]
        if not table:
            return self.finding("nothing-measured", Status.ERROR, "no device count was measured"), []
        if len(table) == 1:
            # One device has nothing to scale across: not a fault of a one-GPU node, whatever is expected.
            return self.finding("single-device.not-applicable", Status.SKIP, f"{count_text(1, kind)} only: nothing to "
                                f"scale across ({table[0]['samples_per_s']:,.0f} samples/s measured)"), []
        return None

    @staticmethod
    def _table_details(table: list[dict[str, Any]], kind: str, measurements: list[Measurement]) -> list[str]:
        """The speedup from 2 devices (also a figure), each row in words, and compute that grew apart from
        any communication."""
        details = []
        top, base = table[-1], table[0]
        n = top["devices"]
        by_n = {row["devices"]: row for row in table}
        if 2 in by_n and n > 2:
            speedup = top["samples_per_s"] / by_n[2]["samples_per_s"]
            ideal = n / 2
            measurements.append(measure(f"speedup from 2 to {count_text(n, kind)} (ideal {ideal:g}x)", round(speedup, 2), "x"))
            details.append(f"2 to {count_text(n, kind)}: {speedup:.2f}x against the ideal {ideal:g}x")
        for row in table:
            line = f"{count_text(row['devices'], kind)}: {row['samples_per_s']:,.0f} samples/s, efficiency {row['efficiency']:.2f}"
            if row.get("comm_s") is not None:
                line += (f", step {row['step_s'] * 1e3:.1f} ms (compute {row['compute_s'] * 1e3:.1f} ms, "
                         f"exposed communication {row['comm_s'] * 1e3:.1f} ms)")
            details.append(line)
        if top.get("compute_s") and base.get("compute_s") and top["compute_s"] > COMPUTE_GROWTH_NOTE * base["compute_s"]:
            details.append(
                f"compute alone (no_sync) grew from {base['compute_s'] * 1e3:.1f} ms on 1 device to "
                f"{top['compute_s'] * 1e3:.1f} ms on {top['devices']}: the devices slow each other down apart "
                "from any communication (shared CPU cores or memory bandwidth, power or thermal limits)")
        return details

    def _efficiency_finding(self, facts: dict[str, Any], params: Params, summary: str, top: dict[str, Any],
                            measurements: list[Measurement], details: list[str]) -> Finding:
        """The efficiency at the largest count against the thresholds; on a CPU node reported, not judged."""
        efficiency = top["efficiency"]
        if facts.get("device_kind", "cpu") != "cpu":
            if efficiency >= params.min_efficiency:
                return self.finding("efficiency", Status.PASS, summary)
            level = Status.WARN if efficiency >= params.warn_efficiency else Status.FAIL
            return self.finding("low-efficiency", level, summary)
        # The figure is information about this CPU node, not a measure of a GPU fabric: no GPU
        # threshold judges it, and it never blocks.
        cpus = facts.get("cpu_count")
        details.insert(0, f"CPU only: {top['devices']} gloo processes with {facts.get('threads_per_rank', 1)} thread "
                          f"each share {cpus} CPUs with each other and with whatever else runs here; the figure "
                          "describes this CPU node, not a GPU interconnect, and is not judged.")
        for m in measurements:
            m.threshold, m.comparison, m.ok = None, None, None
        return self.finding("cpu-only.not-applicable", Status.SKIP,
                            f"{summary} [CPU only: processes share {cpus} CPUs]; reported, not judged: it describes "
                            "CPU sharing on this node, not a GPU fabric")

    @staticmethod
    def _row_measurements(row: dict[str, Any], result: dict[str, Any], kind: str, params: Params,
                          table: list[dict[str, Any]]) -> list[Measurement]:
        n = row["devices"]
        on = "on " + count_text(n, kind)
        largest = row is table[-1] and n > 1
        batch = result.get("batch_per_device", 0)
        out = [measure(f"throughput {on}", round(row["samples_per_s"], 1), "samples/s",
                       samples=[round(n * batch / t, 1) for t in result.get("step_samples_s", []) if t > 0],
                       figure=FIGURE_SCALING, series="torch", at=n, better="higher")]
        if n > 1 and "efficiency" in row:
            out.append(measure(f"efficiency {on}", round(row["efficiency"], 3), "",
                               at_least=params.min_efficiency if largest else None, param="min_efficiency"))
            out.append(measure(f"effective devices {on}", round(row["effective_devices"], 2), ""))
        if row.get("step_s") is not None:
            out.append(measure(f"step time {on}", round(row["step_s"] * 1e3, 2), "ms",
                               samples=[round(t * 1e3, 2) for t in result.get("step_samples_s", [])]))
        if row.get("compute_s") is not None:
            out.append(measure(f"compute (no_sync) {on}", round(row["compute_s"] * 1e3, 2), "ms",
                               samples=[round(t * 1e3, 2) for t in result.get("compute_samples_s", [])]))
            out.append(measure(f"exposed communication {on}", round(row["comm_s"] * 1e3, 2), "ms"))
        return out

    @staticmethod
    def _judge_tensorflow(tf_facts: dict[str, Any], params: Params, expect: Expect,
                          kind: str) -> tuple[list[Finding], list[Measurement], list[str]]:
        """tensorflow's figures, reported beside torch's; judged only when the team says it uses tensorflow
        (and never by GPU thresholds on a CPU node)."""
        judged = "tensorflow" in (expect.frameworks or [])
        check = ScalingMultiGpu
        if "skipped" in tf_facts:
            text = f"tensorflow: not measured ({tf_facts['skipped']})"
            if judged and "not installed" in tf_facts["skipped"]:
                return [check.finding("tensorflow-not-installed", Status.FAIL, text)], [], [text]
            return [], [], [text]
        runs = tf_facts.get("runs", [])
        failed = [r for r in runs if not r.get("ok")]
        measurements = []
        table = scaling_table(points_of(runs))
        results = {r["devices"]: r["result"] for r in runs if r.get("ok")}
        judge_figures = judged and kind == "cuda"
        for row in table:
            n = row["devices"]
            result = results[n]
            measurements.append(measure(f"tensorflow MirroredStrategy throughput on {replica_text(n, kind)}",
                                        round(row["samples_per_s"], 1), "samples/s",
                                        samples=[round(n * result["batch_per_device"] / t, 1)
                                                 for t in result.get("step_samples_s", []) if t > 0],
                                        figure=FIGURE_SCALING, series="tensorflow", at=n, better="higher"))
            if n > 1 and "efficiency" in row:
                largest = row is table[-1]
                measurements.append(measure(f"tensorflow MirroredStrategy efficiency on {replica_text(n, kind)}",
                                            round(row["efficiency"], 3), "",
                                            at_least=params.min_efficiency if (judge_figures and largest) else None,
                                            param="min_efficiency"))
        if failed:
            text = "tensorflow MirroredStrategy: " + "; ".join(
                f"{r['devices']} replicas: {r.get('error') or 'failed'}" for r in failed)
            level = Status.ERROR if judged else Status.WARN
            return [check.finding("tensorflow-failed", level, text)], measurements, [text]
        if len(table) < 2 or "efficiency" not in table[-1]:
            return [], measurements, ["tensorflow MirroredStrategy: fewer than two device counts measured"]
        top = table[-1]
        text = (f"tensorflow MirroredStrategy: {replica_text(top['devices'], kind)} deliver the throughput of "
                f"{top['effective_devices']:.1f} (efficiency {top['efficiency']:.2f}), "
                f"{top['samples_per_s']:,.0f} samples/s" + ("" if judge_figures else "; reported, not judged"))
        level = Status.PASS
        if judge_figures:
            if top["efficiency"] < params.warn_efficiency:
                level = Status.FAIL
            elif top["efficiency"] < params.min_efficiency:
                level = Status.WARN
        return [check.finding("tensorflow-efficiency", level, text)], measurements, [text]
