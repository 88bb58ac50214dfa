"""The batch trap: the global batch at the job's size against the one the hyper-parameters were tuned
at, and the learning rate its scaling rule asks for. Pure.

    data-parallel ranks  dp = nodes x gpus_per_node / (tensor_parallel x pipeline_parallel)
    global batch         micro_batch x grad_accum x dp
    growth               k = global batch / tuned_global_batch
    rule                 linear: lr = tuned lr x k, with a warm-up when k > 2 (Goyal et al. 2017,
                         "Accurate, Large Minibatch SGD"); sqrt: lr = tuned lr x sqrt(k), the rule for
                         adaptive optimizers (Adam, AdamW, LAMB: Hoffer et al. 2017, Malladi et al.
                         2022); none: the tuned rate, which holds only for the tuned batch
"""

from __future__ import annotations

import math
from typing import Any

# Optimizers whose step adapts per parameter: their learning rate follows the square-root rule.
ADAPTIVE = ("adam", "adamw", "lamb", "adagrad", "adafactor", "rmsprop", "lion", "nadam", "radam")
LR_TOLERANCE = 0.10  # a rate within 10% of what the rule asks for follows the rule
WARMUP_GROWTH = 2.0  # linear: beyond this growth the rule needs a warm-up (Goyal et al. 2017)
FAIL_GROWTH = 8.0  # beyond this growth, with no warm-up at all, training diverges early or tunes anew


def rule_for(plan: Any) -> tuple[str | None, str]:
    """The learning-rate rule and where it comes from: lr_scaling, else the optimizer's kind."""
    if plan.lr_scaling:
        return plan.lr_scaling, f"lr_scaling = {plan.lr_scaling}"
    if plan.optimizer:
        name = plan.optimizer.lower()
        if name in ADAPTIVE:
            return "sqrt", f"{plan.optimizer} is adaptive: square-root rule"
        if name in ("sgd", "momentum", "nesterov", "lars"):
            return "linear", f"{plan.optimizer}: linear rule"
    return None, "neither lr_scaling nor a known optimizer is in [job]"


def scaled_rate(tuned: float, growth: float, rule: str) -> float:
    return tuned * growth if rule == "linear" else tuned * math.sqrt(growth) if rule == "sqrt" else tuned


def keep_tuned(tuned_global: int, dp: int, micro: int, accum: int) -> tuple[int, int] | None:
    """(micro_batch, grad_accum) that keep the tuned global batch at dp ranks; None when dp ranks
    cannot (the tuned batch is not a whole number of samples per rank)."""
    if tuned_global % dp:
        return None
    per_rank = tuned_global // dp
    if per_rank % micro == 0:
        return micro, per_rank // micro
    for a in range(min(accum, per_rank), 0, -1):
        if per_rank % a == 0 and per_rank // a <= micro:
            return per_rank // a, a
    return per_rank, 1


def batch_plan(plan: Any, nodes: int, per_node: int) -> dict[str, Any]:
    """The batch figures of the plan at its size; `missing` names what keeps them from being judged."""
    tp, pp, accum = plan.tensor_parallel or 1, plan.pipeline_parallel or 1, plan.grad_accum or 1
    gpus = nodes * per_node
    out: dict[str, Any] = {"gpus": gpus, "tp": tp, "pp": pp, "grad_accum": accum, "missing": []}
    if gpus % (tp * pp):
        out["shape_error"] = (f"{gpus} GPUs ({nodes} nodes x {per_node}) do not divide into tensor_parallel x "
                              f"pipeline_parallel = {tp * pp}")
        return out
    dp = out["dp"] = gpus // (tp * pp)
    if not plan.micro_batch:
        out["missing"].append("micro_batch")
        return out
    out["global"] = plan.micro_batch * accum * dp
    tuned = plan.tuned_global_batch
    if tuned is None and plan.tuned_at_gpus:
        if plan.tuned_at_gpus % (tp * pp) == 0:
            tuned = plan.micro_batch * accum * plan.tuned_at_gpus // (tp * pp)
            out["tuned_basis"] = (f"the same micro_batch {plan.micro_batch} and grad_accum {accum} on the "
                                  f"{plan.tuned_at_gpus} GPUs it was tuned at")
    if tuned is None:
        out["missing"].append("tuned_global_batch (or tuned_at_gpus)")
        return out
    out["tuned"] = tuned
    out["growth"] = out["global"] / tuned
    out["keep"] = keep_tuned(tuned, dp, plan.micro_batch, accum)
    return out


