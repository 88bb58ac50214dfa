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

When E is below min_efficiency, or the all-node run fails without being pinned on a node, and
there are three nodes or more, an adaptive isolation pass (`isolation = "adaptive"`, within
`isolation_timeout_s`, unset: 20 s for each round a search at the cluster's size may take, the check's
timeout grown by it; preflight.launch.isolation_launch, as collectives.cluster runs it) trains
groups of the nodes at once, split and confirmed, and names the node, link or topology boundary
that makes a group's step slow (judged on compute / step, see
preflight_checks.scaling.multi_node_isolation), or a straggler from the ranks' own step times. The
all-node run is never judged alone (preflight.launch.recheck.take_readings): it is trained a second
time always (after a first that met warn_efficiency, twice more at once, each counted only under a
quarter of it: a part dropping out), and a third when E was below warn_efficiency (a FAIL) and the
pass blamed nothing, and a
run just under it trained again at once (below it only when that one is too); below it in every run
FAILs, in most runs (or under a quarter of it in one, or under half of it in one with another run below
it) is an intermittent FAIL, and otherwise the shortfall is a transient WARN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.core.check import (
    TOO_FEW_NODES_FIXES, Check, Expect, Learnable, Outcome, outcome_from_findings, param, too_few_nodes,
)
from preflight.engine.context import ClusterContext
from preflight.launch.torchrun import MIN_LAUNCH_S, SLACK_S, launch_and_wait, node_plan, pick_port, probe_usable
from preflight.launch.isolation_findings import isolation_findings
from preflight.launch.isolation_launch import isolation_method, pass_seconds, timeout_with_pass
from preflight.launch.nodes import (
    choose_backend, loopback_findings, names_text, probe_problems, processes_text, share_a_machine,
    shared_machine_findings,
)
from preflight.core.model import Finding, Measurement, Scope, Status, worst
from preflight_checks.scaling.multi_gpu import CPU_MODEL, GPU_MODEL
from preflight_checks.scaling.table import step_text, superlinear_note
from preflight_checks.scaling.multi_node_isolation import (
    ISOLATION_FIXES, ISOLATION_METHODS, isolation_reason, run_isolation,
)
from preflight.engine.faults import fault
from preflight.launch.recheck import (
    DROP_OUT, FAR_BELOW, INTERMITTENT_FIX, MARGINAL, TRANSIENT_FIX, judged, readings_of, take_readings,
)
from preflight_checks.scaling.multi_node_figures import (
    SHORTFALL_KINDS, below_floor, efficiency, far_below, met_floor, recheck_text, run_measurements,
)

SOURCE_CHECK = "scaling.multi_gpu"


PASS_IN_TIMEOUT_S = 180.0  # the pass's time that timeout_s holds (isolation_timeout_s was 180 s); a longer pass adds the rest


