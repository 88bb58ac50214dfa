"""The tensorflow round trip: tf.train.Checkpoint with a CheckpointManager, restored with
assert_consumed(), in its own process (preflight.workers.checkpoint_tf).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflight.core.check import CannotMeasure
from preflight.engine.context import NodeContext
from preflight.launch.ranks import worker_argv
from preflight.core.jsonlines import last_json
from preflight_checks.checkpoint.storage import GB


def tensorflow_test(ctx: NodeContext, workdir: Path, params: Any) -> dict[str, Any]:
    argv = worker_argv("checkpoint_tf", "--dir", str(workdir / "tensorflow"),
                        "--size-mb", str(tf_size_mb(params)), "--seed", str(params.seed))
    try:
        proc = ctx.run(argv, timeout=max(30.0, ctx.time_left() / 2),
                       env={"TF_CPP_MIN_LOG_LEVEL": "2", "TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    except CannotMeasure as exc:
        return {"error": str(exc), "timed_out": True}
    result = last_json(proc.stdout)
    if result is None:
        return {"error": f"the tensorflow worker exited with {proc.returncode} without a result"
                         + (" (killed by a signal)" if proc.returncode < 0 else ""),
                "output_tail": proc.stderr[-2000:]}
    if "write_s" in result and result["write_s"] > 0:
        result["write_gbps"] = result["bytes_written"] / result["write_s"] / GB
        result["read_gbps"] = result["bytes_written"] / result["read_s"] / GB
    return result


def tf_size_mb(params: Any) -> float:
    return min(params.tf_size_mb, params.size_mb)
