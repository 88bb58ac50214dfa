"""The coordinator's side of the GPU probe: starting preflight.workers.gpu_probe for one framework
and reading what it wrote."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from preflight.core.check import CannotMeasure
from preflight.core.jsonlines import loads
from preflight.transport.module_argv import isolated_module_argv


def framework_installed(framework: str) -> bool:
    """Whether the module can be found, without importing it (tensorflow's import takes seconds),
    and without the working directory or a bare folder named like it (preflight.machine.frameworks)."""
    from preflight.machine.frameworks import installed

    return installed(framework)


# The least time a framework probe is started with: importing torch and starting CUDA take seconds
# (5-10 s on an 8-GPU node). Given less, its "did not finish" would say nothing about the GPUs, and a
# check would judge it as a hang: the probe is not started and the check is ERROR instead.
PROBE_FLOOR_S = 5.0


def run_probe(ctx: Any, framework: str, options: list[str], timeout_s: float, *,
              hang: bool = False) -> dict[str, Any]:
    """Run this module for one framework through ctx.run (kept as evidence); return its facts.

    A probe that crashes, hangs or writes nothing is returned as facts with an "error", so the
    check can judge it (a GPU that hangs a product is a finding, not a failure to measure). A probe
    that would get less than PROBE_FLOOR_S is not started: CannotMeasure (the check is ERROR).
    """
    if not timeout_s >= PROBE_FLOOR_S:
        raise CannotMeasure(f"the {framework} probe would get {max(0.0, timeout_s):.2g} s, less than the "
                            f"{PROBE_FLOOR_S:g} s it needs to import {framework} and start CUDA: give the check "
                            "more time (its timeout, probe_timeout_s, or healthcheck --budget)")
    # Absolute: the probe runs in the scratch directory, and --out may have been given relative.
    scratch = Path(ctx.scratch_dir).resolve()
    output = scratch / f"gpu_probe_{framework}_{os.getpid()}.json"
    output.unlink(missing_ok=True)
    argv = isolated_module_argv("preflight.workers.gpu_probe", framework, "--output", str(output), *options)
    if hang:  # tests only (the caller's preflight.engine.faults switch): a probe that never ends
        argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
    # Keep tensorflow's start-up chatter out of the evidence, and let it find no TPU libraries.
    env = {"TF_CPP_MIN_LOG_LEVEL": "2"} if framework == "tensorflow" else None
    try:
        # Run from the check's own scratch directory: the directory preflight was started in may hold a
        # folder named like a framework, which must not stand in for the installed one.
        proc = ctx.run(argv, timeout=max(0.1, timeout_s), env=env, cwd=str(scratch))
    except CannotMeasure as exc:
        return {"framework": framework, "importable": None, "error": f"probe did not finish: {exc}"}
    if not output.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return {"framework": framework, "importable": None,
                "error": f"probe exited with status {proc.returncode} and wrote nothing: {' | '.join(tail)}"}
    try:
        return loads(output.read_text(encoding="utf-8"))
    finally:
        output.unlink(missing_ok=True)
