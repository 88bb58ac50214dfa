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
