"""How often to checkpoint: the Young/Daly interval and what a planned job loses to failures. Pure.

Young (1974) and Daly (2006): with a checkpoint that takes `save_s` to write and a mean time between
failures of the whole job `mtbf_s`, the interval between checkpoints that loses the least time is
about sqrt(2 x save_s x mtbf_s) - save_s (Daly's first-order form, for save_s < 2 x mtbf_s; beyond
that, checkpoint every mtbf_s). Per failure the job redoes on average half an interval and waits for
the restart; between failures it pays one save per interval.

The failure rate, when the fleet's own is not known, is Meta's for Llama 3 405B pre-training ("The
Llama 3 Herd of Models", 2024, section 3.3.4): 419 unexpected interruptions in a 54-day snapshot on
16,384 H100 GPUs, that is 2,048 nodes of 8 GPUs.
"""

from __future__ import annotations

import math
from typing import Any

LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_NODES = 419, 54, 16384 // 8
DEFAULT_FAILURES_PER_NODE_DAY = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * LLAMA3_NODES)
DEFAULT_SOURCE = ("Meta, The Llama 3 Herd of Models (2024): 419 unexpected interruptions in 54 days on 16,384 "
                  "GPUs (2,048 nodes of 8)")
DAY_S = 86400.0


def plan(*, save_s: float, restart_s: float, failures_per_node_day: float, nodes: int, days: float) -> dict[str, Any]:
    """The checkpoint interval and the expected losses of a job of `nodes` nodes running `days` days."""
    rate_s = failures_per_node_day * nodes / DAY_S  # failures per second of the whole job
    mtbf_s = 1.0 / rate_s if rate_s > 0 else math.inf
    save_s = max(save_s, 1e-3)
    if math.isinf(mtbf_s):
        interval_s = math.inf
    elif save_s < 2 * mtbf_s:
        interval_s = math.sqrt(2 * save_s * mtbf_s) - save_s
    else:
        interval_s = mtbf_s
    interval_s = max(interval_s, save_s)
    interruptions = rate_s * days * DAY_S
    saving = save_s / (interval_s + save_s) if math.isfinite(interval_s) else 0.0
    redo = (interval_s / 2 + restart_s) / mtbf_s if math.isfinite(mtbf_s) else 0.0
    return {
        "mtbf_h": mtbf_s / 3600 if math.isfinite(mtbf_s) else None,
        "interval_min": interval_s / 60 if math.isfinite(interval_s) else None,
        "interruptions": interruptions,
        "lost_fraction": min(1.0, saving + redo),
        "save_s": save_s,
        "restart_s": restart_s,
        "nodes": nodes,
        "days": days,
        "failures_per_node_day": failures_per_node_day,
    }


def sentence(p: dict[str, Any]) -> str:
    """The plan in one sentence a product manager reads."""
    days = f"{p['days']:g}-day job on {p['nodes']} node{'s' if p['nodes'] != 1 else ''}"
    if p["interval_min"] is None:
        return f"a {days}: no failures expected at the stated rate, so checkpoints only guard against the unexpected"
    every = f"{p['interval_min']:.0f} min" if p["interval_min"] >= 1 else f"{p['interval_min'] * 60:.0f} s"
    count = p["interruptions"]
    count_text = f"{count:.0f}" if count >= 10 else f"{count:.1f}"
    lost = 100 * p["lost_fraction"]
    lost_text = f"{lost:.1f}" if lost >= 1 else f"{lost:.2f}"
    return (f"a {days}: about {count_text} interruption{'' if count_text == '1' else 's'} expected; checkpoint "
            f"every {every}; about {lost_text}% of the GPU time goes to saving and redoing work")
