"""What job.plan reads of the other checks' facts, kept small in its own facts so that re-judging
needs nothing else. Pure: dicts in, dicts out.

    compute     per node and source: the no_sync step time (compute only, no all-reduce) of one rank
                at a batch, with the model's gradient bytes (scaling.multi_gpu at the device count
                nearest the job's GPUs per node; canary.training's no_sync steps)
    overlap     per node and source: the share of a step's all-reduce that training hid behind the
                backward pass (canary.training: its communication hook's all-reduce time per step
                against the step's exposed communication; scaling.multi_gpu: exposed communication
                against collectives.local's all-reduce of the gradient bytes)
    allreduce   size sweeps: collectives.local per node, collectives.cluster across the nodes
    memory      the canary's largest batch per GPU that fits (find_max_batch)
    data        dataloader.throughput's samples/s per node
    measured    scaling.multi_node's one-node and all-node runs, for the prediction to stand beside
"""

from __future__ import annotations

from typing import Any

from preflight_checks.canary.figures import interpolate_time, percentile

CANARY, MULTI_GPU, LOCAL, CLUSTER, DATALOADER, MULTI_NODE = (
    "canary.training", "scaling.multi_gpu", "collectives.local", "collectives.cluster", "dataloader.throughput",
    "scaling.multi_node")
READS = (CANARY, MULTI_GPU, LOCAL, DATALOADER, CLUSTER, MULTI_NODE)


def _ok_result(run: dict[str, Any] | None) -> dict[str, Any] | None:
    return run["result"] if run and run.get("ok") and run.get("result") else None


def sweep(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"bytes": s["bytes"], "time_s": s["time_s"]} for s in result.get("sizes", [])
            if s.get("bytes") and s.get("time_s")]


def multi_gpu_compute(facts: dict[str, Any], per_node: int | None) -> dict[str, Any] | None:
    """The no_sync step of one rank at the device count nearest the job's per node (not above it)."""
    rows = {r["devices"]: _ok_result(r) for r in facts.get("torch", []) if _ok_result(r)}
    if not rows:
        return None
    fitting = [n for n in rows if per_node is None or n <= per_node] or [min(rows)]
    n = max(fitting)
    result = rows[n]
    if result.get("compute_s") is None:
        return None
    model = facts.get("model") or {}
    return {"source": MULTI_GPU, "compute_s": result["compute_s"], "batch": result.get("batch_per_device"),
            "ranks": n, "gradient_bytes": result.get("gradient_bytes"), "parameters": result.get("parameters"),
            "model": model.get("workload") or result.get("model"), "team_model": bool(model.get("workload")),
            "device_kind": facts.get("device_kind")}


def canary_compute(facts: dict[str, Any]) -> dict[str, Any] | None:
    """The canary's no_sync steps (compute only): the slowest rank's median."""
    result = _ok_result(facts.get("run"))
    if not result:
        return None
    per_rank = [percentile(r["compute_s"], 50) for r in result["ranks"] if r.get("compute_s")]
    if not per_rank:
        return None
    parameters = result.get("parameters")
    return {"source": CANARY, "compute_s": max(per_rank), "batch": result.get("batch_per_rank"),
            "ranks": result.get("world_size"), "gradient_bytes": parameters * 4 if parameters else None,
            "parameters": parameters, "model": result.get("model"), "team_model": bool(result.get("entry")),
            "device_kind": result.get("device")}


def canary_overlap(facts: dict[str, Any], compute: dict[str, Any] | None) -> dict[str, Any] | None:
    """The share of the all-reduce the canary's steps hid: 1 - exposed / all-reduce time per step, where
    the hook timed the all-reduce and exposed = step - data wait - compute (no_sync)."""
    result = _ok_result(facts.get("run"))
    if not result or not compute:
        return None
    from preflight_checks.canary.figures import summarise

    s = summarise(result)
    comm = s.get("comm_per_step_p50_s")
    if not comm:
        return None
    exposed = max(0.0, s["step_median_s"] - (s["data_wait_median_s"] or 0.0) - compute["compute_s"])
    return {"source": CANARY, "overlap": max(0.0, min(1.0, 1.0 - exposed / comm)), "exposed_s": exposed,
            "comm_s": comm, "ranks": result.get("world_size")}


