"""collectives.cluster: all-reduce across the nodes is correct, and how fast it is.

The ranks run `preflight.workers.allreduce`, the program collectives.local runs on one node, here
started by torchrun on every node at once:

    env GLOO_SOCKET_IFNAME=<iface> LOGLEVEL=INFO ... <node python> -m torch.distributed.run
        --nnodes=N --nproc-per-node=K --rdzv-backend=c10d --rdzv-endpoint=<first node IP>:<port>
        --rdzv-id=<fresh id> --rdzv-conf=is_host=<1 on the first node, 0 elsewhere>,join_timeout=J,read_timeout=J
        --local-addr=<this node's IP> --max-restarts=0 --log-dir=<temporary directory>
        -m preflight.workers.allreduce --backend gloo|nccl ...

Why every address is explicit: by default torchrun publishes `socket.getfqdn()` as the address of
the node that serves the workers' store, c10d decides who hosts the rendezvous by comparing the
endpoint with the host name, and gloo binds to whatever the host name resolves to. On nodes whose
host name resolves to 127.0.0.1 or 127.0.1.1 (common /etc/hosts defaults, containers, network
namespaces), each node then advertises its own loopback and the job hangs at start. So before the
launch every node is probed with its own Python: its host name and what that resolves to, the
interface that carries its address (or, when none does, the route to a peer: `ip -j route get`),
its boot id, its torch, GPUs, NCCL and gloo. The probe's answers go into the launch as --local-addr, the
rendezvous endpoint, GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME; a loopback-only host name is explained.

NCCL on GPU nodes (K = GPUs per node), gloo among K CPU processes otherwise (K = gloo_ranks_per_node).
Figures follow nccl-tests: algbw = bytes / time, busbw = algbw x 2(n-1)/n over all n ranks. With
NCCL the ranks run with NCCL_DEBUG=INFO (subsystems INIT,NET), and which network NCCL used between
nodes (NET/IB or NET/Socket) is read from its lines and reported.

When the all-reduce fails, returns wrong sums, or misses a threshold that is set, and the failure is
not already pinned on a node (one that never joined), a pass within `pairwise_timeout_s` (unset: 20 s a
round, as many as a search at the cluster's size takes) names the node, link or boundary at fault:
`isolation="adaptive"` all-reduces over groups at once, split and confirmed (preflight.isolation); "pairs"
over every pair in round-robin rounds (N-1): a node bad in every pair, others fine, is at fault, else the bad pairs.

Processes: each torchrun is started with the node's transport's spawn(), under the guard
(preflight.workers.guard) that prints its PID, holds the transport's stdin, and sends torchrun's
tree SIGTERM (then SIGKILL) when that stdin closes, which is what happens when the check stops it,
when the check itself is killed, and when an ssh session drops. Workers die with their torchrun
(PR_SET_PDEATHSIG in the worker). What is still running after that is killed by its recorded PID
on the node, and the local end's tree here (preflight.transport.process).
"""

from __future__ import annotations

import time
from typing import Any

# Params (re-exported) lives with the check's other declarations: its fixes and hints.
from preflight_checks.collectives.cluster_params import CPU_SIZES, FIXES, GPU_SIZES, REMEDIATION, Params  # noqa: F401
from preflight_checks.collectives.cluster_params import PASS_IN_TIMEOUT_S
from preflight_checks.collectives.figures import allreduce_findings, far_below, human_bytes, no_floor, recheck_text
from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings, too_few_nodes
from preflight.engine.context import ClusterContext
from preflight.launch.torchrun import (
    MIN_LAUNCH_S, SLACK_S, launch, launch_and_wait, node_plan, pick_port, probe_usable, run_launch, worker_timeouts,
)
from preflight.launch.nodes import (
    choose_backend, loopback_findings, names_text, probe_problems, processes_text, share_a_machine,
    shared_machine_findings,
)
from preflight.launch.isolation_findings import isolation_findings
from preflight.launch.recheck import DROP_OUT, MARGINAL, judged, readings_of, take_readings
from preflight.launch.isolation_launch import (
    adaptive_pass, isolation_method, judged_group, node_times, pass_seconds, pinned, slow_ranks_reason, timeout_with_pass,
)
from preflight.launch.topology import topology_of
from preflight.launch.pairs import attribute, round_robin
from preflight.launch.nccl_log import nccl_by_node
from preflight.launch.torchrun_log import rank_text
from preflight.core.model import Finding, Measurement, Scope, Status, worst
from preflight.engine.faults import fault