def judge_rate(plan: Any, figures: dict[str, Any]) -> dict[str, Any]:
    """Whether the learning rate and warm-up follow the rule at this growth; what the rule asks for."""
    k = figures["growth"]
    rule, basis = rule_for(plan)
    out: dict[str, Any] = {"rule": rule, "rule_basis": basis, "warmup": plan.warmup_steps or 0}
    out["needs_warmup"] = k > WARMUP_GROWTH and rule in ("linear", "sqrt", None)
    if rule is None or plan.tuned_learning_rate is None:
        out["asked"] = None
        out["follows"] = False
        return out
    asked = out["asked"] = scaled_rate(plan.tuned_learning_rate, k, rule)
    out["follows"] = (rule != "none" and plan.learning_rate is not None
                      and abs(plan.learning_rate / asked - 1.0) <= LR_TOLERANCE)
    return out


def trap_level(figures: dict[str, Any], rate: dict[str, Any]) -> str | None:
    """None (no trap), "WARN" or "FAIL" for a growing batch."""
    k = figures["growth"]
    if k <= 1.0 + 1e-9:
        return None
    warmed = rate["warmup"] > 0
    if rate["follows"] and (warmed or not rate["needs_warmup"]):
        return None
    return "FAIL" if k > FAIL_GROWTH and not warmed else "WARN"


def trap_sentence(plan: Any, figures: dict[str, Any], rate: dict[str, Any]) -> str:
    k = figures["growth"]
    text = (f"the global batch grows {k:.3g}x, from {figures['tuned']:,} (tuned) to {figures['global']:,} "
            f"({plan.micro_batch} x {figures['grad_accum']} accumulation x {figures['dp']} data-parallel ranks)")
    if rate["rule"] is None:
        return text + f", and no learning-rate rule is stated ({rate['rule_basis']})"
    if rate["asked"] is None:
        return text + "; tuned_learning_rate is not in [job], so the rate cannot be held to its rule"
    have = "not in [job]" if plan.learning_rate is None else f"{plan.learning_rate:g}"
    text += f"; the learning rate is {have}, the {rate['rule']} rule asks for {rate['asked']:.3g}"
    if rate["needs_warmup"] and not rate["warmup"]:
        text += ", with a warm-up, and warmup_steps is 0 or unset"
    return text


def trap_fix(plan: Any, figures: dict[str, Any], rate: dict[str, Any]) -> str:
    """The fix of this occurrence: the rate the rule asks for, the warm-up, or the batch that keeps the tuned one."""
    parts = []
    if rate["rule"] == "none":
        parts.append("lr_scaling = none holds the tuned rate, which is right only at the tuned batch: scale it by "
                     'the linear (SGD) or sqrt (Adam, AdamW) rule')
    elif rate["asked"] is not None and not rate["follows"]:
        parts.append(f"set learning_rate = {rate['asked']:.3g} ({rate['rule']} rule: {plan.tuned_learning_rate:g} x "
                     + (f"{figures['growth']:.3g}" if rate["rule"] == "linear" else f"sqrt({figures['growth']:.3g})")
                     + ")")
    elif rate["rule"] is None:
        parts.append('state the rule: lr_scaling = "linear" (SGD) or "sqrt" (Adam, AdamW) in [job], with '
                     "tuned_learning_rate")
    if rate["needs_warmup"] and not rate["warmup"]:
        parts.append("warm the rate up from the tuned one over the first epochs (Goyal et al.: 5 epochs; "
                     "warmup_steps in [job] and in the training script)")
    keep = figures.get("keep")
    if keep:
        parts.append(f"or keep the tuned global batch of {figures['tuned']:,}: micro_batch = {keep[0]}, "
                     f"grad_accum = {keep[1]} at {figures['dp']} data-parallel ranks")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."
