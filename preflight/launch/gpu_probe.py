"""The coordinator's side of the GPU probe: starting preflight.workers.gpu_probe for one framework
and reading what it wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from preflight.core.check import CannotMeasure
from preflight.transport.process import isolated_module_argv


def framework_installed(framework: str) -> bool:
    """Whether the module can be found, without importing it (tensorflow's import takes seconds),
    and without the working directory or a bare folder named like it (preflight.machine.frameworks)."""
    from preflight.machine.frameworks import installed

    return installed(framework)


def run_probe(ctx: Any, framework: str, options: list[str], timeout_s: float) -> dict[str, Any]:
    """Run this module for one framework through ctx.run (kept as evidence); return its facts.

    A probe that crashes, hangs or writes nothing is returned as facts with an "error", so the
    check can judge it (a GPU that hangs a product is a finding, not a failure to measure).
    """
    # Absolute: the probe runs in the scratch directory, and --out may have been given relative.
    scratch = Path(ctx.scratch_dir).resolve()
    output = scratch / f"gpu_probe_{framework}_{os.getpid()}.json"
    output.unlink(missing_ok=True)
    argv = isolated_module_argv("preflight.workers.gpu_probe", framework, "--output", str(output), *options)
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
        return json.loads(output.read_text(encoding="utf-8"))
    finally:
        output.unlink(missing_ok=True)
