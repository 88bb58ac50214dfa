"""The adaptive isolation pass of the cross-node checks: preflight.launch.isolation over torchrun launches.

`adaptive_pass` gives preflight.launch.isolation.isolate a measure() that runs each round's groups as
concurrent torchrun launches (preflight.launch.torchrun: one launch per group, each hosted by its
first node, all started at once and waited for together), judges each launch with the check's own
`judge`, and raises Stop when the pass's time is spent. What it returns is the facts: the isolation
(every round, every attribution), each group's launch as the check recorded it, and the pass's
wall time. collectives.cluster and scaling.multi_node both run it, each with its own worker and judge.

Which groups are measured depends on how the earlier ones were judged, so the pass judges while
it collects, with the thresholds of the run (kept in the facts); evaluate reports its attributions.

Stragglers: a judged launch may carry `node_times_s` (node -> seconds, the slowest of the node's
ranks, from the worker's per-rank times); they become the GroupResult's times, and isolate's
straggler search names a node that is far slower than its groups' median. The all-node run's own
per-node times go into the screen the same way.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable

from preflight.core.check import CannotMeasure
from preflight.history.outliers import lagging
from preflight.engine.context import ClusterContext
from preflight.launch.torchrun import MIN_LAUNCH_S, launch, pick_port, run_launch, worker_timeouts
from preflight.launch.isolation import GroupResult, IsolationParams, Stop, isolate
from preflight.launch.isolation_types import pass_rounds

ISOLATION_METHODS = ("adaptive", "pairs")

Judge = Callable[[dict[str, Any]], tuple[GroupResult, dict[str, Any]]]


def isolation_method(value: str, methods: tuple[str, ...] = ISOLATION_METHODS) -> str:
    """`value` when it names a method of naming what is at fault; CannotMeasure otherwise."""
    if value not in methods:
        raise CannotMeasure(f"isolation must be one of {', '.join(methods)}, not {value!r}")
    return value


# Launch phases whose fault_nodes are certain: the nodes that never joined or were lost. A rank that
# went silent inside a collective ("stopped") is a guess when several did (gloo connects every pair
# at start, so one broken link silences ranks on many nodes): the pass runs, and confirms or clears it.
PINNED_PHASES = ("launch", "rendezvous", "roll call")


def pinned(run: dict[str, Any]) -> bool:
    """Whether a failed run's fault is already pinned on its nodes, so no pass is needed. Pure."""
    nodes = run.get("fault_nodes") or []
    return bool(nodes) and (run.get("phase") in PINNED_PHASES or len(nodes) == 1)


def node_times(rank_times_s: list[float] | None, rank_nodes: dict[Any, str] | None) -> dict[str, float] | None:
    """node -> the slowest of its ranks' times, from a worker's per-rank times and the launch's
    rank -> node map; None when either is missing. Pure."""
    if not rank_times_s or not rank_nodes:
        return None
    owners = {int(r): n for r, n in rank_nodes.items()}
    out: dict[str, float] = {}
    for rank, seconds in enumerate(rank_times_s):
        node = owners.get(rank)
        if node is not None and seconds is not None and seconds > 0:
            out[node] = max(out.get(node, 0.0), float(seconds))
    return out or None


# A node whose ranks are this far above the others' median (the modified z-score of fleet.outlier,
# and at least straggler_min_excess above it) starts the pass after an all-node run that met its floors.
SLOW_RANKS_Z = 5.0
SLOW_RANKS_EXCESS = 0.25


def slow_ranks_reason(times_s: dict[str, float] | None, min_nodes: int = 4) -> str | None:
    """Why the pass should run though the all-node run met its floors: one node's ranks far slower
    than the others' (per-rank all-reduce or step times), to be confirmed among known-good nodes by
    the pass's straggler search. None with fewer than `min_nodes` timed nodes. Pure."""
    if not times_s or len(times_s) < min_nodes:
        return None
    names = list(times_s)
    slow = lagging([times_s[n] for n in names], "lower", z_limit=SLOW_RANKS_Z, least=SLOW_RANKS_EXCESS)
    if not slow:
        return None
    index, median_s, _ = max(slow, key=lambda found: times_s[names[found[0]]])
    more = f" (and {len(slow) - 1} more)" if len(slow) > 1 else ""
    return (f"{names[index]}'s ranks took {times_s[names[index]]:.3g} s against the nodes' median "
            f"{median_s:.3g} s{more}")


def judged_group(judged: dict[str, Any], figure: str = "busbw_gbps") -> tuple[GroupResult, dict[str, Any]]:
    """A group's launch judged as (state good / bad / error, figures, problems, node_times_s): its
    GroupResult, and the launch's facts to keep."""
    ok = {"good": True, "bad": False}.get(judged.get("state", ""))
    note = "; ".join(judged.get("problems") or []) or judged.get("error") or ""
    return GroupResult(ok, figure=judged.get(figure), note=note, times_s=judged.get("node_times_s")), judged


SHARED_MACHINE_NOTE = ("no straggler was looked for: some of these nodes run on one machine (the same kernel boot "
                       "id), so their ranks share its CPUs and a rank's time is not its node's")


