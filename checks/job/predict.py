"""The job's step time at a size, from measured pieces only. Pure.

    step(n)   = grad_accum x compute(micro_batch) + allreduce(n) x (1 - overlap)
    compute   the no_sync step of one rank on the team's model (scaling.multi_gpu, canary.training),
              per sample times micro_batch when it was measured at another batch
    allreduce the gradient bytes (the model's parameters, fp32) all-reduced by n ranks: the time the
              measured sweep gives at that size, as bus bandwidth (nccl-tests: busbw = bytes / time
              x 2(W-1)/W for W ranks), then time = bytes x 2(n-1)/n / busbw; collectives.cluster's
              sweep across nodes, collectives.local's within one
    overlap   the share of the all-reduce the backward pass hid, as measured on one node
    data      a node's loader (dataloader.throughput) must supply gpus_per_node x micro_batch x
              grad_accum samples per step; when it cannot, the step waits for it
    X(n)      = n x micro_batch x grad_accum / step(n), samples/s; E(n) = X(n) / (n X(1)), where X(1)
              is one rank computing alone (no all-reduce)

Each of the pieces is looked up, never assumed: a piece that was not measured comes back in
`missing`, with the check and setting that measures it.
"""

from __future__ import annotations

import math
from typing import Any

from preflight_checks.canary.figures import interpolate_time
from preflight_checks.job.pieces import CANARY, CLUSTER, LOCAL, MULTI_GPU

HOW = {
    "compute": (f"a no_sync step on one node: run {MULTI_GPU} (scaling.multi_gpu.workload = \"package.module:factory\" "
                f"for your model) or {CANARY} at --level standard or thorough"),
    "gradient_bytes": f"the model's parameter count, which {MULTI_GPU} and {CANARY} record",
    "cross_node": (f"the all-reduce across nodes: run with a hosts file of two nodes or more, so that {CLUSTER} "
                   "measures it"),
    "local": f"the all-reduce among a node's devices: {LOCAL}",
    "overlap": (f"how much of the all-reduce the backward pass hides: {CANARY} (its communication hook) or "
                f"{MULTI_GPU} with {LOCAL}"),
}


def _order(piece: dict[str, Any], micro: int | None) -> tuple[bool, bool, bool]:
    return (not piece.get("team_model"), piece.get("batch") != micro, piece["source"] != MULTI_GPU)


def choose_compute(per_node: dict[str, Any], micro: int | None) -> dict[str, Any] | None:
    """The compute piece to predict from: the team's model first, then one measured at micro_batch,
    then scaling.multi_gpu; of that source, the slowest node's (a step waits for its slowest rank)."""
    found = [(node, p) for node, pieces in per_node.items() for p in pieces.get("compute", [])
             if p.get("compute_s") and p.get("batch")]
    if not found:
        return None
    best = min(_order(p, micro) for _, p in found)
    same = [(node, p) for node, p in found if _order(p, micro) == best]
    node, piece = max(same, key=lambda item: item[1]["compute_s"] / item[1]["batch"])
    return {**piece, "node": node, "slowest_of": len(same)}


def choose_overlap(per_node: dict[str, Any], source: str) -> dict[str, Any] | None:
    """The overlap measured with the compute's own source first; the least of the nodes' (the rank
    that hides least decides)."""
    found = [(node, o) for node, pieces in per_node.items() for o in pieces.get("overlap", [])]
    if not found:
        return None
    same = [(node, o) for node, o in found if o["source"] == source] or found
    node, piece = min(same, key=lambda item: item[1]["overlap"])
    return {**piece, "node": node}


def busbw_at(sweep: dict[str, Any], nbytes: float) -> float | None:
    """Bus bandwidth (bytes/s) of a measured sweep at this message size."""
    ranks = sweep.get("world_size") or 0
    seconds = interpolate_time(sweep["sizes"], int(nbytes))
    if not seconds or ranks < 2:
        return None
    return nbytes / seconds * 2 * (ranks - 1) / ranks


