"""Every GPU-path fixture says where it comes from and has the units and shapes the real APIs give.

Built fixtures stand in for hardware nobody recorded on; a wrong unit or an impossible figure in one
would make the judging tests pass for the wrong reason. (NVML shapes: test_gpu_visibility_paths.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight_checks.collectives.nccl_tests import row_at

DATA = Path(__file__).parent.parent / "data"
DIRS = ["gpu_visibility", "collectives", "dataloader", "scaling", "checkpoint"]
FILES = sorted(p for d in DIRS for p in (DATA / d).glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_says_whether_it_was_recorded_or_built(path):
    source = load(path).get("_source", "").lower()
    assert source, f"{path.name} has no _source"
    assert "recorded" in source or "built" in source, source[:120]
    if "_built" in path.name:
        assert "built" in source and "not measured" in source or "not recorded" in source


COLLECTIVES = sorted((DATA / "collectives").glob("*.json"))


@pytest.mark.parametrize("path", [p for p in COLLECTIVES if "runs" in load(p)], ids=lambda p: p.name)
def test_all_reduce_figures_have_nccl_tests_units(path):
    facts = load(path)
    for run in facts["runs"]:
        if not run.get("ok"):
            continue
        result, n = run["result"], run["world_size"]
        spreads = []
        for entry in result["sizes"]:
            assert isinstance(entry["bytes"], int) and entry["bytes"] % 4 == 0 or entry["bytes"] < 4
            t = entry["time_s"]
            assert 1e-6 < t < 10, (path.name, entry["bytes"], t)  # seconds, not us or ms
            assert entry["algbw_gbps"] == pytest.approx(entry["bytes"] / t / 1e9)
            assert entry["busbw_gbps"] == pytest.approx(entry["algbw_gbps"] * 2 * (n - 1) / n)
            assert len(entry["known_sum_wrong_by_rank"]) == n
            samples = entry["time_samples_s"]
            spreads.append(round((max(samples) - min(samples)) / t, 4))
            if run["device"] == "cuda":
                # GPU figures come from back-to-back operations between CUDA events, as nccl-tests times them.
                assert result["timing"] == "cuda_events" and entry["ops_per_sample"] > 1
                assert t > 5e-6  # no all-reduce across 8 GPUs finishes in under 5 us
        if len(spreads) > 2:
            assert len(set(spreads)) > 1, f"{path.name}: every size has the same spread {spreads[0]}"
    tests = facts.get("nccl_tests")
    if tests and tests.get("rows"):
        nccl = next(r["result"] for r in facts["runs"] if r["backend"] == "nccl")
        for entry in nccl["sizes"]:
            row = row_at(tests, entry["bytes"])
            assert row is not None, f"{path.name}: nccl-tests has no row at {entry['bytes']}"
            # Both harnesses time the same thing: within a few us at small sizes, a few % at large ones.
            ours, theirs = entry["time_s"] * 1e6, row["out_of_place"]["time_us"]
            assert abs(ours - theirs) < max(10.0, 0.1 * theirs), (path.name, entry["bytes"], ours, theirs)


@pytest.mark.parametrize("path", sorted((DATA / "dataloader").glob("*.json")), ids=lambda p: p.name)
def test_loader_rates_are_samples_over_seconds(path):
    facts = load(path)["facts"]
    for name in ("torch", "tensorflow"):
        result = facts.get(name) or {}
        passes = [p for p in result.get("passes") or [] if p["seconds"] > 0 and p["samples"] > 0]
        assert result.get("samples_per_s_samples", []) == pytest.approx([p["samples"] / p["seconds"] for p in passes])


@pytest.mark.parametrize("path", sorted((DATA / "scaling").glob("*_built.json")), ids=lambda p: p.name)
def test_built_scaling_figures_are_per_second_from_step_times(path):
    facts = load(path)
    for run in facts["torch"]:
        result = run["result"]
        per_step = result["batch_per_device"] * result["world_size"]
        assert result["samples_per_s"] == pytest.approx(per_step / result["step_s"], rel=1e-6)
