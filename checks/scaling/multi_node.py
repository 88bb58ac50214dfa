"""scaling.multi_node: do N nodes train N times as fast as one?

Weak scaling of the scaling.multi_gpu workload across nodes: the same worker program
(`preflight.workers.ddp_scaling`, a real DistributedDataParallel step), the same model and the same
batch per device, started with torchrun the way collectives.cluster starts it (c10d rendezvous on
the first node, --local-addr and GLOO_SOCKET_IFNAME from a probe of every node):

    X(1)   throughput of one node with its K devices, samples/s (measured on the baseline node)
    X(N)   throughput of all N nodes, N x K devices, in one job
    E      = X(N) / (N X(1)), the efficiency
    N E    effective nodes: "4 nodes deliver the throughput of 3.4"
    step   = compute + exposed communication, where compute is the same step under DDP's no_sync()

K is the GPUs per node with NCCL, `cpu_ranks_per_node` CPU processes with gloo. The model is the
one named in the parameters, else the one scaling.multi_gpu ran on the baseline node in this run,
else scaling.multi_gpu's default for the device kind. Judged on E like scaling.multi_gpu: PASS at
min_efficiency and above, WARN down to warn_efficiency, FAIL below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings, too_few_nodes
from preflight.run.context import ClusterContext
from preflight.launch.torchrun import MIN_LAUNCH_S, SLACK_S, launch_and_wait, node_plan, pick_port, probe_usable
from preflight.launch.nodes import (
    choose_backend, loopback_findings, names_text, processes_text, shared_machine_findings,
)
from preflight.core.model import FIGURE_SCALING, Finding, Measurement, Scope, Status, worst
from preflight_checks.scaling.multi_gpu import CPU_MODEL, GPU_MODEL
from preflight.run.faults import fault

SOURCE_CHECK = "scaling.multi_gpu"


@dataclass
class Params:
    # E with all nodes. Data-parallel training across nodes over a fabric sized for it (InfiniBand
    # or RoCE at 200-400 Gbit/s per GPU node) keeps above 90% on a compute-bound step; below 75% a
    # quarter of the cluster is paid for and idle (a slow link, a straggler node, gradients over the
    # management network).
    min_efficiency: float = 0.90
    warn_efficiency: float = 0.75
    # Reference MLP: width, depth and samples per device per step. None: what scaling.multi_gpu ran
    # on the baseline node in this run, else its default for the device kind.
    hidden_size: int | None = None
    layers: int | None = None
    batch_per_device: int | None = None
    # "package.module:factory" to time the team's own model (see preflight.workers.ddp_scaling);
    # importable by the Python on every node.
    workload: str | None = None
    steps: int = 10  # timed pairs (normal step, no_sync step)
    warmup: int = 3
    # "nccl", "gloo", or None: NCCL when every node has GPUs and NCCL, gloo on CPU otherwise.
    backend: str | None = None
    # GPUs per node with NCCL. None: the smallest GPU count torch sees on any node.
    gpus_per_node: int | None = None
    # CPU processes per node with gloo, and threads per process (the same for X(1) and X(N), so that
    # per-rank compute stays constant and only the scaling is measured).
    cpu_ranks_per_node: int = 1
    cpu_threads_per_rank: int = 1
    # The node X(1) is measured on. None: the first reachable node.
    baseline_node: str | None = None
    rdzv_port: int | None = None  # None: a port free on the hosting node a moment before each launch
    rdzv_timeout_s: float = 60.0
    join_timeout_s: float = 60.0
    # A DDP step on a large model across nodes can take seconds; the first ones longer.
    pg_timeout_s: float = 120.0
    socket_ifname: str | None = None  # GLOO_SOCKET_IFNAME everywhere; None: found on each node
    env: dict[str, str] = field(default_factory=dict)  # extra environment for torchrun on every node


def efficiency(one: float, all_nodes: float, nodes: int) -> dict[str, float]:
    """E and effective nodes from the two throughputs. Pure."""
    value = all_nodes / (nodes * one)
    return {"efficiency": value, "effective_nodes": nodes * value}


def choose_model(params: Params, device: str, earlier: dict[str, Any] | None) -> dict[str, Any]:
    """The workload: parameters first, then what scaling.multi_gpu ran on the node, then its default. Pure."""
    model = dict(GPU_MODEL if device == "cuda" else CPU_MODEL)
    source = f"scaling.multi_gpu's default for {'GPUs' if device == 'cuda' else 'CPU'}"
    if earlier and earlier.get("device_kind") == device and earlier.get("model"):
        ran = earlier["model"]
        model.update({k: ran[k] for k in ("hidden", "layers", "batch") if ran.get(k) is not None})
        if ran.get("workload"):
            model["workload"] = ran["workload"]
        source = "what scaling.multi_gpu ran on the baseline node in this run"
    overrides = {"hidden": params.hidden_size, "layers": params.layers, "batch": params.batch_per_device}
    if any(v is not None for v in overrides.values()) or params.workload:
        source = "the check's parameters"
    model.update({k: v for k, v in overrides.items() if v is not None})
    if params.workload:
        model["workload"] = params.workload
    model.setdefault("workload", None)
    return {**model, "source": source}


class ScalingMultiNode(Check):
    id = "scaling.multi_node"
    title = "Data-parallel scaling across nodes"
    scope = Scope.CLUSTER
    tags = ("cluster", "scaling", "torch", "performance")
    why = (
        "Nodes are added to train faster. If a DDP step on four nodes delivers the throughput of two, "
        "half the cluster is paid for and idle: gradients cross a slow or congested network, one node "
        "is a straggler, or the traffic takes the management interface. This is the figure to know "
        "before a long run, not after."
    )
    remediation = (
        "Compare exposed communication on one node and on all nodes: what grows is the network. "
        "net.bandwidth and collectives.cluster name the slow link or node.",
        "For NCCL, run with NCCL_DEBUG=INFO and check that it uses the InfiniBand/RoCE devices "
        "(NET/IB), not NET/Socket over the management interface; set NCCL_SOCKET_IFNAME / NCCL_IB_HCA.",
        "A per-node throughput far from the others' in scaling.multi_gpu is a straggler: fix that node first.",
        "Larger per-device batches or gradient accumulation hide more communication behind compute.",
    )
    Params = Params
    # One line per parameter for `preflight explain`: what it means, and its unit.
    param_help = {
        "min_efficiency": "lowest scaling efficiency with all nodes (fraction, 0-1)",
        "warn_efficiency": ("efficiency below which it fails; between this and min_efficiency it warns "
                            "(fraction, 0-1)"),
        "hidden_size": "width of the reference model (units per layer); unset: what scaling.multi_gpu ran",
        "layers": "depth of the reference model (layers); unset: what scaling.multi_gpu ran",
        "batch_per_device": "samples per device per step (count); unset: what scaling.multi_gpu ran",
        "workload": "your model to time instead of the reference one: \"package.module:factory\"",
        "steps": "timed step pairs (a normal step and a no_sync step) (count)",
        "warmup": "untimed steps before timing (count)",
        "backend": "\"nccl\" or \"gloo\"; unset: NCCL when every node has GPUs, gloo otherwise",
        "gpus_per_node": "GPUs used per node with NCCL (count); unset: the fewest any node has",
        "cpu_ranks_per_node": "processes per node with gloo (count)",
        "cpu_threads_per_rank": "threads per CPU process (count)",
        "baseline_node": "node the one-node figure is measured on; unset: the first reachable node",
        "rdzv_port": "rendezvous port (TCP port); unset: one that was free on the hosting node",
        "rdzv_timeout_s": "how long torchrun waits for every node to join (seconds)",
        "join_timeout_s": "how long rank 0 waits for every rank to report in (seconds)",
        "pg_timeout_s": "how long one collective may wait before it fails (seconds)",
        "socket_ifname": ("network interface gloo uses on every node (GLOO_SOCKET_IFNAME); unset: found on "
                          "each node"),
        "env": "extra environment variables for torchrun on every node",
    }
    timeout_s = 300.0
    levels = {
        "quick": {"skip": "it trains on one node and then on all of them, minutes"},
        "thorough": {"timeout": 900, "steps": 30, "warmup": 5},
    }

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        facts = probe_usable(ctx)
        names = facts["nodes"]
        if len(names) < 2:
            return facts
        probes, usable = facts["probes"], facts["usable"]
        facts["per_node"] = {n: _multi_gpu_summary(ctx.node_facts.get(n, {}).get(SOURCE_CHECK)) for n in names}
        if len(usable) < 2:
            return facts
        choice = choose_backend({n: probes[n] for n in usable}, backend=params.backend,
                                gpus_per_node=params.gpus_per_node, cpu_ranks_per_node=params.cpu_ranks_per_node)
        facts["choice"] = choice
        if choice.get("error"):
            return facts
        baseline = params.baseline_node or usable[0]
        if baseline not in usable:
            facts["baseline_error"] = f"baseline_node {baseline!r} is not one of the usable nodes ({names_text(usable)})"
            return facts
        facts["baseline"] = baseline
        model = choose_model(params, choice["device"], ctx.node_facts.get(baseline, {}).get(SOURCE_CHECK))
        facts["model"] = model
        threads = params.cpu_threads_per_rank if choice["device"] == "cpu" else 1
        plan = node_plan(ctx, probes, usable, socket_ifname=params.socket_ifname, extra_env=params.env, threads=threads)
        facts["plan"] = plan

        budget = max(MIN_LAUNCH_S, (ctx.time_left() - SLACK_S) / 2)
        facts["one_node"] = self._launch(ctx, params, [baseline], plan, choice, model, threads, budget,
                                         params.rdzv_port or probes[baseline].get("free_port"))
        budget = max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S)
        host = usable[0]
        port = params.rdzv_port or pick_port(ctx, host, plan[host]["ip"])
        facts["all_nodes"] = self._launch(ctx, params, usable, plan, choice, model, threads, budget, port,
                                          absent_node=fault("scaling.multi_node", "absent_node"))
        return facts

    def _launch(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                choice: dict[str, Any], model: dict[str, Any], threads: int, budget_s: float, port: int | None,
                absent_node: str | None = None) -> dict[str, Any]:
        def worker_args(join_s: float, pg_s: float) -> list[str]:
            args = ["--backend", choice["backend"], "--device", choice["device"],
                    "--hidden", str(model["hidden"]), "--layers", str(model["layers"]), "--batch", str(model["batch"]),
                    "--steps", str(params.steps), "--warmup", str(params.warmup), "--threads", str(threads),
                    "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}"]
            return args + (["--workload", model["workload"]] if model.get("workload") else [])

        return launch_and_wait(
            ctx, nodes=nodes, plan=plan, nproc=choice["nproc_per_node"], module="ddp_scaling", worker_args=worker_args,
            budget_s=budget_s, timeouts_s=(params.rdzv_timeout_s, params.join_timeout_s, params.pg_timeout_s),
            port=port, absent_node=absent_node)

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        too_few = too_few_nodes(
            names, unreachable, expect, nothing="scaling across nodes could not be measured",
            single="there is nothing to scale across (scaling.multi_gpu covers the node's own devices)")
        if too_few:
            return too_few

        problems: list[Finding] = []
        details: list[str] = []
        fix_network, fix_nccl, fix_straggler, _ = self.remediation
        join_fix = ("Check that every node can reach the first node's rendezvous port and that torch and preflight "
                    "are installed for the Python it runs (--remote-python or python= in the hosts file).")

        def found(kind: str, level: Status, message: str, fix: str = "") -> None:
            problems.append(Finding(f"{self.id}.{kind}", level, message, fix))

        probes = facts.get("probes", {})
        without_torch = []
        for node in names:
            probe = probes.get(node, {})
            if "error" in probe:
                found("probe-failed", Status.ERROR, probe["error"], join_fix)
            elif probe.get("torch") is None:
                without_torch.append(node)
            elif not probe.get("distributed", True) or not probe.get("ip"):
                found("cannot-take-part", Status.ERROR, f"{node} cannot take part: "
                      + ("its torch has no torch.distributed" if not probe.get("distributed", True)
                         else "no interface towards the other nodes was found"), join_fix)
        if without_torch:
            everywhere = len(without_torch) == len(names)
            text = f"torch is not installed for the Python preflight runs on {names_text(without_torch)}"
            if everywhere and "torch" not in (expect.frameworks or []) and not self.expected_to_run(expect):
                return Outcome(Status.SKIP, text + "; scaling is measured with torch DistributedDataParallel")
            found("no-torch", Status.FAIL, text, join_fix)
        if unreachable:
            details.append(f"not measured, unreachable: {names_text(unreachable)}; scaling among the other nodes only")
        choice = facts.get("choice") or {}
        details += choice.get("notes", [])
        if facts.get("baseline_error"):
            found("baseline", Status.ERROR, facts["baseline_error"])
        if choice.get("error"):
            found("no-backend", Status.FAIL, choice["error"])
        details += loopback_findings(probes, {}, facts.get("ips", {}))
        shared = shared_machine_findings({n: p for n, p in probes.items() if "error" not in p})
        if shared:
            details += shared
            details.append("nodes that share one machine share its CPUs (and memory bandwidth): with more processes "
                           "than cores, N nodes cannot be N times as fast as one")

        one, everyone = facts.get("one_node"), facts.get("all_nodes")
        measurements: list[Measurement] = []
        per_node = choice.get("nproc_per_node") or 0
        kind = choice.get("device")
        if one is None or everyone is None:
            if not problems:
                found("too-few-usable", Status.ERROR, "fewer than two nodes could run torch: nothing was measured",
                      join_fix)
            return self._outcome(problems, details, measurements)
        n = len(everyone["nodes"])
        for label, run in ((f"one node ({one['nodes'][0]})", one), (f"all {n} nodes", everyone)):
            if not run.get("ok"):
                phase = run.get("phase") or "launch"
                status = Status.FAIL if phase == "collective" else Status.ERROR
                found(phase.replace(" ", "-"), status, f"{label}: {run.get('error')}",
                      fix_network if phase in ("collective", "timeout") else join_fix)
        if not (one.get("ok") and everyone.get("ok")):
            return self._outcome(problems, details, measurements)

        x_one = one["result"]["samples_per_s"]
        x_all = everyone["result"]["samples_per_s"]
        figures = efficiency(x_one, x_all, n)
        per_node_text = processes_text(per_node, kind)
        for label, run, devices in ((f"1 node x {per_node_text}", one, per_node),
                                    (f"{n} nodes x {per_node_text}", everyone, n * per_node)):
            result = run["result"]
            batch = result.get("batch_per_device", 0)
            measurements.append(measure(f"throughput on {label}", round(result["samples_per_s"], 1), "samples/s",
                                        samples=[round(devices * batch / t, 1) for t in result.get("step_samples_s", []) if t > 0],
                                        figure=FIGURE_SCALING, series="torch", at=len(run["nodes"]),
                                        better="higher"))
            measurements.append(measure(f"step time on {label}", round(result["step_s"] * 1e3, 2), "ms",
                                        samples=[round(t * 1e3, 2) for t in result.get("step_samples_s", [])]))
            measurements.append(measure(f"compute (no_sync) on {label}", round(result["compute_s"] * 1e3, 2), "ms",
                                        samples=[round(t * 1e3, 2) for t in result.get("compute_samples_s", [])]))
            measurements.append(measure(f"exposed communication on {label}",
                                        round((result["step_s"] - result["compute_s"]) * 1e3, 2), "ms"))
        measurements.append(measure(f"efficiency on {n} nodes", round(figures["efficiency"], 3), "",
                                    at_least=params.min_efficiency))
        measurements.append(measure(f"effective nodes of {n}", round(figures["effective_nodes"], 2), ""))

        e = figures["efficiency"]
        status = Status.PASS if e >= params.min_efficiency else Status.WARN if e >= params.warn_efficiency else Status.FAIL
        r_one, r_all = one["result"], everyone["result"]
        summary = (f"{n} nodes deliver the throughput of {figures['effective_nodes']:.2f} (efficiency {e:.2f}; PASS at "
                   f"{params.min_efficiency:.2f}, WARN down to {params.warn_efficiency:.2f}): {x_all:,.0f} samples/s on "
                   f"{n} x {per_node_text} against {x_one:,.0f} on one node")
        details.insert(0, f"one node ({one['nodes'][0]}): step {r_one['step_s'] * 1e3:.1f} ms = {r_one['compute_s'] * 1e3:.1f} ms "
                          f"compute + {max(0.0, r_one['step_s'] - r_one['compute_s']) * 1e3:.1f} ms exposed communication")
        details.insert(1, f"all {n} nodes: step {r_all['step_s'] * 1e3:.1f} ms = {r_all['compute_s'] * 1e3:.1f} ms compute + "
                          f"{max(0.0, r_all['step_s'] - r_all['compute_s']) * 1e3:.1f} ms exposed communication")
        if e > 1.1:
            details.append("efficiency above 1: one node ran slower per device than the whole job did, which "
                           "points at other load on the baseline node while it was measured (or a baseline node "
                           "slower than the rest); rerun on idle nodes before trusting either figure")
        if r_one["compute_s"] and r_all["compute_s"] > 1.2 * r_one["compute_s"]:
            details.append(f"compute alone (no_sync) grew from {r_one['compute_s'] * 1e3:.1f} ms to "
                           f"{r_all['compute_s'] * 1e3:.1f} ms: the loss is not only communication (a slower node, "
                           "shared CPUs, power or thermal limits)")
        model = facts.get("model", {})
        details.append("model: " + (model.get("workload") or f"reference MLP {model.get('layers')} x {model.get('hidden')}")
                       + f", {model.get('batch')} samples per device per step ({model.get('source')})")
        details += _per_node_lines(facts.get("per_node") or {}, one["nodes"][0])
        if kind == "cpu":
            summary += " [CPU only: gloo among CPU processes]"
        found("efficiency", status, summary, "" if status is Status.PASS else " ".join((fix_network, fix_nccl,
                                                                                          fix_straggler)))
        return self._outcome(problems, details, measurements)

    @staticmethod
    def _outcome(findings: list[Finding], details: list[str], measurements: list[Measurement]) -> Outcome:
        """The worst findings make the summary; the others lead the details."""
        status = worst([f.level for f in findings], default=Status.ERROR)
        headline = [f.message for f in findings if f.level is status]
        others = [f.message for f in findings if f.level is not status]
        outcome = outcome_from_findings(findings, measurements, passed="; ".join(headline),
                                        details=list(dict.fromkeys(others + details)))
        return outcome


def _multi_gpu_summary(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """What scaling.multi_gpu measured on a node, for context. Pure."""
    if not facts:
        return None
    return {"samples_per_s": facts.get("training_samples_per_s"), "devices": facts.get("training_devices"),
            "device_kind": facts.get("device_kind"), "model": facts.get("model")}


def _per_node_lines(per_node: dict[str, Any], baseline: str) -> list[str]:
    known = {n: s for n, s in per_node.items() if s and s.get("samples_per_s")}
    if len(known) < 2:
        return []
    values = sorted(s["samples_per_s"] for s in known.values())
    median = values[len(values) // 2]
    lines = ["scaling.multi_gpu on each node: " + ", ".join(
        f"{n} {s['samples_per_s']:,.0f} samples/s on {s.get('devices')}" for n, s in known.items())]
    slow = [n for n, s in known.items() if s["samples_per_s"] < 0.9 * median]
    if slow:
        lines.append(f"{names_text(slow)} {'is' if len(slow) == 1 else 'are'} more than 10% below the median node "
                     "in scaling.multi_gpu: a straggler holds every step of a multi-node job back")
    return lines
