"""The kill-and-resume test: a short training run (preflight.workers.checkpoint_train) is SIGKILLed
between two checkpoints, a new process resumes from the newest one, and its final weights must
equal, bit for bit, those of a run that was never interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from preflight.engine.context import NodeContext
from preflight.launch.ranks import worker_argv
from preflight_checks.checkpoint.state import compare_states, flatten, is_tensor
from preflight.engine.faults import fault


def _deterministic_env() -> dict[str, str]:
    # cuBLAS is only deterministic with a fixed workspace, and it must be set before CUDA starts.
    return {"CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
            "PYTHONUNBUFFERED": "1"}


def _kill_when_holding(ctx: NodeContext, argv: list[str], timeout: float) -> dict[str, Any]:
    """Start the training run, SIGKILL it once it says it is holding, and return what it printed."""
    run = ctx.spawn(argv, env=_deterministic_env())
    try:
        reached = run.wait_until(lambda: any(line.startswith("holding ") for line in run.lines), timeout)
    finally:
        run.stop(hard=True)  # a crash, as a lost node or an OOM kill would end it
    output = run.lines + run.stderr_lines
    ctx.record(argv, run.returncode, "\n".join(output) + "\n[SIGKILL sent by the check]", run.duration_s)
    return {"reached_hold": reached, "returncode": run.returncode, "output": output, "pid": run.pid}


def _last_value(lines: list[str], prefix: str) -> int | None:
    found = None
    for line in lines:
        if line.startswith(prefix):
            try:
                found = int(line.split()[1].split("=", 1)[1])
            except (IndexError, ValueError):
                pass
    return found


def resume_test(ctx: NodeContext, workdir: Path, params: Any, device: str) -> dict[str, Any]:
    import torch

    base = ["--steps", str(params.resume_steps), "--save-every", str(params.resume_save_every),
            "--seed", str(params.seed), "--device", device]
    # Tests only (preflight.engine.faults): the checkpoints leave out random-number states, as a careless
    # training script does; the resume test must then FAIL.
    drop_rng_state = bool(fault("checkpoint.roundtrip", "drop_rng_state", False))
    if drop_rng_state:
        base.append("--drop-rng-state")
    facts: dict[str, Any] = {"steps": params.resume_steps, "save_every": params.resume_save_every,
                             "kill_after_step": params.resume_kill_after_step, "device": device,
                             "drop_rng_state": drop_rng_state}
    module = "checkpoint_train"
    budget = max(10.0, ctx.time_left() / 4)

    reference = workdir / "uninterrupted-final.pt"
    proc = ctx.run(worker_argv(module, "--dir", str(workdir / "uninterrupted"), "--final", str(reference), *base),
                   timeout=budget, env=_deterministic_env())
    if proc.returncode != 0:
        return {**facts, "error": f"the uninterrupted training run exited with {proc.returncode}",
                "output_tail": (proc.stdout + proc.stderr)[-2000:]}

    interrupted_dir = workdir / "interrupted"
    killed = _kill_when_holding(
        ctx, worker_argv(module, "--dir", str(interrupted_dir), "--hold-at-step",
                          str(params.resume_kill_after_step), *base), timeout=budget)
    facts["killed_returncode"] = killed["returncode"]
    facts["killed_pid"] = killed["pid"]
    facts["last_checkpoint_before_kill"] = _last_value(killed["output"], "saved ")
    if not killed["reached_hold"]:
        return {**facts, "error": "the training run to be killed never reached step "
                                  f"{params.resume_kill_after_step} (exit status {killed['returncode']})",
                "output_tail": "\n".join(killed["output"])[-2000:]}

    resumed = workdir / "resumed-final.pt"
    proc = ctx.run(worker_argv(module, "--dir", str(interrupted_dir), "--resume", "--final", str(resumed), *base),
                   timeout=budget, env=_deterministic_env())
    facts["resumed_from_step"] = _last_value(proc.stdout.splitlines(), "resumed ")
    if proc.returncode != 0:
        return {**facts, "error": f"the resumed training run exited with {proc.returncode}",
                "output_tail": (proc.stdout + proc.stderr)[-2000:]}

    expected = torch.load(reference, map_location="cpu", weights_only=True)
    actual = torch.load(resumed, map_location="cpu", weights_only=True)
    leaves, mismatches = compare_states(expected["model"], actual["model"])
    _, optimizer_mismatches = compare_states(expected["optimizer"], actual["optimizer"])
    facts.update({
        "parameters_compared": sum(1 for v in flatten(expected["model"]).values() if is_tensor(v)),
        "parameter_mismatches": mismatches,
        "optimizer_mismatches": optimizer_mismatches,
        "max_abs_difference": max(
            (float((expected["model"][k].double() - actual["model"][k].double()).abs().max())
             for k in expected["model"] if k in actual["model"]
             and expected["model"][k].shape == actual["model"][k].shape), default=None),
        "exact": not mismatches and not optimizer_mismatches,
    })
    return facts
