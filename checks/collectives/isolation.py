"""The adaptive isolation pass of the cross-node checks: preflight.launch.isolation over torchrun launches.

`adaptive_pass` gives preflight.launch.isolation.isolate a measure() that runs each round's groups as
concurrent torchrun launches (preflight.launch.torchrun: one launch per group, each hosted by its
first node, all started at once and waited for together), judges each launch with the check's own
`judge`, and raises Stop when the pass's time is spent. What it returns is the facts: the isolation
(every round, every attribution) and each group's launch as the check recorded it.

Which groups are measured depends on how the earlier ones were judged, so the pass judges while
it collects, with the thresholds of the run (kept in the facts); evaluate reports its attributions.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from preflight.core.check import CannotMeasure
from preflight.run.context import ClusterContext
from preflight.launch.torchrun import MIN_LAUNCH_S, launch, pick_port, run_launch, worker_timeouts
from preflight.launch.isolation import GroupResult, Stop, isolate

ISOLATION_METHODS = ("adaptive", "pairs")

Judge = Callable[[dict[str, Any]], tuple[GroupResult, dict[str, Any]]]


def isolation_method(value: str) -> str:
    """`value` when it names a method of naming what is at fault; CannotMeasure otherwise."""
    if value not in ISOLATION_METHODS:
        raise CannotMeasure(f"isolation must be one of {', '.join(ISOLATION_METHODS)}, not {value!r}")
    return value


def topology_of(ctx: ClusterContext) -> dict[str, str] | None:
    """node -> topology group, from a `group` or `rack` key in the nodes' specs; None when none has one."""
    found = {spec["name"]: str(spec.get("group") or spec.get("rack")) for spec in ctx.nodes
             if spec.get("group") or spec.get("rack")}
    return found or None


def judged_group(judged: dict[str, Any]) -> tuple[GroupResult, dict[str, Any]]:
    """A group's launch judged as a pair is (state good / bad / error, figures, problems): its
    GroupResult, and the launch's facts to keep."""
    ok = {"good": True, "bad": False}.get(judged.get("state", ""))
    note = "; ".join(judged.get("problems") or []) or judged.get("error") or ""
    return GroupResult(ok, figure=judged.get("busbw_gbps"), note=note), judged


def adaptive_pass(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
                  worker_args: Callable[[float, float], list[str]], judge: Judge, budget_s: float,
                  timeouts_s: tuple[float, float, float], port: int | None, reason: str, run: dict[str, Any],
                  topology: dict[str, str] | None = None, thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    """Isolate what made `run` over `nodes` bad (`reason`: why; it is the screen, which saves the
    first round), in rounds of concurrent launches within `budget_s`.

    `worker_args(join_s, pg_s)`: the worker's arguments for timeouts cut to a round's share;
    `judge(launch_result)`: the group's GroupResult and the facts to keep of its launch. A round
    may take the longest of: MIN_LAUNCH_S, twice what the all-node run took when it completed (a
    group's burst is smaller), and a share of what is left for the rounds still expected.
    """
    deadline = time.monotonic() + budget_s
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
            results[index], kept = judge(outcome)
            launches.append({"round": done[0], **kept})
        return [r if r is not None else GroupResult(None, note="not run") for r in results]

    result = isolate(nodes, measure, topology=topology, screen=GroupResult(False, note=reason))
    return {"method": "adaptive", "reason": reason, "budget_s": round(budget_s, 1), "thresholds": thresholds or {},
            "isolation": result.to_dict(), "launches": launches}


def _free_ports(ctx: ClusterContext, plan: dict[str, Any], hosts: list[str]) -> list[int | None]:
    """A free rendezvous port on each host, asked of all hosts at once."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool:
        return list(pool.map(lambda host: pick_port(ctx, host, plan[host]["ip"]), hosts))