def without_node_times(result: GroupResult) -> GroupResult:
    """A group's result without its per-node times (nodes that share a machine). Pure."""
    return replace(result, times_s=None) if result.times_s else result


def pass_seconds(given: float | None, count: int) -> float:
    """A launch-based isolation pass's time over `count` nodes (seconds): `given`, else the rounds a
    search at that size takes (pass_rounds) of MIN_LAUNCH_S each: 880 s at 8 nodes, 1,440 s at 1,024."""
    return given if given is not None else pass_rounds(count) * MIN_LAUNCH_S


def timeout_with_pass(timeout_s: float, pass_s: float, count: int, held_s: float, isolating: bool) -> float:
    """A check's limit on `count` nodes: `timeout_s`, which holds `held_s` of its isolation pass, plus
    what the pass (`pass_s`) takes beyond that when one can run (three nodes or more)."""
    return timeout_s + (max(0.0, pass_s - held_s) if isolating and count >= 3 else 0.0)


def adaptive_pass(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
                  worker_args: Callable[[float, float], list[str]], judge: Judge, budget_s: float,
                  timeouts_s: tuple[float, float, float], port: int | None, reason: str, run: dict[str, Any],
                  topology: dict[str, str] | None = None, thresholds: dict[str, Any] | None = None,
                  screen_times_s: dict[str, float] | None = None, shared_machine: bool = False) -> dict[str, Any]:
    """Isolate what made `run` over `nodes` bad (`reason`: why; it is the screen, which saves the
    first round, with `screen_times_s` as its per-node times), in rounds of concurrent launches
    within `budget_s`.

    `shared_machine`: some of the nodes are one kernel (network namespaces, containers on one host).
    Their ranks then share CPUs, so a rank's time says how the scheduler treated it, not how fast its
    node is: per-node times are left out and no straggler is named (the facts say so).

    `worker_args(join_s, pg_s)`: the worker's arguments for timeouts cut to a round's share;
    `judge(launch_result)`: the group's GroupResult and the facts to keep of its launch. A round
    may take the longest of: MIN_LAUNCH_S, twice what the all-node run took when it completed (a
    group's burst is smaller), and a share of what is left for the rounds still expected.
    """
    began = time.monotonic()
    deadline = began + budget_s
    took = max((a.get("duration_s") or 0.0 for a in (run.get("agents") or {}).values()), default=0.0) \
        if run.get("ok") else 0.0
    launches: list[dict[str, Any]] = []
    done = [0]

    def measure(groups: list[list[str]]) -> list[GroupResult]:
        left = deadline - time.monotonic()
        if left < MIN_LAUNCH_S:
            raise Stop(f"the pass's time limit of {budget_s:.0f}s")
        expected = max(2, math.ceil(math.log2(max(2, len(nodes)))) + 4 - done[0])
        share = min(left, max(MIN_LAUNCH_S, 2 * took, left / expected))
        done[0] += 1
        rdzv_s, join_s, pg_s = worker_timeouts(share, *timeouts_s)
        args = worker_args(join_s, pg_s)
        ports = [port] * len(groups) if port else _free_ports(ctx, plan, [g[0] for g in groups])
        results: list[GroupResult | None] = [None] * len(groups)
        batches = []
        for index, (group, group_port) in enumerate(zip(groups, ports)):
            if group_port is None:
                results[index] = GroupResult(None, note=f"no free port for the rendezvous on {group[0]}")
                launches.append({"round": done[0], "nodes": group, "not_run": True, "error": results[index].note})
                continue
            specs, facts = launch(ctx, nodes=group, plan=plan, nproc=nproc, module=module, worker_args=args,
                                  budget_s=share, rdzv_timeout_s=rdzv_s, port=group_port,
                                  group=f"isolation-{done[0]}-{index}")
            batches.append((index, specs, facts))
        outcomes = run_launch(ctx, [(specs, facts) for _, specs, facts in batches], share) if batches else []
        for (index, _, _), outcome in zip(batches, outcomes):
            judged, kept = judge(outcome)
            results[index] = without_node_times(judged) if shared_machine else judged
            launches.append({"round": done[0], **kept})
        return [r if r is not None else GroupResult(None, note="not run") for r in results]

    if shared_machine:
        screen_times_s = None
    result = isolate(nodes, measure, topology=topology, params=IsolationParams(max_rounds=pass_rounds(len(nodes))),
                     screen=GroupResult(False, note=reason, times_s=screen_times_s or None))
    if shared_machine:
        result.notes.append(SHARED_MACHINE_NOTE)
    return {"method": "adaptive", "reason": reason, "budget_s": round(budget_s, 1), "thresholds": thresholds or {},
            "isolation": result.to_dict(), "launches": launches, "wall_s": round(time.monotonic() - began, 1),
            **({"screen_times_s": screen_times_s} if screen_times_s else {})}


def _free_ports(ctx: ClusterContext, plan: dict[str, Any], hosts: list[str]) -> list[int | None]:
    """A free rendezvous port on each host, asked of all hosts at once."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool:
        return list(pool.map(lambda host: pick_port(ctx, host, plan[host]["ip"]), hosts))