@dataclass
class Params:
    # E with all nodes. Data-parallel training across nodes over a fabric sized for it (InfiniBand
    # or RoCE at 200-400 Gbit/s per GPU node) keeps above 90% on a compute-bound step; below 75% a
    # quarter of the cluster is paid for and idle (a slow link, a straggler node, gradients over the
    # management network).
    min_efficiency: float = param(0.90, kind="fraction",
                                  help="lowest scaling efficiency with all nodes (fraction, 0-1)",
                                  learn=Learnable("floor", "training scaling efficiency at the most nodes",
                                                  name_prefix="efficiency on ", narrow="largest-count"))
    warn_efficiency: float = param(0.75, kind="fraction", at_most="min_efficiency",
                                   help=("efficiency below which it fails; between this and min_efficiency it "
                                         "warns (fraction, 0-1)"))
    # Reference MLP: width, depth and samples per device per step. None: what scaling.multi_gpu ran
    # on the baseline node in this run, else its default for the device kind.
    hidden_size: int | None = param(None, kind="count", minimum=1,
                                    help=("width of the reference model (units per layer); unset: what "
                                          "scaling.multi_gpu ran"))
    layers: int | None = param(None, kind="count", minimum=1,
                               help="depth of the reference model (layers); unset: what scaling.multi_gpu ran")
    batch_per_device: int | None = param(None, kind="count", minimum=1,
                                         help=("samples per device per step (count); unset: what scaling.multi_gpu "
                                               "ran"))
    # "package.module:factory" to time the team's own model (see preflight.workers.ddp_scaling);
    # importable by the Python on every node.
    workload: str | None = param(None, kind="text", runs_code=True,
                                 help='your model to time instead of the reference one: "package.module:factory"')
    steps: int = param(10, kind="count", minimum=1,
                       help="timed step pairs (a normal step and a no_sync step) (count)")
    warmup: int = param(3, kind="count", help="untimed steps before timing (count)")
    # "nccl", "gloo", or None: NCCL when every node has GPUs and NCCL, gloo on CPU otherwise.
    backend: str | None = param(None, kind="choice", choices=("nccl", "gloo"),
                                help='"nccl" or "gloo"; unset: NCCL when every node has GPUs, gloo otherwise')
    # GPUs per node with NCCL. None: the smallest GPU count torch sees on any node.
    gpus_per_node: int | None = param(None, kind="count", minimum=1,
                                      help="GPUs used per node with NCCL (count); unset: the fewest any node has")
    # CPU processes per node with gloo, and threads per process (the same for X(1) and X(N), so that
    # per-rank compute stays constant and only the scaling is measured).
    cpu_ranks_per_node: int = param(1, kind="count", minimum=1, help="processes per node with gloo (count)")
    cpu_threads_per_rank: int = param(1, kind="count", minimum=1, help="threads per CPU process (count)")
    # The node X(1) is measured on. None: the first reachable node.
    baseline_node: str | None = param(None, kind="text",
                                      help="node the one-node figure is measured on; unset: the first reachable node")
    rdzv_port: int | None = param(None, kind="count", minimum=1,
                                  help="rendezvous port (TCP port); unset: one that was free on the hosting node")
    rdzv_timeout_s: float = param(60.0, kind="duration",
                                  help="how long torchrun waits for every node to join (seconds)")
    join_timeout_s: float = param(60.0, kind="duration",
                                  help="how long rank 0 waits for every rank to report in (seconds)")
    # A DDP step on a large model across nodes can take seconds; the first ones longer.
    pg_timeout_s: float = param(120.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")
    socket_ifname: str | None = param(None, kind="text",
                                      help=("network interface gloo uses on every node (GLOO_SOCKET_IFNAME); "
                                            "unset: found on each node"))
    env: dict[str, str] = param(kind="table", factory=dict,
                                help="extra environment variables for torchrun on every node")
    isolation: str = param("adaptive", kind="choice", choices=ISOLATION_METHODS,
                           help=('when the all-node run fails or scales below min_efficiency: "adaptive" trains '
                                 'groups of nodes to name the node or link at fault; "off"'))
    # Unset: the rounds a search at the cluster's size takes, 20 s each (isolation_launch.pass_seconds);
    # the check's timeout, which held PASS_IN_TIMEOUT_S of it, grows by the rest.
    isolation_timeout_s: float | None = param(None, kind="duration", help=(
        "time allowed for the isolation pass; unset: 20 s for each round a search at the cluster's size may take, "
        "880 s at 8 nodes (seconds)"))
    # A group's compute / step (its no_sync step over its full step): the share of a step that is
    # not exposed communication. Unset: warn_efficiency.
    isolation_min_step_efficiency: float | None = param(
        None, kind="fraction", help="lowest compute / step time of a group in the isolation pass (fraction, 0-1); "
                                    "unset: warn_efficiency")


def group_floor(params: Params) -> float:
    """The step efficiency below which a group of the isolation pass is bad."""
    chosen = params.isolation_min_step_efficiency
    return params.warn_efficiency if chosen is None else chosen


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


FIX_NETWORK = ("Compare exposed communication on one node and on all nodes: what grows is the network. net.bandwidth "
               "and collectives.cluster name the slow link or node.")
FIX_NCCL = ("For NCCL, run with NCCL_DEBUG=INFO and check that it uses the InfiniBand/RoCE devices (NET/IB), not "
            "NET/Socket over the management interface; set NCCL_SOCKET_IFNAME / NCCL_IB_HCA.")
FIX_STRAGGLER = "A per-node throughput far from the others' in scaling.multi_gpu is a straggler: fix that node first."
FIX_JOIN = ("Check that every node can reach the first node's rendezvous port and that torch and preflight are "
            "installed for the Python it runs (--remote-python or python= in the hosts file).")


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
    remediation = (FIX_NETWORK, FIX_NCCL, FIX_STRAGGLER,
                   "Larger per-device batches or gradient accumulation hide more communication behind compute.")
    # Kinds that share a fix share its cause: a node that could not take part (FIX_JOIN), a run that
    # failed in the collective (FIX_NETWORK).
    fixes = {
        **TOO_FEW_NODES_FIXES,
        "probe-failed": FIX_JOIN,
        "cannot-take-part": FIX_JOIN,
        "no-torch": ("Install torch for the Python preflight runs on those nodes (--remote-python or python= in the "
                     "hosts file names it)."),
        "baseline": ("Make the baseline node reachable and able to run torch, or name another one with "
                     "scaling.multi_node.baseline_node."),
        "no-backend": 'Run with backend = "gloo", or give every node GPUs and a torch built with NCCL.',
        "too-few-usable": "Install torch on at least two nodes, for the Python preflight runs on each.",
        "launch": FIX_JOIN,
        "rendezvous": FIX_JOIN,
        "roll-call": FIX_JOIN,
        "stopped": FIX_JOIN,
        "collective": FIX_NETWORK,
        "timeout": FIX_NETWORK,
        "efficiency": " ".join((FIX_NETWORK, FIX_NCCL, FIX_STRAGGLER)),
        **ISOLATION_FIXES,
        "transient": TRANSIENT_FIX,
        "intermittent": INTERMITTENT_FIX,
    }
    Params = Params
    timeout_s = 300.0
    levels = {
        "quick": {"skip": "it trains on one node and then on all of them, minutes"},
        "thorough": {"timeout": 900, "steps": 30, "warmup": 5},
    }

    @classmethod
    def timeout_at(cls, nodes: int, params: Params) -> float:  # the pass grows with the cluster
        return timeout_with_pass(cls.timeout_s, pass_seconds(params.isolation_timeout_s, nodes), nodes,
                                 PASS_IN_TIMEOUT_S, params.isolation != "off")

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        isolation_method(params.isolation, ISOLATION_METHODS)  # an unknown method fails here, before anything runs
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

        # Time kept for the isolation pass, which only runs when the all-node run goes wrong.
        isolating = params.isolation != "off" and len(usable) >= 3
        pass_s = pass_seconds(params.isolation_timeout_s, len(usable))
        reserve = min(pass_s, 0.4 * ctx.time_left()) if isolating else 0.0
        budget = max(MIN_LAUNCH_S, (ctx.time_left() - SLACK_S - reserve) / 2)
        facts["one_node"] = self._launch(ctx, params, [baseline], plan, choice, model, threads, budget,
                                         params.rdzv_port or probes[baseline].get("free_port"))
        budget = max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S - reserve)
        host = usable[0]
        port = params.rdzv_port or pick_port(ctx, host, plan[host]["ip"])
        everyone = facts["all_nodes"] = self._launch(ctx, params, usable, plan, choice, model, threads, budget, port,
                                                     absent_node=fault("scaling.multi_node", "absent_node"))
        one = facts["one_node"]

        def isolate(run: dict[str, Any]) -> dict[str, Any] | None:
            e = efficiency(one["result"]["samples_per_s"], run["result"]["samples_per_s"], len(usable)) \
                if one.get("ok") and run.get("ok") else None
            reason = isolation_reason(run, e and e["efficiency"], params.min_efficiency, len(usable))
            return run_isolation(
                ctx, nodes=usable, plan=plan, nproc=choice["nproc_per_node"],
                worker_args=self._worker_args(params, choice, model, threads), reason=reason, run=run,
                floor=group_floor(params), budget_s=min(pass_s, ctx.time_left() - SLACK_S),
                timeouts_s=(params.rdzv_timeout_s, params.join_timeout_s, params.pg_timeout_s), port=params.rdzv_port,
                shared_machine=share_a_machine(probes, usable)) if reason else None

        if isolating:  # never GO or NO-GO on one all-node reading: the readings protocol of preflight.launch.recheck
            found, facts["rechecks"] = take_readings(
                everyone, isolate,
                lambda: self._launch(ctx, params, usable, plan, choice, model, threads,
                                     max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S),
                                     params.rdzv_port or pick_port(ctx, host, plan[host]["ip"])),
                lambda r: below_floor(one, r, params), lambda: ctx.time_left() - SLACK_S, MIN_LAUNCH_S,
                measured=lambda r: bool(one.get("ok") and r.get("ok")),
                deep_below=lambda r: far_below(one, r, params, MARGINAL),
                dropped_out=lambda r: far_below(one, r, params, DROP_OUT),
                far_below=lambda r: far_below(one, r, params, FAR_BELOW))
            if found is not None:
                facts["isolation"] = found
        return facts

    def _launch(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                choice: dict[str, Any], model: dict[str, Any], threads: int, budget_s: float, port: int | None,
                absent_node: str | None = None) -> dict[str, Any]:
        return launch_and_wait(
            ctx, nodes=nodes, plan=plan, nproc=choice["nproc_per_node"], module="ddp_scaling",
            worker_args=self._worker_args(params, choice, model, threads),
            budget_s=budget_s, timeouts_s=(params.rdzv_timeout_s, params.join_timeout_s, params.pg_timeout_s),
            port=port, absent_node=absent_node)

    @staticmethod
    def _worker_args(params: Params, choice: dict[str, Any], model: dict[str, Any], threads: int) -> Any:
        def worker_args(join_s: float, pg_s: float) -> list[str]:
            args = ["--backend", choice["backend"], "--device", choice["device"],
                    "--hidden", str(model["hidden"]), "--layers", str(model["layers"]), "--batch", str(model["batch"]),
                    "--steps", str(params.steps), "--warmup", str(params.warmup), "--threads", str(threads),
                    "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}"]
            return args + (["--workload", model["workload"]] if model.get("workload") else [])

        return worker_args

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        too_few = too_few_nodes(
            type(self), names, unreachable, expect, nothing="scaling across nodes could not be measured",
            single="there is nothing to scale across (scaling.multi_gpu covers the node's own devices)")
        if too_few:
            return too_few

        problems: list[Finding] = []
        details: list[str] = []
        skip = self._prerequisites(facts, expect, problems, details)
        if skip:
            return skip

        one, everyone = facts.get("one_node"), facts.get("all_nodes")
        measurements: list[Measurement] = []
        if one is None or everyone is None:
            if not problems:
                problems.append(self.finding("too-few-usable", Status.ERROR,
                                             "fewer than two nodes could run torch: nothing was measured"))
            return self._outcome(problems, details, measurements)
        n = len(everyone["nodes"])
        for label, run in ((f"one node ({one['nodes'][0]})", one), (f"all {n} nodes", everyone)):
            if not run.get("ok"):
                phase = run.get("phase") or "launch"
                status = Status.FAIL if phase == "collective" else Status.ERROR
                problems.append(self.finding(phase.replace(" ", "-"), status, f"{label}: {run.get('error')}"))
        if not (one.get("ok") and everyone.get("ok")):
            return self._outcome(problems + self._isolated(facts, problems, details), details, measurements)

        choice = facts.get("choice") or {}
        measurements += run_measurements(one, everyone, choice.get("nproc_per_node") or 0, choice.get("device"),
                                         params)
        shortfall = [self._efficiency(facts, params, details)]
        if "rechecks" in facts:  # never GO or NO-GO on one all-node reading (preflight.launch.recheck)
            readings = readings_of(facts["rechecks"], lambda r: met_floor(one, r, params),
                                   far=lambda r: far_below(one, r, params, FAR_BELOW),
                                   first=everyone, first_below=below_floor(one, everyone, params),
                                   out=lambda r: far_below(one, r, params, DROP_OUT))
            shortfall, more = judged(type(self), shortfall, SHORTFALL_KINDS, readings, recheck_text(one, facts["rechecks"]))
            details += more
        problems += shortfall
        return self._outcome(problems + self._isolated(facts, problems, details), details, measurements)

    def _prerequisites(self, facts: dict[str, Any], expect: Expect, problems: list[Finding],
                       details: list[str]) -> Outcome | None:
        """What keeps nodes from taking part, into `problems` and `details`; a SKIP when torch is on no
        node and nothing expects it."""
        names, unreachable = facts.get("nodes", []), facts.get("unreachable", [])

        def found(kind: str, level: Status, message: str) -> None:
            problems.append(self.finding(kind, level, message))

        probes = facts.get("probes", {})
        causes, without_torch = probe_problems(names, probes)
        for node, cause, text in causes:
            if cause == "probe-failed":
                found(cause, Status.ERROR, text)
            else:
                found("cannot-take-part", Status.ERROR, f"{node} cannot take part: {text}")
        if without_torch:
            everywhere = len(without_torch) == len(names)
            text = f"torch is not installed for the Python preflight runs on {names_text(without_torch)}"
            if everywhere and "torch" not in (expect.frameworks or []) and not self.expected_to_run(expect):
                return outcome_from_findings([self.finding(  # not expected here: nothing to fix
                    "no-torch", Status.SKIP, text + "; scaling is measured with torch DistributedDataParallel",
                    fix="")], passed="")
            found("no-torch", Status.FAIL, text)
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
        return None

    def _efficiency(self, facts: dict[str, Any], params: Params, details: list[str]) -> Finding:
        """The efficiency finding of two runs that worked, at its level; what explains it joins `details`."""
        one, everyone, choice = facts["one_node"], facts["all_nodes"], facts.get("choice") or {}
        n = len(everyone["nodes"])
        r_one, r_all = one["result"], everyone["result"]
        x_one, x_all = r_one["samples_per_s"], r_all["samples_per_s"]
        figures = efficiency(x_one, x_all, n)
        per_node_text = processes_text(choice.get("nproc_per_node") or 0, choice.get("device"))
        e = figures["efficiency"]
        status = Status.PASS if e >= params.min_efficiency else Status.WARN if e >= params.warn_efficiency else Status.FAIL
        summary = (f"{n} nodes deliver the throughput of {figures['effective_nodes']:.2f} (efficiency {e:.2f}; PASS at "
                   f"{params.min_efficiency:.2f}, WARN down to {params.warn_efficiency:.2f}): {x_all:,.0f} samples/s on "
                   f"{n} x {per_node_text} against {x_one:,.0f} on one node")
        details.insert(0, f"one node ({one['nodes'][0]}): {step_text(r_one['step_s'], r_one['compute_s'])}")
        details.insert(1, f"all {n} nodes: {step_text(r_all['step_s'], r_all['compute_s'])}")
        note = superlinear_note(e, False)
        if note:
            details.append(note + "; rerun on idle nodes before trusting either figure")
        if r_one["compute_s"] and r_all["compute_s"] > 1.2 * r_one["compute_s"]:
            details.append(f"compute alone (no_sync) grew from {r_one['compute_s'] * 1e3:.1f} ms to "
                           f"{r_all['compute_s'] * 1e3:.1f} ms: the loss is not only communication (a slower node, "
                           "shared CPUs, power or thermal limits)")
        model = facts.get("model", {})
        details.append("model: " + (model.get("workload") or f"reference MLP {model.get('layers')} x {model.get('hidden')}")
                       + f", {model.get('batch')} samples per device per step ({model.get('source')})")
        details += _per_node_lines(facts.get("per_node") or {}, one["nodes"][0])
        if choice.get("device") == "cpu":
            summary += " [CPU only: gloo among CPU processes]"
        return self.finding("efficiency", status, summary)

    def _isolated(self, facts: dict[str, Any], problems: list[Finding], details: list[str]) -> list[Finding]:
        """The isolation pass's attributions, at the level of what made the run bad; its rounds join `details`."""
        bad = [f.level for f in problems if f.level is not Status.PASS]
        out, more = isolation_findings(type(self), facts.get("isolation"), worst(bad) if bad else Status.PASS)
        details += more
        return out

    @staticmethod
    def _outcome(findings: list[Finding], details: list[str], measurements: list[Measurement]) -> Outcome:
        """The worst findings make the summary (a PASS states the efficiency); every finding that fired
        leads the details."""
        passed = "; ".join(f.message for f in findings if f.level is Status.PASS)
        return outcome_from_findings(findings, measurements, passed=passed, notes=details)


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

