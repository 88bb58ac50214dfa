"""scaling.multi_node's isolation pass: when the all-node DDP run is bad, which node, link or boundary
makes it so (preflight.launch.isolation_launch, the pass collectives.cluster runs too).

Each group of the pass runs the same DDP worker as the all-node run, on fewer nodes. A group is
judged on its step efficiency, compute / step (its no_sync step's median over its full step's): the
share of a step that is not exposed communication. Unlike E, it needs no one-node figure, so
groups measured at once on nodes that share hosts (or a round that loads a shared switch) are judged
on their own terms. A group is bad when its run failed or its step efficiency is below
`isolation_min_step_efficiency` (unset: warn_efficiency). Each rank's own no_sync step time
(`rank_compute_s` of the worker) gives the per-node times the straggler search reads. Pure except
`run_isolation`, which launches.
"""

from __future__ import annotations

from typing import Any

from preflight.launch.isolation_findings import SHARED_CAUSE_FIX, suspect_fix
from preflight.launch.isolation_launch import adaptive_pass, judged_group, node_times, pinned
from preflight.engine.context import ClusterContext
from preflight.launch.topology import topology_of

ISOLATION_METHODS = ("adaptive", "off")

# The fix of each finding the pass can report (preflight.launch.isolation_findings.ISOLATION_KINDS).
ISOLATION_FIXES = {
    "isolated-node": ("The node named slows every group it is in: compare its NIC speed and errors (net.bandwidth, "
                      "`ethtool -S`), its GPU clocks and its load with its peers, and leave it out of the job until "
                      "it is fixed."),
    "isolated-link": ("The link between the two nodes named: reseat or replace its cable or transceiver, check both "
                      "switch ports, then run net.bandwidth between the two; each node trains well with others."),
    "isolated-boundary": ("The path between the two topology groups named: check the trunk or uplinks between their "
                          "switches (error counters, oversubscription, a failed member of a LAG)."),
    "straggler": ("The node named computes a step slower than its peers, though it works: compare its GPU clocks, "
                  "thermal and power state and host load with theirs (gpu.visibility, scaling.multi_gpu)."),
    "suspect": suspect_fix("scaling.multi_node", "isolation_timeout_s"),
    "isolation-ambiguous": ("The evidence names several candidates: run scaling.multi_node or collectives.cluster "
                            "again on just those nodes (--nodes), or measure each candidate link with net.bandwidth."),
    "isolation-not-reproduced": ("No smaller group reproduced the loss: it appears only with every node at once "
                                 "(congestion, an oversubscribed uplink, the size of the job) or was transient; "
                                 "compare exposed communication on one node and on all."),
    "shared-cause": SHARED_CAUSE_FIX,
}


def step_efficiency(result: dict[str, Any]) -> float | None:
    """compute / step of a DDP run's report. Pure."""
    step, compute = result.get("step_s"), result.get("compute_s")
    return compute / step if step and compute is not None else None


def isolation_reason(everyone: dict[str, Any], efficiency: float | None, min_efficiency: float,
                     node_count: int) -> str | None:
    """Why the isolation pass should run after the all-node run, or None. Pure."""
    if node_count < 3:
        return None  # with two nodes the only pair is the run itself
    if not everyone.get("ok"):
        return None if pinned(everyone) else "the DDP run across all nodes failed"
    if efficiency is not None and efficiency < min_efficiency:
        return f"efficiency {efficiency:.2f} below {min_efficiency:.2f}"
    return None


def group_facts(launch_result: dict[str, Any]) -> dict[str, Any]:
    """One group's DDP run as facts: how it ended, its step figures, its per-node times. Pure."""
    group: dict[str, Any] = {"nodes": launch_result["nodes"], "ok": bool(launch_result.get("ok"))}
    if not group["ok"]:
        group.update(error=launch_result.get("error"), phase=launch_result.get("phase"))
        return group
    result = launch_result["result"]
    group.update(step_s=result.get("step_s"), compute_s=result.get("compute_s"),
                 samples_per_s=result.get("samples_per_s"), step_efficiency=step_efficiency(result))
    times = run_node_times(launch_result)
    if times:
        group["node_times_s"] = times
    return group


def run_node_times(launch_result: dict[str, Any]) -> dict[str, float] | None:
    """node -> its slowest rank's median no_sync step time; None without per-rank times. Pure."""
    return node_times((launch_result.get("result") or {}).get("rank_compute_s"), launch_result.get("rank_nodes"))


def judge_group(group: dict[str, Any], floor: float) -> dict[str, Any]:
    """One group as good / bad / error under the step-efficiency `floor`. Pure."""
    judged = {k: v for k, v in group.items() if k not in ("state", "problems")}
    if group.get("not_run"):
        return {**judged, "state": "error"}
    if not group.get("ok"):
        return {**judged, "state": "bad", "problems": [group.get("error") or "the run failed"]}
    value = group.get("step_efficiency")
    problems = [] if value is None or value >= floor else [f"step efficiency {value:.2f} below {floor:.2f}"]
    return {**judged, "state": "bad" if problems else "good", "problems": problems}


def run_isolation(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int,
                  worker_args: Any, floor: float, reason: str, run: dict[str, Any], budget_s: float,
                  timeouts_s: tuple[float, float, float], port: int | None,
                  shared_machine: bool = False) -> dict[str, Any]:
    """The adaptive pass over `nodes`, each group a DDP run judged on its step efficiency."""
    return adaptive_pass(
        ctx, nodes=nodes, plan=plan, nproc=nproc, module="ddp_scaling", worker_args=worker_args,
        judge=lambda result: judged_group(judge_group(group_facts(result), floor), figure="step_efficiency"),
        budget_s=budget_s, timeouts_s=timeouts_s, port=port, reason=reason, run=run,
        topology=topology_of(ctx), thresholds={"min_step_efficiency": floor},
        screen_times_s=run_node_times(run) if run.get("ok") else None, shared_machine=shared_machine)