def allreduce_s(nbytes: float, ranks: int, nodes: int, cluster: dict[str, Any] | None,
                local: list[dict[str, Any]]) -> tuple[float | None, str]:
    """Seconds to all-reduce the gradients among `ranks` on `nodes`, and the sweep it comes from
    (or the name of the missing piece)."""
    if ranks < 2:
        return 0.0, "one rank: no all-reduce"
    if nodes > 1:
        if not cluster:
            return None, "cross_node"
        sweep, where = cluster, f"{CLUSTER} ({cluster['world_size']} ranks on {cluster['nodes']} nodes)"
    else:
        usable = [s for s in local if s["world_size"] >= 2]
        if not usable:
            return None, "local"
        sweep = min(usable, key=lambda s: (abs(s["world_size"] - ranks), -s["world_size"]))
        where = f"{LOCAL} ({sweep['world_size']} {sweep['backend']} ranks)"
    bw = busbw_at(sweep, nbytes)
    if not bw:
        return None, "cross_node" if nodes > 1 else "local"
    return nbytes * 2 * (ranks - 1) / ranks / bw, where


def step_at(gpus: int, per_node: int, plan: dict[str, Any], pieces: dict[str, Any]) -> dict[str, Any]:
    """The predicted step at `gpus` ranks (per_node to a node); `missing` when a piece is not there."""
    nodes = max(1, math.ceil(gpus / per_node))
    compute = plan["accum"] * pieces["compute_s"]
    comm, where = allreduce_s(pieces["gradient_bytes"], gpus, nodes, pieces["cluster"], pieces["local"])
    if comm is None:
        return {"gpus": gpus, "nodes": nodes, "missing": where}
    exposed = comm * (1.0 - pieces["overlap"])
    step = compute + exposed
    samples_per_node = min(gpus, per_node) * plan["micro"] * plan["accum"]
    out = {"gpus": gpus, "nodes": nodes, "compute_s": compute, "allreduce_s": comm, "exposed_s": exposed,
           "allreduce_from": where, "data_bound": False, "unfed_step_s": step, "demand": samples_per_node / step}
    supply = pieces.get("supply")
    if supply and samples_per_node / step > supply:
        out["data_bound"] = True
        step = samples_per_node / supply
    out["step_s"] = step
    out["throughput"] = gpus * plan["micro"] * plan["accum"] / step
    out["efficiency"] = compute / step
    out["comm_share"] = exposed / step
    out["bottleneck"] = "data" if out["data_bound"] else "communication" if exposed > compute else "compute"
    return out


def sizes_of(gpus: int) -> list[int]:
    """The job's size, half of it and double it (half only when it is a whole number of GPUs)."""
    return sorted({gpus, 2 * gpus} | ({gpus // 2} if gpus >= 2 and gpus % 2 == 0 else set()))


def predict(per_node_pieces: dict[str, Any], cluster: dict[str, Any] | None, plan: dict[str, Any]) -> dict[str, Any]:
    """The prediction at the job's size, half and double; or what is missing, with how to measure it."""
    micro = plan["micro"]
    compute = choose_compute(per_node_pieces, micro)
    if compute is None:
        return {"missing": ["compute"]}
    nbytes = compute.get("gradient_bytes")
    if not nbytes:
        return {"missing": ["gradient_bytes"], "compute": compute}
    overlap = choose_overlap(per_node_pieces, compute["source"])
    local = [s for pieces in per_node_pieces.values() for s in pieces.get("allreduce", [])]
    supplies = [p["data"]["samples_per_s"] for p in per_node_pieces.values() if p.get("data")]
    data = next((p["data"] for p in per_node_pieces.values() if p.get("data")), None)
    pieces = {"compute_s": compute["compute_s"] * micro / compute["batch"], "gradient_bytes": nbytes,
              "overlap": overlap["overlap"] if overlap else 0.0, "cluster": cluster, "local": local,
              "supply": min(supplies) if supplies and data and not data["synthetic"] else None}
    steps = [step_at(n, plan["per_node"], plan, pieces) for n in sizes_of(plan["gpus"])]
    missing = sorted({s["missing"] for s in steps if "missing" in s})
    if overlap is None and any(s.get("allreduce_s") for s in steps):
        missing.append("overlap")
    one = step_at(1, plan["per_node"], plan, pieces)
    return {"compute": compute, "overlap": overlap, "pieces": {k: v for k, v in pieces.items() if k != "local"},
            "data": data, "one": one, "steps": steps, "missing": missing}
