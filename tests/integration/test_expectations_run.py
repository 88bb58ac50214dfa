"""A real run on this CPU machine under a GPU profile: a check that measured gloo on CPU processes
cannot make it GO, and neither can leaving the GPU check out."""

from __future__ import annotations

import json

import pytest

from preflight.workers.gpu_nvml import nvml_facts
from tests.conftest import run_preflight

pytestmark = pytest.mark.nogpu


@pytest.mark.skipif(nvml_facts(with_gpus=False).get("available", False),
                    reason="an NVIDIA driver is present on this machine")
def test_a_gpu_profile_with_only_a_collective_on_cpu_is_no_go(tmp_path):
    run = run_preflight("run", "--profile", "h100-8x", "--checks", "collectives.local", "--format", "json",
                        "--set", "collectives.local.iters=2", "--set", "collectives.local.warmup=1",
                        "--out", "out", cwd=tmp_path, timeout=240)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["verdict"]["verdict"] == "NO-GO"
    collective = next(r for r in data["results"] if r["check_id"] == "collectives.local")
    assert collective["status"] == "FAIL"
    assert "collectives.local.gpus-expected" in {f["id"] for f in collective["findings"]}
    assert {(b["check_id"], b["status"]) for b in data["verdict"]["blocking"]} >= {
        ("collectives.local", "FAIL"), ("preflight.expect", "FAIL")}
