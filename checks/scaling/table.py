"""Device counts and throughputs turned into a scaling table, and how a device count is written. Pure."""

from __future__ import annotations

from typing import Any


def count_text(n: int, device_kind: str) -> str:
    """'1 GPU', '8 GPUs', '1 CPU process', '2 CPU processes'."""
    if device_kind == "cuda":
        return f"{n} GPU" + ("" if n == 1 else "s")
    return f"{n} CPU process" + ("" if n == 1 else "es")


def replica_text(n: int, device_kind: str) -> str:
    """tensorflow's replicas live in one process: on CPU they are logical devices, not processes."""
    if device_kind == "cuda":
        return count_text(n, device_kind)
    return f"{n} logical CPU device" + ("" if n == 1 else "s")


def scaling_table(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Efficiency, effective devices and the step split for measured points. Pure.

    Each point has devices, samples_per_s, and optionally step_s and compute_s.
    """
    ordered = sorted(points, key=lambda p: p["devices"])
    base = next((p for p in ordered if p["devices"] == 1), None)
    table = []
    for point in ordered:
        n = point["devices"]
        row = {"devices": n, "samples_per_s": point["samples_per_s"]}
        for key in ("step_s", "compute_s"):
            if point.get(key) is not None:
                row[key] = point[key]
        if row.get("step_s") is not None and row.get("compute_s") is not None:
            row["comm_s"] = row["step_s"] - row["compute_s"]
        if base:
            row["efficiency"] = point["samples_per_s"] / (n * base["samples_per_s"])
            row["effective_devices"] = n * row["efficiency"]
        table.append(row)
    return table


def points_of(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    points = []
    for run in runs:
        if run.get("ok") and run.get("result"):
            result = run["result"]
            points.append({"devices": run["devices"], "samples_per_s": result["samples_per_s"],
                           "step_s": result.get("step_s"), "compute_s": result.get("compute_s")})
    return points


def step_text(step_s: float, compute_s: float) -> str:
    """'step 55.3 ms = 38.5 ms compute + 16.7 ms exposed communication'. Compute is timed in its own
    steps (under no_sync), so it can come out longer than the whole step by noise: then the parts are
    not shown as adding up to more than the whole."""
    if compute_s > step_s:
        return (f"step {step_s * 1e3:.1f} ms; compute alone, timed in separate steps, {compute_s * 1e3:.1f} ms: "
                "no exposed communication measurable (the difference is noise)")
    return (f"step {step_s * 1e3:.1f} ms = {compute_s * 1e3:.1f} ms compute + {(step_s - compute_s) * 1e3:.1f} ms "
            "exposed communication")


# Efficiency this far above 1 is not a faster fabric: the baseline ran slower per device than the whole.
SUPERLINEAR = 1.05


def superlinear_note(efficiency: float, shared_cores: bool) -> str:
    """Why an efficiency above 1 is not to be believed, or "" when it is not above SUPERLINEAR."""
    if efficiency <= SUPERLINEAR:
        return ""
    cause = ("the processes share this node's CPU cores, so the one-process baseline and the others ran under "
             "different contention" if shared_cores else
             "the baseline ran slower per device than the whole job did (other load while it was measured, or a "
             "slower baseline device)")
    return f"efficiency {efficiency:.2f} is above 1: {cause}; read it as no scaling loss measured, not as a gain"
