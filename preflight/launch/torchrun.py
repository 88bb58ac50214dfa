"""Run one worker module on several nodes at once with torchrun.

Used by the cross-node checks (collectives.cluster, scaling.multi_node). Each node is probed with
its own Python first (preflight.workers.probe: host name and what it resolves to, the interface that
carries its address, boot id, torch, GPUs, NCCL, gloo, a free port); torchrun is then started on
every node with every address explicit (c10d rendezvous endpoint, --local-addr, is_host,
GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME), because host names that resolve to loopback make the
defaults advertise addresses no other node can reach.

Each torchrun is started through the node's transport with `Transport.spawn`, under the guard
(preflight.workers.guard) that gives it a private log directory, and stops it with everything it
started when its stdin closes (the check stopped it, the check died, the ssh session dropped).
How the launch went is read from what torchrun printed by preflight.launch.torchrun_log.
"""

from __future__ import annotations

import shlex
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from preflight.engine.context import ClusterContext
from preflight.launch.nodes import coordinator_ip, endpoint
from preflight.transport.process import RemoteProcess
from preflight.core.jsonlines import last_json
from preflight.launch.torchrun_log import interpret_run, summarize_agent

SLACK_S = 5.0  # kept back from the check's deadline for reporting
PROBE_TIMEOUT_S = 60.0  # the probe imports torch, which takes seconds on a busy node
GRACE_S = 8.0  # after one node's torchrun fails, the others get this long to end by themselves
STOP_WAIT_S = 7.0  # after stdin closes, the guard's TERM then KILL (5 s) has this long to work
MIN_LAUNCH_S = 20.0
LOG_DIR_PLACEHOLDER = "{log_dir}"  # the guard replaces it with a fresh directory it removes
PROBE_MODULE = "preflight.workers.probe"


def torchrun_argv(python: str, *, nnodes: int, nproc: int, rdzv_endpoint: str, run_id: str, is_host: bool,
                  local_addr: str, rdzv_timeout_s: float, env: dict[str, str], module: str,
                  worker_args: list[str], max_restarts: int = 0) -> list[str]:
    """The command run on one node (under the guard, which fills in the log directory). Pure."""
    timeout = max(1, int(round(rdzv_timeout_s)))
    return [
        "env", *[f"{k}={v}" for k, v in sorted(env.items())],
        python, "-m", "torch.distributed.run",
        f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host={1 if is_host else 0},join_timeout={timeout},read_timeout={timeout}",
        f"--local-addr={local_addr}", f"--max-restarts={max_restarts}", f"--log-dir={LOG_DIR_PLACEHOLDER}",
        "-m", f"preflight.workers.{module}", *worker_args,
    ]


def absent_argv(python: str) -> list[str]:
    """Fault injection: a process that stays alive and never joins the rendezvous."""
    return [python, "-c", "import time\nwhile True: time.sleep(3600)", "never-joins"]


@dataclass
class AgentSpec:
    node: str
    argv: list[str]  # the command on the node; run under the guard
    group: str  # agents of one group end together: one failing gives the others GRACE_S


class NodeAgent:
    """One torchrun on one node, started through the node's transport under the guard."""

    def __init__(self, ctx: ClusterContext, spec: AgentSpec) -> None:
        self.ctx, self.spec = ctx, spec
        self.transport = ctx.transport(spec.node)
        self.process: RemoteProcess = self.transport.spawn(spec.argv)
        self.proc = self.process.proc  # the local end (this machine's ssh client, or the guard)

    @property
    def stdout(self) -> list[str]:
        """What the node printed, the guard's "@@pid" and "@@exit" lines included."""
        return self.process.raw_lines

    @property
    def killed(self) -> bool:
        return self.process.stopped

    @property
    def stop_requested_at(self) -> float | None:
        return self.process.stop_requested_at

    def running(self) -> bool:
        return self.process.running()

    def failed(self) -> bool:
        return not self.running() and self.process.returncode != 0

    def request_stop(self) -> None:
        """Close the guard's stdin: it sends torchrun's tree SIGTERM, then SIGKILL."""
        self.process.request_stop()

    def force_stop(self) -> None:
        """Kill by PID on the node what the guard did not end, then the local end."""
        self.process.force_stop()

    def close_stdin(self) -> None:
        self.process.close_stdin()

    def facts(self) -> dict[str, Any]:
        self.process.join()
        return summarize_agent(list(self.process.raw_lines), self.process.stderr, self.process.returncode,
                               self.killed, self.process.duration_s,
                               transport_failure=self.process.transport_failed())

    def record(self) -> None:
        self.ctx.record(f"[on {self.spec.node}] " + shlex.join(self.spec.argv), self.process.returncode,
                        "\n".join(self.process.raw_lines + self.process.stderr_lines), self.process.duration_s)


