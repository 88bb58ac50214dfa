"""scaling.multi_node's figures: efficiency from the two runs' throughput, the runs' measurements, and
whether the all-node run met its floor, first and when measured again (preflight.launch.recheck). Pure."""

from __future__ import annotations

from typing import Any

from preflight.core.check import measure
from preflight.core.model import FIGURE_SCALING, Measurement
from preflight.launch.nodes import processes_text


def efficiency(one: float, all_nodes: float, nodes: int) -> dict[str, float]:
    """E and effective nodes from the two throughputs. Pure."""
    value = all_nodes / (nodes * one)
    return {"efficiency": value, "effective_nodes": nodes * value}


def run_measurements(one: dict[str, Any], everyone: dict[str, Any], per_node: int, kind: str | None,
                     params: Any) -> list[Measurement]:
    """Throughput, step, compute and exposed communication of the two runs, then the efficiency. Pure."""
    n = len(everyone["nodes"])
    per_node_text = processes_text(per_node, kind)
    measurements = []
    for label, run, devices in ((f"1 node x {per_node_text}", one, per_node),
                                (f"{n} nodes x {per_node_text}", everyone, n * per_node)):
        result = run["result"]
        batch = result.get("batch_per_device", 0)
        measurements.append(measure(f"throughput on {label}", round(result["samples_per_s"], 1), "samples/s",
                                    samples=[round(devices * batch / t, 1) for t in result.get("step_samples_s", []) if t > 0],
                                    figure=FIGURE_SCALING, series="torch", at=len(run["nodes"]), better="higher"))
        measurements.append(measure(f"step time on {label}", round(result["step_s"] * 1e3, 2), "ms",
                                    samples=[round(t * 1e3, 2) for t in result.get("step_samples_s", [])]))
        measurements.append(measure(f"compute (no_sync) on {label}", round(result["compute_s"] * 1e3, 2), "ms",
                                    samples=[round(t * 1e3, 2) for t in result.get("compute_samples_s", [])]))
        measurements.append(measure(f"exposed communication on {label}",
                                    round((result["step_s"] - result["compute_s"]) * 1e3, 2), "ms"))
    figures = efficiency(one["result"]["samples_per_s"], everyone["result"]["samples_per_s"], n)
    measurements.append(measure(f"efficiency on {n} nodes", round(figures["efficiency"], 3), "",
                                at_least=params.min_efficiency, param="min_efficiency"))
    measurements.append(measure(f"effective nodes of {n}", round(figures["effective_nodes"], 2), ""))
    return measurements


# -- the all-node run measured again (preflight.launch.recheck) ------------------------------------------
# Its floor here is warn_efficiency, below which the check FAILs: a WARN is GO, and is never measured again.

SHORTFALL_KINDS = ("efficiency",)


def _run_efficiency(one: dict[str, Any], everyone: dict[str, Any]) -> float | None:
    if not (one.get("ok") and everyone.get("ok")):
        return None
    return efficiency(one["result"]["samples_per_s"], everyone["result"]["samples_per_s"],
                      len(everyone["nodes"]))["efficiency"]


def below_floor(one: dict[str, Any], everyone: dict[str, Any], params: Any) -> bool:
    """Both runs worked and the all-node one scaled below warn_efficiency (a FAIL). Pure."""
    e = _run_efficiency(one, everyone)
    return e is not None and e < params.warn_efficiency


def met_floor(one: dict[str, Any], recheck: dict[str, Any], params: Any) -> bool | None:
    """An all-node run measured again, against the same one-node run: True when it scaled at
    warn_efficiency or above, False when not, None when it did not run. Pure."""
    e = _run_efficiency(one, recheck)
    return None if e is None else e >= params.warn_efficiency


def far_below(one: dict[str, Any], run: dict[str, Any], params: Any, share: float) -> bool:
    """An all-node run that scaled under `share` of warn_efficiency. Pure."""
    e = _run_efficiency(one, run)
    return e is not None and e < share * params.warn_efficiency


def recheck_text(one: dict[str, Any], rechecks: list[dict[str, Any]]) -> str:
    """'then efficiency 0.93': the later all-node runs' efficiency, in order. Pure."""
    seen = [f"{e:.2f}" for e in (_run_efficiency(one, r) for r in rechecks if "not_run" not in r) if e is not None]
    return f"then efficiency {', '.join(seen)}" if seen else ""
