"""The training canary's figures, from what its ranks recorded. Pure: no torch, no I/O.

Input is the result rank 0 of `preflight.workers.canary` prints: per rank the step times, the time
each step waited for its batch, the losses, and every gradient bucket's all-reduce (step, seconds,
bytes); the idle all-reduce of each bucket size; NVML utilisation samples on GPU nodes.
"""

from __future__ import annotations

import math
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interpolate_time(sizes: list[dict[str, Any]], nbytes: int) -> float | None:
    """All-reduce time at `nbytes` from a size sweep [{bytes, time_s}], log-log between neighbours.

    Outside the sweep the nearest end is scaled linearly by size above it and held flat below it
    (small messages are latency-bound).
    """
    points = sorted((s["bytes"], s["time_s"]) for s in sizes if s.get("bytes") and s.get("time_s"))
    if not points:
        return None
    if nbytes <= points[0][0]:
        return points[0][1]
    if nbytes >= points[-1][0]:
        return points[-1][1] * nbytes / points[-1][0]
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if b0 <= nbytes <= b1:
            fraction = math.log(nbytes / b0) / math.log(b1 / b0)
            return math.exp(math.log(t0) + fraction * (math.log(t1) - math.log(t0)))
    return None


def collectives_reference(earlier: dict[str, Any] | None, world_size: int, backend: str) -> dict[str, Any] | None:
    """The all-reduce size sweep collectives.local measured in this run with the same backend and
    world size, or None when it did not run or measured something else."""
    for run in (earlier or {}).get("runs", []):
        if run.get("ok") and run.get("backend") == backend and run.get("world_size") == world_size:
            return {"source": "collectives.local", "sizes": run["result"]["sizes"]}
    return None


def summarise(result: dict[str, Any], reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """Step time, data wait, all-reduce latency, utilisation, memory and loss of one canary run."""
    ranks = result["ranks"]
    steps = min(len(r["step_s"]) for r in ranks)
    buckets = [(step, seconds, nbytes) for r in ranks for step, seconds, nbytes in r["buckets"]]
    comm_by_step = _comm_by_step(ranks, steps)
    if reference is None:
        reference = {"source": "idle all-reduce in the same process group", "sizes": result.get("idle_allreduce", [])}
    sizes = _latency_by_size(buckets, reference)
    worst = max((s for s in sizes if s["ratio"] is not None), key=lambda s: s["ratio"], default=None)
    first_losses = ranks[0]["losses"]
    return {
        **_step_times(ranks, steps),
        "bucket_count_per_step": (len(buckets) / (len(ranks) * steps)) if steps else 0,
        "bucket_p50_s": percentile([b[1] for b in buckets], 50),
        "bucket_p99_s": percentile([b[1] for b in buckets], 99),
        "comm_per_step_p50_s": percentile(comm_by_step, 50), "comm_per_step_p99_s": percentile(comm_by_step, 99),
        "latency_by_size": sizes, "latency_reference": reference["source"], "worst_latency": worst,
        "loss_first": first_losses[0] if first_losses else None,
        "loss_last": first_losses[-1] if first_losses else None,
        "non_finite_losses": sum(1 for r in ranks for v in r["losses"] if not math.isfinite(v)),
        "memory": memory_summary([r["memory"] for r in ranks]),
        "gpu_utilization": utilisation_summary(result.get("gpu_utilization")),
    }


def _step_times(ranks: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    # A step of data-parallel training takes as long as its slowest rank.
    slowest = [max(r["step_s"][i] for r in ranks) for i in range(steps)]
    wait_by_step = [max(r["wait_s"][i] for r in ranks) for i in range(steps)]
    wait_share = max(sum(r["wait_s"]) / sum(r["step_s"]) for r in ranks if sum(r["step_s"]) > 0)
    return {"steps": steps, "step_s": slowest, "wait_s": wait_by_step,
            "step_median_s": percentile(slowest, 50), "step_p95_s": percentile(slowest, 95),
            "data_wait_share": wait_share, "data_wait_median_s": percentile(wait_by_step, 50)}


def _comm_by_step(ranks: list[dict[str, Any]], steps: int) -> list[float]:
    """Seconds of all-reduce per step: each rank's buckets summed, the slowest rank's sum."""
    per_step: dict[tuple[int, int], float] = {}
    for r in ranks:
        for step, seconds, _ in r["buckets"]:
            per_step[(r["rank"], step)] = per_step.get((r["rank"], step), 0.0) + seconds
    return [max(v for (rank, s), v in per_step.items() if s == i) for i in range(steps)
            if any(s == i for _, s in per_step)]


def _latency_by_size(buckets: list[tuple[int, float, int]], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """The gradient buckets' all-reduce times by size, p99 against the reference's time at that size."""
    by_size: dict[int, list[float]] = {}
    for _, seconds, nbytes in buckets:
        by_size.setdefault(nbytes, []).append(seconds)
    sizes = []
    for nbytes, values in sorted(by_size.items()):
        expected = interpolate_time(reference["sizes"], nbytes)
        p99 = percentile(values, 99)
        sizes.append({"bytes": nbytes, "count": len(values), "p50_s": percentile(values, 50), "p99_s": p99,
                      "reference_s": expected,
                      "ratio": (p99 / expected) if (p99 is not None and expected) else None})
    return sizes


def memory_summary(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    if not per_rank or per_rank[0].get("kind") != "cuda":
        return {"kind": "host", "peak_rss_bytes": max((m.get("peak_rss_bytes", 0) for m in per_rank), default=0)}
    # The rank closest to running out decides.
    tightest = max(per_rank, key=lambda m: m["peak_reserved_bytes"] / m["capacity_bytes"])
    used = tightest["peak_reserved_bytes"] / tightest["capacity_bytes"]
    return {"kind": "cuda", "peak_reserved_bytes": tightest["peak_reserved_bytes"],
            "capacity_bytes": tightest["capacity_bytes"], "headroom": 1.0 - used}


def utilisation_summary(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """Mean utilisation of each GPU over the timed steps; None when there was no sampling (no GPU)."""
    if data is None:
        return None
    means = {gpu: sum(v) / len(v) for gpu, v in data.get("samples", {}).items() if v}
    if not means:
        return {"error": data.get("error") or "no NVML sample was taken", "per_gpu": {}}
    return {"per_gpu": means, "mean": sum(means.values()) / len(means), "min": min(means.values()),
            "lowest_gpu": min(means, key=lambda g: means[g]), "error": data.get("error")}