def run_agents(ctx: ClusterContext, specs: list[AgentSpec], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Start every agent at once and wait for all, at most `timeout_s`; nothing outlives this call.

    Returns facts per node (summarize_agent). When one agent of a group fails, the others of the
    group get GRACE_S to end by themselves (they see the broken group) before they are stopped.
    """
    agents: list[NodeAgent] = []
    start = time.monotonic()
    deadline = start + timeout_s
    failures: dict[str, float] = {}
    start_errors: dict[str, str] = {}
    try:
        for spec in specs:
            try:
                agents.append(NodeAgent(ctx, spec))
            except OSError as exc:
                start_errors[spec.node] = f"could not start it here: {exc}"
                failures.setdefault(spec.group, time.monotonic())
        while True:
            now = time.monotonic()
            live = [a for a in agents if a.running()]
            for agent in agents:
                if agent.failed() and not agent.killed:
                    failures.setdefault(agent.spec.group, now)
            if not live:
                break
            for agent in live:
                failed_at = failures.get(agent.spec.group)
                if now >= deadline or (failed_at is not None and now >= failed_at + GRACE_S):
                    agent.request_stop()
                if agent.stop_requested_at is not None and now >= agent.stop_requested_at + STOP_WAIT_S:
                    agent.force_stop()
            time.sleep(0.05)
    finally:
        for agent in agents:
            if agent.running():
                agent.request_stop()
        stop_by = time.monotonic() + STOP_WAIT_S
        while any(a.running() for a in agents) and time.monotonic() < stop_by:
            time.sleep(0.05)
        for agent in agents:
            agent.force_stop()
            agent.close_stdin()
    results: dict[str, dict[str, Any]] = {}
    for agent in agents:
        agent.record()
        results[agent.spec.node] = agent.facts()
    for node, error in start_errors.items():
        results[node] = summarize_agent([], error, 127, False, 0.0)
    return results


def probe_nodes(ctx: ClusterContext, names: list[str], ips: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run the probe on every node at once with the node's own Python."""
    addresses = {spec["name"]: spec.get("address") or spec["name"] for spec in ctx.nodes}

    def probe(node: str) -> dict[str, Any]:
        peers = [ips[n] for n in names if n != node]
        return run_probe(ctx, node, ["--own-ip", ips[node], "--own-address", addresses[node], "--peers", *peers,
                                     "--torch"], timeout=min(PROBE_TIMEOUT_S, max(5.0, ctx.time_left() - SLACK_S)))

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(names)))) as pool:
        return dict(zip(names, pool.map(probe, names)))


