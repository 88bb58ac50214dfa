"""canary.training for real on this CPU: `preflight run --checks canary.training`, on the reference
model and on the example entry (examples/canary_entry.py, a DataLoader with worker processes).

The box has two shared cores, so what is asserted is that every figure is measured and consistent,
never a particular value.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[2]


def run_canary(tmp_path: Path, *settings: str, env: dict[str, str] | None = None) -> dict:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "preflight", "run", "--checks", "canary.training", "--out", str(out),
            "--format", "json", "--set", "canary.training.steps=12", "--set", "canary.training.warmup=3", *settings]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, **(env or {})})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report = json.loads((out / "results.json").read_text())
    [result] = [r for r in report["results"] if r["check_id"] == "canary.training"]
    return result


def figures(result: dict) -> dict:
    return {m["name"]: m for m in result["measurements"]}


def test_reference_model_is_measured_with_latency_and_data_wait(tmp_path):
    result = run_canary(tmp_path)
    assert result["status"] in ("PASS", "WARN"), result["summary"]
    found = figures(result)
    for name in ("step time median", "step time p95", "data wait share of step time",
                 "all-reduce latency per bucket p50", "all-reduce latency per bucket p99"):
        assert isinstance(found[name]["value"], (int, float)) and found[name]["value"] >= 0, name
    assert found["step time p95"]["value"] >= found["step time median"]["value"]
    assert found["all-reduce latency per bucket p99"]["value"] >= found["all-reduce latency per bucket p50"]["value"] > 0
    assert 0 <= found["data wait share of step time"]["value"] < 100
    assert found["GPU utilisation"]["value"] == "not measured: no GPU"
    steps = [m for m in result["measurements"] if m["figure"] == "step" and m["series"] == "step time"]
    assert len(steps) == 12
    ranks = result["facts"]["run"]["result"]["ranks"]
    assert len(ranks) == 2 and all(len(r["step_s"]) == 12 for r in ranks)
    # every step all-reduced at least one bucket on every rank, each timed by the hook
    assert all({b[0] for b in r["buckets"] if b[0] >= 0} == set(range(12)) for r in ranks)
    if importlib.util.find_spec("tensorflow") is not None:
        tf = result["facts"]["tensorflow"]
        assert tf["ok"], tf
        assert tf["strategy"] == "MirroredStrategy" and len(tf["step_s"]) == len(tf["wait_s"]) == 12
        assert any(name.startswith("tensorflow MirroredStrategy") for name in found)


def test_example_entry_trains_the_teams_model_through_its_dataloader(tmp_path):
    result = run_canary(tmp_path, "--set", "canary.training.entry=canary_entry:make_training",
                        "--set", "canary.training.tensorflow=false",
                        env={"PYTHONPATH": str(ROOT / "examples")})
    assert result["status"] in ("PASS", "WARN"), result["summary"]
    run = result["facts"]["run"]["result"]
    assert run["entry"] == "canary_entry:make_training"
    assert figures(result)["non-finite losses"]["value"] == 0
    assert figures(result)["data wait share of step time"]["value"] > 0