def run_figures(result: dict[str, Any]) -> dict[str, Any]:
    """Latency (smallest size), busbw and algbw (largest), wrong elements, from a worker report. Pure."""
    sizes = sorted(result.get("sizes", []), key=lambda s: s["bytes"])
    wrong = sum(sum(s.get("known_sum_wrong_by_rank", [])) for s in sizes)
    wrong += sum(result.get("random_check", {}).get("wrong_by_rank", []))
    if not sizes:
        return {"wrong": wrong}
    return {
        "latency_us": sizes[0]["time_s"] * 1e6, "busbw_gbps": sizes[-1]["busbw_gbps"],
        "algbw_gbps": sizes[-1]["algbw_gbps"], "largest_bytes": sizes[-1]["bytes"],
        "smallest_bytes": sizes[0]["bytes"], "wrong": wrong,
    }


def shortfalls(figures: dict[str, Any], params: Params) -> list[str]:
    """Why a measured run is not good enough (wrong sums, thresholds). Pure."""
    problems = []
    if figures.get("wrong"):
        problems.append(f"{figures['wrong']} wrong elements")
    if params.min_busbw_gbps is not None and figures.get("busbw_gbps") is not None \
            and figures["busbw_gbps"] < params.min_busbw_gbps:
        problems.append(f"busbw {figures['busbw_gbps']:.2f} GB/s below {params.min_busbw_gbps:g}")
    if params.max_latency_us is not None and figures.get("latency_us") is not None \
            and figures["latency_us"] > params.max_latency_us:
        problems.append(f"latency {figures['latency_us']:.0f} us above {params.max_latency_us:g}")
    return problems


def pairwise_reason(run: dict[str, Any], params: Params, node_count: int, shared_machine: bool = False) -> str | None:
    """Why the pairwise pass should run after the main launch, or None. Pure. A run that met its floors
    starts the adaptive pass when one node's ranks were far slower than the others' (a straggler to
    confirm), unless nodes share a machine (a rank's time is then not its node's)."""
    if node_count < 3:
        return None  # with two nodes the only pair is the run itself
    if not run.get("ok"):
        if pinned(run):
            return None  # already pinned on a node
        return "the all-reduce across all nodes failed"
    problems = shortfalls(run_figures(run["result"]), params)
    if problems:
        return "; ".join(problems)
    return None if shared_machine or params.isolation != "adaptive" else slow_ranks_reason(run_node_times(run))


# -- the check -----------------------------------------------------------------------------------