def multi_gpu_overlap(facts: dict[str, Any], local: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The share of the all-reduce scaling.multi_gpu's step hid at its largest count: its exposed
    communication against collectives.local's all-reduce of the gradient bytes by as many ranks."""
    rows = [(r["devices"], _ok_result(r)) for r in facts.get("torch", []) if _ok_result(r) and r["devices"] > 1]
    for n, result in sorted(rows, key=lambda row: -row[0]):
        nbytes = result.get("gradient_bytes")
        reference = next((s for s in local if s["world_size"] == n and s["backend"] == facts.get("backend")), None)
        if not nbytes or reference is None or result.get("compute_s") is None:
            continue
        comm = interpolate_time(reference["sizes"], nbytes)
        if not comm:
            continue
        exposed = max(0.0, result["step_s"] - result["compute_s"])
        return {"source": MULTI_GPU, "overlap": max(0.0, min(1.0, 1.0 - exposed / comm)), "exposed_s": exposed,
                "comm_s": comm, "ranks": n}
    return None


def local_sweeps(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"backend": r["backend"], "world_size": r["world_size"], "sizes": sweep(r["result"])}
            for r in facts.get("runs", []) if _ok_result(r) and sweep(r["result"])]


def node_pieces(checks: dict[str, dict[str, Any]], per_node: int | None) -> dict[str, Any]:
    """Everything job.plan reads of one node's checks."""
    local = local_sweeps(checks.get(LOCAL) or {})
    multi, canary = checks.get(MULTI_GPU) or {}, checks.get(CANARY) or {}
    computes = [c for c in (multi_gpu_compute(multi, per_node), canary_compute(canary)) if c]
    overlaps = [o for o in (canary_overlap(canary, next((c for c in computes if c["source"] == CANARY), None)),
                            multi_gpu_overlap(multi, local)) if o]
    gpus = next((f.get("gpu_count") for f in (multi, canary) if f.get("gpu_count") is not None), None)
    run = _ok_result(canary.get("run")) or {}
    memory = None
    if canary:
        found = run.get("max_batch") or {}
        memory = {"device_kind": canary.get("device_kind"), "largest_fitting": found.get("largest_fitting"),
                  "first_failing": found.get("first_failing"), "entry": canary.get("entry")}
    return {"gpus": gpus, "compute": computes, "overlap": overlaps, "allreduce": local, "memory": memory,
            "data": data_supply(checks.get(DATALOADER))}


def data_supply(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """The loader's best median samples/s on the node, and whether it read the team's data."""
    if not facts:
        return None
    rates = [r.get("samples_per_s") for key in ("torch", "tensorflow") if isinstance(r := facts.get(key), dict)
             and isinstance(r.get("samples_per_s"), (int, float))]
    if not rates:
        return None
    return {"samples_per_s": max(rates), "synthetic": "synthetic" in facts}


def cluster_sweep(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    result = _ok_result((facts or {}).get("run"))
    if not result or not sweep(result):
        return None
    run = facts["run"]
    return {"backend": result.get("backend"), "world_size": result.get("world_size"),
            "nodes": len(run.get("nodes") or []), "nproc_per_node": run.get("nproc_per_node"),
            "sizes": sweep(result)}


def measured_scaling(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """scaling.multi_node's two runs (step, compute, throughput), for the prediction to stand beside."""
    facts = facts or {}
    runs = {}
    for key in ("one_node", "all_nodes"):
        result = _ok_result(facts.get(key))
        if result:
            runs[key] = {"nodes": len(facts[key].get("nodes") or []), "world_size": result.get("world_size"),
                         "step_s": result.get("step_s"), "compute_s": result.get("compute_s"),
                         "samples_per_s": result.get("samples_per_s"), "batch": result.get("batch_per_device"),
                         "gradient_bytes": result.get("gradient_bytes")}
    return runs or None


def collect_pieces(node_facts: dict[str, dict[str, dict[str, Any]]], cluster_facts: dict[str, dict[str, Any]],
                   nodes: list[str], per_node: int | None) -> dict[str, Any]:
    """job.plan's facts from what the other checks collected in this run."""
    return {"per_node": {n: node_pieces(node_facts.get(n) or {}, per_node) for n in nodes},
            "cluster_allreduce": cluster_sweep(cluster_facts.get(CLUSTER)),
            "measured": measured_scaling(cluster_facts.get(MULTI_NODE)),
            "ran": sorted({c for n in nodes for c in (node_facts.get(n) or {}) if c in READS}
                          | {c for c in cluster_facts if c in READS})}
