"""canary.training: a short, real data-parallel training run, watched step by step.

The checks before it measure the parts one at a time (loader throughput, all-reduce bandwidth,
scaling); this one trains. Ranks of `preflight.workers.canary` (one per GPU with NCCL, or CPU
processes with gloo) train the team's model (`entry = "package.module:function"`, contract in that
worker's docstring and examples/canary_entry.py) or a reference MLP under DistributedDataParallel,
and after the warm-up it measures, over `steps` steps:

- step time (median, p95; a step lasts as long as its slowest rank);
- the share of step time spent waiting for the next batch (the GPUs idle while the loader catches up);
- each gradient bucket's all-reduce latency (p50, p99) through a DDP communication hook, judged
  against the all-reduce of the same size measured without training around it: collectives.local's
  figures when it ran with the same backend and world size, else an idle all-reduce by the same ranks;
- GPU utilisation, sampled with NVML during the steps; peak device memory against capacity (and the
  largest batch that still fits, when asked); that the loss stays finite.

On CPU nodes the GPU figures are "not measured: no GPU"; the rest is measured.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from preflight.core.jsonlines import loads
from preflight_checks.canary.figures import collectives_reference, summarise
from preflight_checks.canary.figures import percentile
from preflight.machine.frameworks import installed
from preflight.core.expectations import gpus_short
from preflight.core.check import CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import NodeContext
from preflight.core.model import ALARM_COMM_LATENCY_P99, ALARM_GPU_UTILIZATION, FIGURE_STEP, Finding, Measurement, Status

LAUNCH_GRACE_S = 5.0
SLACK_S = 5.0
NOT_MEASURED = "not measured: no GPU"
# Reference model per device kind: on GPUs big enough that a step is compute-bound like real
# training; on CPU small enough for one thread per rank.
GPU_MODEL = {"hidden": 4096, "layers": 8, "batch": 512}
CPU_MODEL = {"hidden": 512, "layers": 4, "batch": 64}
UTIL_FIX = ("Look at the step: a small batch, a CPU-bound input pipeline, host-device copies in the "
            "loop or a synchronisation per step (loss.item()) keep GPUs idle; profile one step with "
            "torch.profiler.")


@dataclass
class Params:
    # "package.module:function" returning (model, optimizer, loss_fn, batches); None: reference MLP.
    entry: str | None = param(None, kind="text", runs_code=True,
                              help=("your training step to run instead of the reference model: "
                                    '"package.module:function" returning (model, optimizer, loss_fn, batches)'))
    steps: int = param(30, kind="count", minimum=1, help="timed training steps (count)")
    warmup: int = param(5, kind="count", help="untimed steps before timing starts (count)")
    # Samples per rank per step; None: the entry's own batch size, or the reference model's.
    batch_per_rank: int | None = param(None, kind="count", minimum=1,
                                       help=("samples per rank per step (count); unset: the entry's own batch "
                                             "size, or the reference model's"))
    # Share of step time spent waiting for the next batch. Above 10% the GPUs are idle a tenth of
    # every step (more loader workers, prefetching, pinned memory); above 30% the input pipeline,
    # not the GPUs, sets the training speed.
    max_data_wait_share: float = param(0.10, kind="fraction",
                                       help=("share of step time spent waiting for the next batch above which it "
                                             "warns (fraction, 0-1)"))
    fail_data_wait_share: float = param(0.30, kind="fraction",
                                        help=("share of step time spent waiting for data above which it fails "
                                              "(fraction, 0-1)"))
    # Mean NVML utilisation of the least busy GPU during the steps: below 70% a GPU waits for
    # something (data, the host, a straggler) for a third of the run.
    min_gpu_utilization_pct: float = param(70.0, kind="threshold",
                                           help=("lowest mean utilisation of the least busy GPU during the steps "
                                                 "(percent)"))
    # p99 of a bucket's all-reduce during training over the all-reduce of the same size alone:
    # above 3x, communication is slowed by what runs beside it (contention on the fabric or the
    # host, a straggler rank) and grows with every node added.
    max_latency_ratio: float = param(3.0, kind="threshold",
                                     help=("highest p99 all-reduce time during training over the same all-reduce "
                                           "alone (ratio)"))
    # Peak reserved device memory below 90% of capacity: less headroom OOMs on a longer sequence,
    # a larger batch or allocator fragmentation.
    min_memory_headroom: float = param(0.10, kind="fraction",
                                       help=("least free device memory at peak, as a share of capacity (fraction, "
                                             "0-1)"))
    # Find the largest batch per GPU that fits (doubling until out of memory), after the run.
    find_max_batch: bool = param(False, kind="flag",
                                 help=("after the run, find the largest batch per GPU that fits by doubling until "
                                       "out of memory (true/false)"))
    # CPU processes on a CPU-only node (gloo) and threads for each.
    cpu_ranks: int = param(2, kind="count", minimum=1, help="processes on a CPU-only node, with gloo (count)")
    # Also train under tensorflow's MirroredStrategy (tf.data input) where tensorflow is installed.
    tensorflow: bool = param(True, kind="flag",
                             help=("also train under tensorflow's MirroredStrategy where tensorflow is installed "
                                   "(true/false)"))
    cpu_threads_per_rank: int = param(1, kind="count", minimum=1, help="threads per CPU process (count)")
    join_timeout_s: float = param(60.0, kind="duration",
                                  help="how long rank 0 waits for every rank to report in (seconds)")
    pg_timeout_s: float = param(60.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")


class CanaryTraining(Check):
    id = "canary.training"
    title = "Training canary: a short real DDP run (step time, data wait, all-reduce latency, GPU use)"
    tags = ("node", "training", "torch", "ddp", "monitoring")
    why = (
        "Two traps waste GPU time after launch: GPUs idling while they wait for data, and communication "
        "that costs more than the compute gained by more devices. Neither shows up when the parts are "
        "measured one at a time; a few steps of real training show both, with the figures to set the "
        "go-live alarms from (`preflight alerts --from results.json`)."
    )
    remediation = (
        "Run the canary on your own model with canary.training.entry = \"package.module:function\".",
        "Set the go-live alarms from this run: preflight alerts --from preflight-report/results.json --out rules.yml",
    )
    fixes = {
        "no-torch": "install torch in the Python that runs training",
        "cannot-run": "install a torch build with torch.distributed (the official wheels have it)",
        "run-failed": "read the ranks' output in the evidence",
        "data-wait": ("feed the loop faster: more DataLoader workers, pin_memory=True, prefetching, data on local "
                      "disk; dataloader.throughput measures the loader alone"),
        "comm-latency-high": ("look for a straggler rank or GPU (clocks, thermals), contention on the NIC or PCIe "
                              "switch, and NCCL_DEBUG=INFO for the transport NCCL picked; set the "
                              "PreflightCommLatencyHigh alarm"),
        "gpu-utilization-low": UTIL_FIX,
        "gpu-utilization-unknown": "check that the NVIDIA driver's NVML library loads (nvidia-smi works)",
        "memory-headroom-low": "a smaller batch per GPU, activation checkpointing, or FSDP/ZeRO sharding",
        "loss-not-finite": ("lower the learning rate, check the input data for NaNs, use loss scaling with fp16 "
                            "(torch.amp.GradScaler)"),
        "tensorflow-skipped": "install tensorflow in the Python that runs training",
        "tensorflow-failed": "read the tensorflow worker's output in the evidence",
        "tensorflow-data-wait": ("prefetch (dataset.prefetch(tf.data.AUTOTUNE)), parallel map calls, cache; "
                                 "tf.data's profiler shows the slow stage"),
        "tensorflow-loss-not-finite": "lower the learning rate; check the input data for NaNs",
    }
    # `preflight alerts --from results.json` sets the go-live alarms from these figures.
    alarm_figures = {ALARM_GPU_UTILIZATION: "GPU utilisation (least busy GPU)",
                     ALARM_COMM_LATENCY_P99: "all-reduce latency per bucket p99"}
    Params = Params
    timeout_s = 240.0
    levels = {
        "quick": {"skip": "it is a monitored training run of tens of steps, minutes on a GPU node"},
        "thorough": {"timeout": 900, "steps": 100, "warmup": 10},
    }
    run_after = ("collectives.local",)

    def expected_to_run(self, expect: Expect) -> bool:
        return "torch" in (expect.frameworks or [])

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        facts: dict[str, Any] = {"cpu_count": os.cpu_count(), "entry": params.entry}
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            facts["torch_version"] = None
            return facts
        facts["torch_version"] = torch.__version__
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        use_gpus = gpus > 0 and dist.is_available() and dist.is_nccl_available()
        facts.update({"gpu_count": gpus, "device_kind": "cuda" if use_gpus else "cpu",
                      "backend": "nccl" if use_gpus else "gloo",
                      "world_size": gpus if use_gpus else max(1, params.cpu_ranks)})
        if not dist.is_available():
            facts["error"] = "this torch build has no torch.distributed"
            return facts
        model = dict(GPU_MODEL if use_gpus else CPU_MODEL)
        if params.batch_per_rank is not None:
            model["batch"] = params.batch_per_rank
        facts["model"] = None if params.entry else model
        want_tf = params.tensorflow and installed("tensorflow")
        facts["run"] = self._launch(ctx, params, facts, model, share=0.6 if want_tf else 1.0)
        if not params.tensorflow:
            facts["tensorflow"] = {"skipped": "canary.training.tensorflow is off"}
        elif not want_tf:
            facts["tensorflow"] = {"skipped": "tensorflow is not installed"}
        else:
            facts["tensorflow"] = self._run_tensorflow(ctx, params, facts, model)
        facts["collectives_reference"] = collectives_reference(
            ctx.earlier.get("collectives.local"), facts["world_size"], facts["backend"])
        return facts

    def _launch(self, ctx: NodeContext, params: Params, facts: dict[str, Any], model: dict[str, Any],
                share: float) -> dict[str, Any]:
        from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface, worker_argv

        launch_s = max(20.0, (ctx.time_left() - SLACK_S) * share)
        join_s = max(3.0, min(params.join_timeout_s, (launch_s - 20.0) / 1.5))
        pg_s = max(5.0, min(params.pg_timeout_s, launch_s - join_s - 5.0))
        threads = str(params.cpu_threads_per_rank)
        argv = worker_argv("canary", "--backend", facts["backend"], "--steps", str(params.steps),
                           "--warmup", str(params.warmup), "--threads", threads,
                           "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}")
        if params.entry:
            argv += ["--entry", params.entry]
            if params.batch_per_rank is not None:
                argv += ["--batch", str(params.batch_per_rank)]
        else:
            argv += ["--hidden", str(model["hidden"]), "--layers", str(model["layers"]), "--batch", str(model["batch"])]
        if params.find_max_batch:
            argv.append("--find-max-batch")
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "GLOO_SOCKET_IFNAME": loopback_interface()}
        launch = launch_local(argv, facts["world_size"], timeout_s=launch_s, env=env, grace_s=LAUNCH_GRACE_S,
                              cwd=os.getcwd())
        for rank in launch.ranks:
            ctx.record(rank.command_line, rank.returncode, rank.stdout + rank.stderr, rank.duration_s)
        return interpret_launch(launch)

    def _run_tensorflow(self, ctx: NodeContext, params: Params, facts: dict[str, Any],
                        model: dict[str, Any]) -> dict[str, Any]:
        from preflight.launch.ranks import worker_argv

        argv = worker_argv("canary_tf", "--device", "gpu" if facts["device_kind"] == "cuda" else "cpu",
                           "--replicas", str(max(1, params.cpu_ranks)), "--hidden", str(model["hidden"]),
                           "--layers", str(model["layers"]), "--batch", str(model["batch"]),
                           "--steps", str(params.steps), "--warmup", str(params.warmup),
                           "--threads", str(params.cpu_threads_per_rank))
        try:
            proc = ctx.run(argv, timeout=max(15.0, ctx.time_left() - SLACK_S), env={"TF_CPP_MIN_LOG_LEVEL": "2"})
        except CannotMeasure as exc:
            return {"ok": False, "error": str(exc)}
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        try:
            payload = loads(lines[-1]) if lines else {}
        except ValueError:
            payload = {}
        if proc.returncode == 0 and payload.get("ok"):
            return payload
        return {"ok": False, "error": payload.get("error") or f"exited with code {proc.returncode}"}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if facts.get("torch_version") is None:
            level = Status.FAIL if self.expected_to_run(expect) else Status.SKIP
            return outcome_from_findings([self.finding("no-torch", level, "torch is not installed: the canary "
                                                       "trains with torch DistributedDataParallel")], passed="")
        if facts.get("error"):
            return outcome_from_findings([self.finding("cannot-run", Status.ERROR, facts["error"])], passed="")
        run = facts.get("run") or {}
        if not run.get("ok"):
            what = f"the training run failed: {run.get('error') or 'no result'}"
            fix = (f"check that {facts['entry']} imports in the Python that runs the ranks and returns "
                   "(model, optimizer, loss_fn, batches)" if facts.get("entry") else None)
            return outcome_from_findings([self.finding("run-failed", Status.ERROR, what, fix=fix)], passed="")
        result = run["result"]
        s = summarise(result, facts.get("collectives_reference"))
        cpu = result.get("device") != "cuda"
        findings: list[Finding] = []
        ms = [measure("step time median", round(s["step_median_s"] * 1e3, 3), "ms"),
               measure("step time p95", round(s["step_p95_s"] * 1e3, 3), "ms")]

        share = s["data_wait_share"]
        ms.append(measure("data wait share of step time", round(share * 100, 2), "%",
                          at_most=params.max_data_wait_share * 100, param="max_data_wait_share"))
        ms.append(measure("data wait median", round(s["data_wait_median_s"] * 1e3, 3), "ms"))
        if share > params.max_data_wait_share:
            level = Status.FAIL if share > params.fail_data_wait_share else Status.WARN
            findings.append(self.finding("data-wait", level,
                                         f"{share:.0%} of every step waits for the next batch (WARN above "
                                         f"{params.max_data_wait_share:.0%}, FAIL above "
                                         f"{params.fail_data_wait_share:.0%})"))

        findings += self._judge_latency(s, params, ms, cpu)
        findings += self._judge_gpu(s, result, params, ms, cpu)
        short = gpus_short(self.id, facts, expect.gpus_per_node)  # trained on CPU processes while GPUs are expected
        if short:
            findings.append(short)
        findings += self._judge_tensorflow(facts.get("tensorflow") or {}, params, expect, ms)
        ms.append(measure("non-finite losses", s["non_finite_losses"], "", equals=0))
        if s["loss_last"] is not None:
            ms.append(measure("loss at the last step", s["loss_last"], ""))
        if s["non_finite_losses"]:
            findings.append(self.finding("loss-not-finite", Status.FAIL,
                                         f"{s['non_finite_losses']} step losses were NaN or infinite"))
        ms += step_measurements(s)  # after the summary figures, which tables show first
        where = f"{result['world_size']} {'GPUs' if not cpu else 'CPU processes'} ({result['backend']})"
        passed = (f"{s['steps']} steps of {result['model']} on {where}: step {s['step_median_s'] * 1e3:.1f} ms "
                  f"(p95 {s['step_p95_s'] * 1e3:.1f}), data wait {share:.1%}, all-reduce p99 "
                  f"{s['bucket_p99_s'] * 1e3:.2f} ms per bucket, loss finite")
        details = [f"all-reduce reference: {s['latency_reference']}"]
        if cpu:
            details.append(f"CPU only: {result['world_size']} gloo processes share {facts.get('cpu_count')} CPUs "
                           "with the gradient all-reduce threads; latency under training includes that contention")
        return outcome_from_findings(findings, ms, passed=passed, notes=details)

    def _judge_latency(self, s: dict[str, Any], params: Params, ms: list[Measurement], cpu: bool) -> list[Finding]:
        ms += [measure("all-reduce latency per bucket p50", round(s["bucket_p50_s"] * 1e3, 3), "ms"),
               measure("all-reduce latency per bucket p99", round(s["bucket_p99_s"] * 1e3, 3), "ms"),
               measure("all-reduce time per step p50", round(s["comm_per_step_p50_s"] * 1e3, 3), "ms"),
               measure("all-reduce time per step p99", round(s["comm_per_step_p99_s"] * 1e3, 3), "ms")]
        worst = s["worst_latency"]
        if worst is None:
            return []
        size = f"{worst['bytes'] / 2**20:.1f} MiB"
        ms.append(measure(f"all-reduce reference at {size}", round(worst["reference_s"] * 1e3, 3), "ms"))
        ms.append(measure(f"all-reduce p99 over reference at {size}", round(worst["ratio"], 2), "x",
                          at_most=params.max_latency_ratio, param="max_latency_ratio"))
        if worst["ratio"] <= params.max_latency_ratio:
            return []
        fix = "on CPU nodes the ranks and gloo's threads share the cores: more CPUs per rank, fewer ranks" if cpu else None
        return [self.finding("comm-latency-high", Status.WARN,
                             f"all-reduce of {size} buckets takes {worst['p99_s'] * 1e3:.2f} ms at p99 during training, "
                             f"{worst['ratio']:.1f}x the {worst['reference_s'] * 1e3:.2f} ms of the same all-reduce "
                             f"alone ({s['latency_reference']}; WARN above {params.max_latency_ratio:g}x)", fix=fix)]

    def _judge_gpu(self, s: dict[str, Any], result: dict[str, Any], params: Params, ms: list[Measurement],
                   cpu: bool) -> list[Finding]:
        if cpu:
            ms += [measure("GPU utilisation", NOT_MEASURED), measure("device memory headroom", NOT_MEASURED),
                   measure("peak host memory per rank", round(s["memory"]["peak_rss_bytes"] / 2**20, 1), "MiB")]
            return [self.finding("no-gpu", Status.PASS, f"GPU utilisation and device memory {NOT_MEASURED}")]
        findings = []
        util = s["gpu_utilization"] or {"error": "no sampling"}
        if "mean" in util:
            ms.append(measure("GPU utilisation (least busy GPU)", round(util["min"], 1), "%",
                              at_least=params.min_gpu_utilization_pct, param="min_gpu_utilization_pct"))
            ms.append(measure("GPU utilisation (mean over GPUs)", round(util["mean"], 1), "%"))
            if util["min"] < params.min_gpu_utilization_pct:
                findings.append(self.finding("gpu-utilization-low", Status.WARN,
                                             f"GPU {util['lowest_gpu']} was busy {util['min']:.0f}% of the steps "
                                             f"(WARN below {params.min_gpu_utilization_pct:.0f}%)"))
        else:
            findings.append(self.finding("gpu-utilization-unknown", Status.WARN,
                                         f"GPU utilisation could not be sampled: {util['error']}"))
        memory = s["memory"]
        headroom = memory["headroom"]
        ms.append(measure("peak device memory", round(memory["peak_reserved_bytes"] / 2**30, 2), "GiB"))
        ms.append(measure("device memory headroom", round(headroom * 100, 1), "%", at_least=params.min_memory_headroom * 100,
                          param="min_memory_headroom"))
        if headroom < params.min_memory_headroom:
            findings.append(self.finding("memory-headroom-low", Status.WARN,
                                         f"peak memory leaves {headroom:.0%} of the GPU free (WARN below "
                                         f"{params.min_memory_headroom:.0%})"))
        largest = (result.get("max_batch") or {}).get("largest_fitting")
        if largest:
            ms.append(measure("largest batch per GPU that fits", largest, "samples"))
        return findings


    def _judge_tensorflow(self, tf: dict[str, Any], params: Params, expect: Expect,
                          ms: list[Measurement]) -> list[Finding]:
        """tensorflow's run beside torch's: step time and data wait reported, data wait and loss judged."""
        judged = "tensorflow" in (expect.frameworks or [])
        if "skipped" in tf or not tf:
            level = Status.FAIL if judged and "not installed" in tf.get("skipped", "") else Status.PASS
            return [self.finding("tensorflow-skipped", level, f"tensorflow: not run ({tf.get('skipped', 'no facts')})")]
        if not tf.get("ok"):
            return [self.finding("tensorflow-failed", Status.ERROR if judged else Status.WARN,
                                 f"tensorflow MirroredStrategy run failed: {tf.get('error')}")]
        label = f"tensorflow MirroredStrategy ({tf['replicas']} replicas)"
        share = sum(tf["wait_s"]) / sum(tf["step_s"])
        ms += [measure(f"{label} step time median", round(percentile(tf["step_s"], 50) * 1e3, 3), "ms"),
               measure(f"{label} step time p95", round(percentile(tf["step_s"], 95) * 1e3, 3), "ms"),
               measure(f"{label} data wait share", round(share * 100, 2), "%", at_most=params.max_data_wait_share * 100,
                       param="max_data_wait_share")]
        findings = []
        if share > params.max_data_wait_share:
            level = Status.FAIL if share > params.fail_data_wait_share else Status.WARN
            findings.append(self.finding("tensorflow-data-wait", level,
                                         f"{label}: {share:.0%} of every step waits for the next batch"))
        bad = sum(1 for v in tf["losses"] if not math.isfinite(v))
        if bad:
            findings.append(self.finding("tensorflow-loss-not-finite", Status.FAIL,
                                         f"{label}: {bad} step losses were NaN or infinite"))
        return findings


def step_measurements(s: dict[str, Any]) -> list[Measurement]:
    """One point per timed step for the step chart: step time and data wait, in ms."""
    out = []
    for index, (took, waited) in enumerate(zip(s["step_s"], s["wait_s"])):
        out.append(measure(f"step time at step {index}", round(took * 1e3, 3), "ms", figure=FIGURE_STEP,
                           series="step time", at=index, better="lower"))
        out.append(measure(f"data wait at step {index}", round(waited * 1e3, 3), "ms", figure=FIGURE_STEP,
                           series="data wait", at=index, better="lower"))
    return out