def run_probe(ctx: ClusterContext, node: str, args: list[str], timeout: float) -> dict[str, Any]:
    """`python -m preflight.workers.probe args` on a node: its facts, or {"error": why not}."""
    transport = ctx.transport(node)
    try:
        proc = ctx.run_on(node, [transport.python, "-m", PROBE_MODULE, *args], timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - CannotMeasure, OSError: said about this node
        return {"error": str(exc)}
    if proc.returncode != 0:
        text = (proc.stderr.strip() or proc.stdout.strip())[-300:] or "no output"
        if transport.is_transport_failure(proc.returncode):
            return {"error": transport.unreachable(proc.returncode, text)}
        return {"error": f"{transport.python} on {node} could not run the probe (exit {proc.returncode}): {text}"}
    facts = last_json(proc.stdout)
    if facts is None:
        return {"error": f"the probe on {node} printed no result: {proc.stdout[-300:]}"}
    return facts


def pick_port(ctx: ClusterContext, node: str, ip: str) -> int | None:
    """A port free on the node's address a moment ago, for a rendezvous it hosts; None when none."""
    return run_probe(ctx, node, ["--free-port", ip], timeout=30).get("free_port")


def node_plan(ctx: ClusterContext, probes: dict[str, dict[str, Any]], nodes: list[str], *,
              socket_ifname: str | None, extra_env: dict[str, str], threads: int) -> dict[str, Any]:
    """Per node: python, local address, interface and environment for torchrun."""
    plan = {}
    for node in nodes:
        probe = probes[node]
        env = {"LOGLEVEL": "INFO", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "PYTHONUNBUFFERED": "1"}
        iface = socket_ifname or probe.get("interface")
        if iface:
            # Both backends get the interface the other nodes reach this one through; left to itself
            # NCCL picks one by its own rules, which may be one the peers cannot reach.
            env["GLOO_SOCKET_IFNAME"] = iface
            env["NCCL_SOCKET_IFNAME"] = iface
        # NCCL says which network it uses (NET/IB or NET/Socket) at INFO, read back by torchrun_log.
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
        env.update(extra_env)
        plan[node] = {"python": ctx.transport(node).python, "ip": probe.get("ip"), "interface": iface, "env": env}
    return plan


def launch(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
           worker_args: list[str], budget_s: float, rdzv_timeout_s: float, port: int | None,
           group: str = "all", absent_node: str | None = None,
           max_restarts: int = 0) -> tuple[list[AgentSpec], dict[str, Any]]:
    """Agent specs for one torchrun launch over `nodes`, hosted by the first; and the launch's facts.
    `max_restarts`: how often torchrun restarts the group after a failure (elastic restarts)."""
    host = nodes[0]
    run_id = f"preflight-{uuid.uuid4().hex[:12]}"
    rdzv = endpoint(plan[host]["ip"], port) if port else None
    specs = []
    for node in nodes:
        entry = plan[node]
        if node == absent_node:
            argv = absent_argv(entry["python"])
        else:
            argv = torchrun_argv(entry["python"], nnodes=len(nodes), nproc=nproc, rdzv_endpoint=rdzv or "",
                                 run_id=run_id, is_host=node == host, local_addr=entry["ip"],
                                 rdzv_timeout_s=rdzv_timeout_s, env=entry["env"], module=module,
                                 worker_args=worker_args, max_restarts=max_restarts)
        specs.append(AgentSpec(node=node, argv=argv, group=group))
    facts = {"nodes": list(nodes), "host": host, "rdzv_endpoint": rdzv, "run_id": run_id, "nproc_per_node": nproc,
             "world_size": nproc * len(nodes), "timeouts_s": {"launch": round(budget_s, 1),
                                                                "rendezvous": round(rdzv_timeout_s, 1)}}
    return specs, facts


def probe_usable(ctx: ClusterContext) -> dict[str, Any]:
    """Probe every reachable node and say which can run a torchrun launch: the facts both checks start from.

    Keys: nodes, unreachable, probes; with two nodes or more also addresses, ips and usable (nodes
    whose probe found torch with torch.distributed and a routable address).
    """
    names = ctx.node_names
    facts: dict[str, Any] = {"nodes": names, "unreachable": list(ctx.unreachable), "probes": {}}
    if len(names) < 2:
        return facts
    addresses = {spec["name"]: spec.get("address") or spec["name"] for spec in ctx.nodes}
    ips = {n: coordinator_ip(addresses[n]) for n in names}
    facts["addresses"] = addresses
    facts["ips"] = ips
    probes = probe_nodes(ctx, names, ips)
    facts["probes"] = probes
    facts["usable"] = [n for n in names if probes[n].get("torch") and probes[n].get("distributed")
                       and probes[n].get("ip") and "error" not in probes[n]]
    return facts


def launch_and_wait(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
                    worker_args: Callable[[float, float], list[str]], budget_s: float,
                    timeouts_s: tuple[float, float, float], port: int | None,
                    absent_node: str | None = None) -> dict[str, Any]:
    """One torchrun launch over `nodes`, run to its end: the launch's facts with its outcome.

    `timeouts_s` are the rendezvous, roll-call and process-group timeouts asked for; they are cut to
    fit `budget_s`, and `worker_args(join_s, pg_s)` builds the worker's arguments from the cut ones.
    """
    if port is None:
        return {"nodes": nodes, "host": nodes[0], "ok": False, "phase": "launch", "fault_nodes": [nodes[0]],
                "error": f"could not find a free port for the rendezvous on {nodes[0]}"}
    rdzv_s, join_s, pg_s = worker_timeouts(budget_s, *timeouts_s)
    specs, launch_facts = launch(ctx, nodes=nodes, plan=plan, nproc=nproc, module=module,
                                 worker_args=worker_args(join_s, pg_s), budget_s=budget_s, rdzv_timeout_s=rdzv_s,
                                 port=port, absent_node=absent_node)
    launch_facts["timeouts_s"].update({"join": round(join_s, 1), "pg": round(pg_s, 1)})
    return run_launch(ctx, [(specs, launch_facts)], budget_s)[0]


def worker_timeouts(budget_s: float, rdzv_s: float, join_s: float, pg_s: float) -> tuple[float, float, float]:
    """Rendezvous, roll-call and process-group timeouts that all end before the launch's deadline."""
    rdzv = max(5.0, min(rdzv_s, budget_s * 0.4))
    left = budget_s - rdzv - 10.0  # interpreter and torch start-up after the rendezvous
    join = max(3.0, min(join_s, left / 3))
    pg = max(5.0, min(pg_s, left - 1.5 * join - 5.0))
    return rdzv, join, pg


def run_launch(ctx: ClusterContext, specs_and_facts: list[tuple[list[AgentSpec], dict[str, Any]]],
               budget_s: float) -> list[dict[str, Any]]:
    """Run several launches at once (disjoint nodes); returns each launch's facts with its outcome."""
    specs = [spec for batch, _ in specs_and_facts for spec in batch]
    agents = run_agents(ctx, specs, budget_s)
    out = []
    for batch, facts in specs_and_facts:
        mine = {spec.node: agents[spec.node] for spec in batch}
        outcome = interpret_run(mine, facts["host"], facts["timeouts_s"]["rendezvous"], budget_s)
        out.append({**facts, **outcome, "agents": _compact_agents(mine)})
    return out


def _compact_agents(agents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Agent facts without the (large) worker reports, which live in the launch's result."""
    return {node: {k: v for k, v in agent.items() if k != "reports"} |
            {"errors": [r for r in agent.get("reports", []) if not r.get("ok")]}
            for node, agent in agents.items()}