class CollectivesCluster(Check):
    id = "collectives.cluster"
    title = "All-reduce across all nodes (torchrun, NCCL or gloo)"
    scope = Scope.CLUSTER
    tags = ("cluster", "collectives", "torch", "nccl", "gloo", "network")
    why = (
        "A multi-node job all-reduces gradients across every node on every step. If one node cannot "
        "join (a host name that resolves to 127.0.0.1, a firewall on the rendezvous or gloo ports, a "
        "wrong interface), the whole job hangs at start; if one node or link is slow, every step runs at "
        "its pace; wrong sums silently corrupt the model."
    )
    remediation = REMEDIATION
    fixes = FIXES
    Params = Params
    timeout_s = 300.0
    levels = {"quick": {"skip": "it starts torchrun on every node and sweeps all-reduce sizes, a minute or more"},
              "thorough": {"timeout": 900, "iters": 50, "warmup": 10, "pairwise_iters": 10}}

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        isolation_method(params.isolation)  # an unknown method fails here, before anything runs
        facts = probe_usable(ctx)
        names = facts["nodes"]
        if len(names) < 2:
            return facts
        facts["hostnames"] = {n: ctx.node_facts.get(n, {}).get("node.environment", {}).get("hostname_addresses")
                              for n in names}
        probes, usable = facts["probes"], facts["usable"]
        if len(usable) < 2:
            return facts

        choice = choose_backend({n: probes[n] for n in usable}, backend=params.backend,
                                gpus_per_node=params.gpus_per_node, cpu_ranks_per_node=params.gloo_ranks_per_node)
        facts["choice"] = choice
        if choice.get("error"):
            return facts
        choice["sizes"] = params.sizes_bytes or (GPU_SIZES if choice["device"] == "cuda" else CPU_SIZES)
        plan = node_plan(ctx, probes, usable, socket_ifname=params.socket_ifname, extra_env=params.env, threads=1)
        facts["plan"] = plan

        # Time kept for the pairwise pass, which only runs when the all-node run goes wrong.
        pass_s = pass_seconds(params.pairwise_timeout_s, len(usable))
        reserve = min(pass_s, 0.4 * ctx.time_left()) if params.pairwise and len(usable) >= 3 else 0.0
        budget = max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S - reserve)
        port = params.rdzv_port or probes[usable[0]].get("free_port")
        facts["run"] = self._allreduce(ctx, params, usable, plan, choice, choice["sizes"], params.iters,
                                       params.warmup, budget, port,
                                       absent_node=fault("collectives.cluster", "absent_node"),
                                       stall_s=fault("collectives.cluster", "stall_first_s", 0.0))
        if choice["backend"] == "nccl":
            facts["nccl_network"], facts["nccl_unrecognised"] = nccl_by_node(facts["run"].get("agents") or {})
        shared = share_a_machine(probes, usable)
        reason = pairwise_reason(facts["run"], params, len(usable), shared)
        if reason and params.pairwise and params.isolation == "pairs":
            facts["pairwise"] = self._pairwise(ctx, params, usable, plan, choice, reason, min(pass_s, ctx.time_left() - SLACK_S))
        elif params.pairwise and len(usable) >= 3:  # never GO or NO-GO on one reading (preflight.launch.recheck)
            found, facts["rechecks"] = take_readings(facts["run"], lambda run: self._isolation(
                ctx, params, usable, plan, choice, pairwise_reason(run, params, len(usable), shared),
                min(pass_s, ctx.time_left() - SLACK_S), run, shared_machine=shared), lambda: self._allreduce(
                ctx, params, usable, plan, choice, choice["sizes"], params.iters, params.warmup, ctx.time_left() - SLACK_S,
                params.rdzv_port or pick_port(ctx, usable[0], plan[usable[0]]["ip"])),
                lambda r: below_floor(r, params), lambda: ctx.time_left() - SLACK_S, MIN_LAUNCH_S,
                measured=lambda r: bool(r.get("ok")), deep_below=lambda r: far_below(r["result"], params, MARGINAL),
                dropped_out=lambda r: far_below(r["result"], params, DROP_OUT),
                far_below=lambda r: far_below(r["result"], params))
            if found is not None:
                facts["isolation"] = found
        return facts

    @classmethod
    def timeout_at(cls, nodes: int, params: Params) -> float:  # the pass grows with the cluster
        return timeout_with_pass(cls.timeout_s, pass_seconds(params.pairwise_timeout_s, nodes), nodes, PASS_IN_TIMEOUT_S,
                                 params.pairwise)

    def _allreduce(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                   choice: dict[str, Any], sizes: list[int], iters: int, warmup: int, budget_s: float,
                   port: int | None, absent_node: str | None = None, stall_s: float = 0.0) -> dict[str, Any]:
        return launch_and_wait(
            ctx, nodes=nodes, plan=plan, nproc=choice["nproc_per_node"], module="allreduce",
            worker_args=lambda join_s, pg_s: self._worker_args(params, choice, sizes, iters, warmup, join_s, pg_s)
            + (["--stall-s", f"{stall_s:g}"] if stall_s else []),
            budget_s=budget_s, timeouts_s=(params.rdzv_timeout_s, params.join_timeout_s, params.pg_timeout_s),
            port=port, absent_node=absent_node)

    @staticmethod
    def _worker_args(params: Params, choice: dict[str, Any], sizes: list[int], iters: int, warmup: int,
                     join_s: float, pg_s: float) -> list[str]:
        args = ["--backend", choice["backend"], "--device", choice["device"],
                "--sizes", ",".join(str(s) for s in sizes), "--iters", str(iters), "--warmup", str(warmup),
                "--check-elements", str(params.check_elements),
                "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}"]
        # Tests only (preflight.engine.faults): this global rank never joins the workers' roll call.
        if fault("collectives.cluster", "absent_rank") is not None:
            args += ["--absent-rank", str(fault("collectives.cluster", "absent_rank"))]
        return args

    def _pairwise(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                  choice: dict[str, Any], reason: str, budget_s: float) -> dict[str, Any]:
        rounds = round_robin(nodes)
        sizes = sorted({min(choice["sizes"]), max(choice["sizes"])})
        out: dict[str, Any] = {"reason": reason, "rounds": [[list(p) for p in r] for r in rounds], "pairs": [],
                               "not_run": [], "budget_s": round(budget_s, 1)}
        began = time.monotonic()
        deadline = began + budget_s
        for index, pairs in enumerate(rounds):
            left = deadline - time.monotonic()
            share = left / (len(rounds) - index)
            if share < MIN_LAUNCH_S:
                out["not_run"] += [list(p) for r in rounds[index:] for p in r]
                break
            rdzv_s, join_s, pg_s = worker_timeouts(share, params.rdzv_timeout_s, params.join_timeout_s,
                                                   params.pg_timeout_s)
            args = self._worker_args(params, choice, sizes, params.pairwise_iters, 2, join_s, pg_s)
            batches = []
            for a, b in pairs:
                port = params.rdzv_port or pick_port(ctx, a, plan[a]["ip"])
                if port is None:
                    out["pairs"].append({"nodes": [a, b], "not_run": True,
                                         "error": f"no free port for the rendezvous on {a}"})
                    continue
                specs, facts = launch(ctx, nodes=[a, b], plan=plan, nproc=choice["nproc_per_node"],
                                      module="allreduce", worker_args=args, budget_s=share, rdzv_timeout_s=rdzv_s,
                                      port=port, group=f"{a}+{b}")
                batches.append((specs, facts))
            for result in run_launch(ctx, batches, share) if batches else []:
                out["pairs"].append(pair_facts(result))
            out["rounds_run"] = index + 1
        out["wall_s"] = round(time.monotonic() - began, 1)
        return out

    def _isolation(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                   choice: dict[str, Any], reason: str | None, budget_s: float, run: dict[str, Any],
                   shared_machine: bool = False) -> dict[str, Any] | None:
        """The adaptive pass: groups of nodes at once (preflight.isolation), each judged as a pair is; none
        without a reason."""
        sizes = sorted({min(choice["sizes"]), max(choice["sizes"])})
        return None if not reason else adaptive_pass(
            ctx, nodes=nodes, plan=plan, nproc=choice["nproc_per_node"], module="allreduce", reason=reason, run=run,
            worker_args=lambda j, p: self._worker_args(params, choice, sizes, params.pairwise_iters, 2, j, p),
            judge=lambda result: judged_group(judge_pair(pair_facts(result), params)), budget_s=budget_s,
            timeouts_s=(params.rdzv_timeout_s, params.join_timeout_s, params.pg_timeout_s), port=params.rdzv_port,
            topology=topology_of(ctx), thresholds={"min_busbw_gbps": params.min_busbw_gbps,
                                                   "max_latency_us": params.max_latency_us},
            screen_times_s=run_node_times(run) if run.get("ok") else None, shared_machine=shared_machine)

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        too_few = too_few_nodes(
            type(self), names, unreachable, expect, nothing="no all-reduce across nodes was possible",
            single="there is nothing to all-reduce across nodes (collectives.local covers the node's own devices)")
        if too_few:
            return too_few

        findings: list[Finding] = []
        details: list[str] = []
        measurements: list[Measurement] = []
        skip = self._prerequisites(facts, expect, findings, details)
        if skip:
            return skip
        run = facts.get("run")
        label = self._judge_run(facts, params, findings, details, measurements)
        self._nccl_network(facts, findings, details)

        pairwise = facts.get("pairwise")
        problems = [f.level for f in findings if f.level is not Status.PASS and not f.id.endswith(".no-floor")]
        level = worst(problems) if problems else Status.PASS
        for kind, text, pair_measurements, pair_details in [judge_pairwise(pairwise, params)] if pairwise else []:
            measurements += pair_measurements
            details += pair_details
            findings.append(self.finding(kind, level, text))
            if not problems:
                details.append(text)
        isolated, isolation_details = ([], []) if pairwise else isolation_findings(type(self), facts.get("isolation"),
                                                                                   level)
        findings += isolated
        details += isolation_details + ([f.message for f in isolated] if not problems else [])

        passed = ""
        if run and run.get("ok"):
            figures = run_figures(run["result"])
            passed = (f"{label}: sums exact, latency {figures['latency_us']:.0f} us at "
                      f"{human_bytes(figures['smallest_bytes'])}, busbw {figures['busbw_gbps']:.2f} GB/s at "
                      f"{human_bytes(figures['largest_bytes'])}")
            if unreachable:
                passed += f" ({names_text(unreachable)} unreachable, not measured)"
        return outcome_from_findings(findings, measurements, passed=passed, notes=details)


    def _prerequisites(self, facts: dict[str, Any], expect: Expect, findings: list[Finding],
                       details: list[str]) -> Outcome | None:
        """What keeps nodes from taking part, into `findings` and `details`; a SKIP when torch is on no
        node and nothing expects it."""
        names, unreachable = facts.get("nodes", []), facts.get("unreachable", [])

        def found(kind: str, level: Status, message: str) -> None:
            findings.append(self.finding(kind, level, message))

        probes = facts.get("probes", {})
        problems, without_torch = probe_problems(names, probes)
        for _, cause, text in problems:
            found(cause, Status.FAIL if cause == "no-distributed" else Status.ERROR, text)
        if without_torch:
            everywhere = len(without_torch) == len(names)
            text = (f"torch is not installed for the Python preflight runs on {names_text(without_torch)}"
                    + ("" if everywhere else ": those nodes cannot take part in a torch job"))
            if everywhere and "torch" not in (expect.frameworks or []) and not self.expected_to_run(expect):
                return outcome_from_findings([self.finding(  # not expected here: nothing to fix
                    "no-torch", Status.SKIP, text + "; collectives are measured through torch.distributed", fix="")],
                    passed="")
            found("no-torch", Status.FAIL, text)
        if unreachable:
            details.append(f"not measured, unreachable: {names_text(unreachable)}; all-reduce among the other nodes only")
        details += loopback_findings(probes, {n: a for n, a in (facts.get("hostnames") or {}).items() if a},
                                     facts.get("ips", {}))
        details += shared_machine_findings({n: p for n, p in probes.items() if "error" not in p})
        choice = facts.get("choice") or {}
        details += choice.get("notes", [])
        if choice.get("error"):
            found("no-backend", Status.FAIL, choice["error"])
        return None

    def _judge_run(self, facts: dict[str, Any], params: Params, findings: list[Finding], details: list[str],
                   measurements: list[Measurement]) -> str:
        """The all-node run's findings (judged by every all-node reading) and measurements; its label."""
        run, choice = facts.get("run"), facts.get("choice") or {}
        if not run:
            if len(facts.get("usable", [])) < 2 and not findings:
                findings.append(self.finding("too-few-usable", Status.ERROR,
                                             "fewer than two nodes could run torch: nothing was measured"))
            return ""
        label = (f"{choice.get('backend')} across {len(run['nodes'])} nodes x "
                 f"{processes_text(choice.get('nproc_per_node') or 0, choice.get('device'))}")
        details.append(f"rendezvous on {run.get('host')} at {run.get('rdzv_endpoint')}; " + ", ".join(
            f"{n}: --local-addr={p.get('ip')} GLOO_SOCKET_IFNAME={p.get('interface')}"
            for n, p in (facts.get("plan") or {}).items()))
        if not run.get("ok"):
            phase = run.get("phase") or "launch"
            status = Status.FAIL if phase == "collective" else Status.ERROR
            findings.append(self.finding(phase.replace(" ", "-"), status, f"{label}: {run.get('error')}"))
            return label
        run_findings, run_measurements = judge_main(run, params, label, choice.get("backend"), type(self))
        if "rechecks" in facts:  # never GO or NO-GO on one all-node reading (preflight.launch.recheck)
            readings = readings_of(facts["rechecks"], lambda r: met_floor(r, params),
                                   far=lambda r: far_below(r["result"] if r.get("ok") else {}, params),
                                   first=run, first_below=below_floor(run, params),
                                   out=lambda r: far_below(r["result"] if r.get("ok") else {}, params, DROP_OUT))
            run_findings, more = judged(type(self), run_findings, SHORTFALL_KINDS, readings, recheck_text(facts["rechecks"]))
            details += more
        findings += run_findings
        measurements += run_measurements
        return label

    def _nccl_network(self, facts: dict[str, Any], findings: list[Finding], details: list[str]) -> None:
        """Which network NCCL ran over between nodes: a detail, and a WARN for sockets or an unreadable one."""
        by_network: dict[str, list[str]] = {}
        for node, network in (facts.get("nccl_network") or {}).items():
            by_network.setdefault(network or "unknown (NCCL printed no network)", []).append(node)
        if not by_network:
            return
        details.append("NCCL between nodes ran over " + "; ".join(
            f"{network} on {names_text(nodes)}" for network, nodes in by_network.items()))
        for node, lines in sorted((facts.get("nccl_unrecognised") or {}).items()):  # shown, never a bare "unknown"
            findings.append(self.finding("nccl-network-unrecognised", Status.WARN,
                                         f"{node}: NCCL's network not readable: {lines[0]!r}"))
        on_sockets = by_network.get("Socket", [])
        if on_sockets:
            findings.append(self.finding(
                "nccl-over-sockets", Status.WARN,
                f"NCCL ran over TCP sockets (NET/Socket), not InfiniBand or RoCE, on {names_text(on_sockets)}: "
                "if these nodes have an RDMA fabric, NCCL is not using it"))

