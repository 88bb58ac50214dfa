"""What the GPUs consume, for dataloader.throughput: in the loader's own samples per second.

A demand is stated (dataloader.required_samples_per_s for the node, or _per_gpu times the GPUs) or
measured by scaling.multi_gpu on the team's own model (scaling.workload). scaling.multi_gpu's
reference model is never demand: its sample is one 4096-float vector, a loader's is an image or a
document, and on a healthy 8x H100 node its rate (about two million samples/s) would fail every loader.
"""

from __future__ import annotations

from typing import Any

SCALING_CHECK = "scaling.multi_gpu"


def scaling_facts(earlier: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What demand_from needs of scaling.multi_gpu's facts, kept in this check's facts for re-judging."""
    scaling = earlier.get(SCALING_CHECK)
    if not scaling:
        return None
    return {"training_samples_per_s": scaling.get("training_samples_per_s"),
            "training_devices": scaling.get("training_devices"), "device_kind": scaling.get("device_kind"),
            "gpu_count": scaling.get("gpu_count"), "workload": (scaling.get("model") or {}).get("workload")}


def demand_from(scaling: dict[str, Any] | None, params: Any, gpus: int | None = None) -> dict[str, Any] | None:
    """What the GPUs consume (the loader's samples/s, whole node) and where that figure comes from.

    None when nothing states it. {"samples_per_s": None, "ignored": why} when a figure exists but does
    not describe the loader's samples or a GPU's appetite.
    """
    if params.required_samples_per_s:
        return {"samples_per_s": float(params.required_samples_per_s), "source": "dataloader.required_samples_per_s"}
    if params.required_samples_per_s_per_gpu:
        if not gpus:
            return {"samples_per_s": None, "source": "dataloader.required_samples_per_s_per_gpu",
                    "ignored": "dataloader.required_samples_per_s_per_gpu is set but the node's GPU count is unknown"}
        return {"samples_per_s": float(params.required_samples_per_s_per_gpu) * gpus,
                "source": f"dataloader.required_samples_per_s_per_gpu x {gpus} GPUs"}
    scaling = scaling or {}
    rate = scaling.get("training_samples_per_s")
    if not isinstance(rate, (int, float)) or rate <= 0:
        return None
    if scaling.get("device_kind") == "cpu":
        # CPU processes standing in for GPUs share the cores the loader needs, and feed no GPU.
        return {"samples_per_s": None, "source": SCALING_CHECK,
                "ignored": f"{SCALING_CHECK} timed CPU processes, not GPUs ({rate:.0f} samples/s of its reference "
                           "model), so there is no GPU demand to compare"}
    if not scaling.get("workload"):
        return {"samples_per_s": None, "source": SCALING_CHECK,
                "ignored": f"{SCALING_CHECK} timed its reference model ({rate:.0f} samples/s of one 4096-float vector "
                           "each), not the team's model on the team's samples: set dataloader.required_samples_per_s "
                           "(or _per_gpu), or scaling.workload"}
    devices = scaling.get("training_devices")
    on = f" on {devices} devices" if devices else ""
    return {"samples_per_s": float(rate),
            "source": f"{SCALING_CHECK} ({scaling['workload']}, training throughput measured on this node{on})"}



def facts_demand(facts: dict[str, Any], params: Any, gpus_per_node: int | None) -> dict[str, Any] | None:
    """Demand from today's thresholds and the facts; facts of older runs carry only their "demand"."""
    if "scaling" not in facts and "demand" in facts and not (params.required_samples_per_s
                                                           or params.required_samples_per_s_per_gpu):
        old = facts.get("demand")
        if old and str(old.get("source", "")).startswith(SCALING_CHECK):
            return {"samples_per_s": None, "source": SCALING_CHECK,
                    "ignored": f"{SCALING_CHECK}'s reference-model rate is not the loader's samples/s"}
        return old
    return demand_from(facts.get("scaling"), params, facts.get("gpu_count") or gpus_per_node)