def judge_main(run: dict[str, Any], params: Params, label: str, backend: str | None,
               check: type[Check]) -> tuple[list[Finding], list[Measurement]]:
    """Findings and measurements of a successful all-node run, ranks named with their nodes. Pure."""
    owners = {int(r): n for r, n in (run.get("rank_nodes") or {}).items()}
    found, figures = allreduce_findings(run["result"], label, check, min_busbw_gbps=params.min_busbw_gbps,
                                        max_latency_us=params.max_latency_us, rank_name=lambda r: rank_text(r, owners),
                                        series=backend)
    return found + no_floor(run["result"], label, check.id, params.min_busbw_gbps), figures


SHORTFALL_KINDS = ("slow-busbw", "slow-latency")  # what one all-node reading below its floors FAILs on


def below_floor(run: dict[str, Any], params: Params) -> bool:
    """The run was measured, its sums are exact, and it missed a floor (bus bandwidth, latency). Pure."""
    figures = run_figures(run["result"]) if run.get("ok") else {}
    return bool(figures) and not figures.get("wrong") and bool(shortfalls(figures, params))


def met_floor(run: dict[str, Any], params: Params) -> bool | None:
    """A recheck: True when it met every floor, False when not, None when it was not measured. Pure."""
    return (not shortfalls(run_figures(run["result"]), params)) if run.get("ok") else None


PAIR_FIGURES = ("latency_us", "busbw_gbps", "largest_bytes", "smallest_bytes", "wrong")


def pair_facts(launch_result: dict[str, Any]) -> dict[str, Any]:
    """One pair's two-node run as facts: how it ended and its raw figures, nothing judged. Pure."""
    pair: dict[str, Any] = {"nodes": launch_result["nodes"], "ok": bool(launch_result.get("ok"))}
    if not pair["ok"]:
        pair.update(error=launch_result.get("error"), phase=launch_result.get("phase"))
        return pair
    figures = run_figures(launch_result["result"])
    pair.update({k: figures.get(k) for k in PAIR_FIGURES})
    pair["busbw_samples_gbps"] = sorted(launch_result["result"]["sizes"], key=lambda s: s["bytes"])[-1]["busbw_samples_gbps"]
    times = run_node_times(launch_result)
    if times:
        pair["node_times_s"] = times
    return pair


def run_node_times(launch_result: dict[str, Any]) -> dict[str, float] | None:
    """node -> its slowest rank's median time per all-reduce at the largest size, from the worker's
    per-rank times (`rank_time_s`); None from a worker that did not report them. Pure."""
    sizes = sorted((launch_result.get("result") or {}).get("sizes", []), key=lambda s: s["bytes"])
    return node_times(sizes[-1].get("rank_time_s"), launch_result.get("rank_nodes")) if sizes else None


def judge_pair(pair: dict[str, Any], params: Params) -> dict[str, Any]:
    """One pair as good / bad / error (not run) under `params`, from its recorded figures. Pure."""
    judged = {k: v for k, v in pair.items() if k not in ("state", "problems")}
    if pair.get("not_run") or pair.get("state") == "error":
        return {**judged, "state": "error"}
    if pair.get("busbw_gbps") is None and pair.get("latency_us") is None:
        return {**judged, "state": "bad"}  # the pair's run failed: its error says how
    problems = shortfalls(pair, params)
    return {**judged, "state": "bad" if problems else "good", "problems": problems}


def judge_pairwise(pairwise: dict[str, Any], params: Params) -> tuple[str, str, list[Measurement], list[str]]:
    """What the pairwise pass found under `params`: the finding's kind and sentence, the pairs'
    measurements, and details. Pure: pairs are judged here, from their figures."""
    measurements = []
    details = []
    pairs = [judge_pair(p, params) for p in pairwise.get("pairs", [])]
    for pair in pairs:
        a, b = pair["nodes"]
        label = f"{a} <-> {b}"
        if pair.get("busbw_gbps") is not None:
            measurements.append(measure(f"pair {label}: busbw at {human_bytes(pair['largest_bytes'])}",
                                        round(pair["busbw_gbps"], 3), "GB/s", at_least=params.min_busbw_gbps,
                                        param="min_busbw_gbps", samples=[round(v, 3) for v in pair.get("busbw_samples_gbps", [])], node=label))
            details.append(f"pair {label}: {'good' if pair['state'] == 'good' else '; '.join(pair.get('problems') or ['bad'])}"
                           f" (busbw {pair['busbw_gbps']:.2f} GB/s, latency {pair['latency_us']:.0f} us)")
        else:
            details.append(f"pair {label}: {pair.get('error') or 'failed'}")
    if pairwise.get("not_run"):
        details.append(f"pairwise pass stopped at its time limit ({pairwise.get('budget_s')}s): "
                       f"{len(pairwise['not_run'])} pairs not run")
    found = attribute(pairs)
    prefix = f"pairwise pass ({pairwise.get('reason')}): "
    if found["nodes"]:
        kind = "pairwise-node"
        text = prefix + f"{names_text(found['nodes'])} {'is' if len(found['nodes']) == 1 else 'are'} at fault: every pair with " \
            + ("it" if len(found["nodes"]) == 1 else "them") + " is bad while other pairs are good"
        if found["pairs"]:
            text += "; also the pairs " + ", ".join(f"{a} <-> {b}" for a, b in found["pairs"])
    elif found["all_bad"]:
        kind = "pairwise-all-bad"
        text = prefix + "every pair is bad: the problem is common to all nodes (the fabric, a shared setting)"
    elif found["pairs"]:
        kind = "pairwise-pair"
        listed = ", ".join(f"{a} <-> {b}" for a, b in found["pairs"])
        text = prefix + (f"the pair {listed} is" if len(found["pairs"]) == 1 else f"the pairs {listed} are") + \
            " at fault; every node is good with some other node"
    elif found["measured"]:
        kind = "pairwise-all-good"
        text = prefix + (f"all {found['measured']} pairs are good on their own: the problem appears only with all "
                         "nodes together (congestion, an oversubscribed uplink, or the size of the job)")
    else:
        kind = "pairwise-none"
        text = prefix + "no pair could be measured"
    return kind, text, measurements, details
