"""Every shipped profile judges what its source measured: healthy fixtures PASS, degraded ones name the failure."""

from __future__ import annotations

import json

import pytest

from preflight.core import config as cfg
from preflight.core.model import Status
from preflight.core.registry import discover
from tests.conftest import TESTS

DATA = TESTS / "data"
CHECKS = discover().checks
PROFILES = cfg.shipped_profiles()


def load(relative: str) -> dict:
    return json.loads((DATA / relative).read_text(encoding="utf-8"))


def judge(profile: str, check_id: str, facts: dict):
    config = cfg.load(None, CHECKS, profile=profile)
    check = CHECKS[check_id]()
    return check.evaluate(facts, config.params_for(CHECKS[check_id]), config.expect)


def fired(outcome) -> set[str]:
    return {f.id for f in outcome.findings if f.level is not Status.PASS}


def test_the_profiles_are_the_shipped_ones():
    assert PROFILES == ["a100-8x", "h100-8x", "h200-8x"]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_busbw_floor_states_the_size_it_was_measured_at(profile):
    config = cfg.load(None, CHECKS, profile=profile)
    local = config.params.get("collectives.local", {})
    if "min_busbw_gbps" in local:
        size = local.get("busbw_size_bytes")
        assert size, f"{profile}: min_busbw_gbps without busbw_size_bytes"
        # The size is written in the source as nccl-tests' "<n>G" (GiB).
        assert any(f"at {size // 2**30}G" in source for source in config.profile_sources)


@pytest.mark.parametrize("profile", PROFILES)
def test_healthy_fixtures_pass_under_every_profile(profile):
    assert judge(profile, "gpu.visibility", load("gpu_visibility/healthy_8x_h100.json")).status is Status.PASS
    collectives = judge(profile, "collectives.local", load(f"collectives/healthy_{profile}_built.json"))
    assert collectives.status is Status.PASS, collectives.summary
    judged = [m for m in collectives.measurements if m.threshold is not None and "busbw" in m.name]
    assert len(judged) == 1 and judged[0].ok
    loader = json.loads((DATA / "dataloader" / "synthetic.json").read_text())["facts"]
    # A profile describes the node, not the team's model: what the GPUs consume stays to be stated.
    fired = [f.id for f in judge(profile, "dataloader.throughput", loader).findings if f.level is not Status.PASS]
    assert fired == ["dataloader.throughput.no-demand"]


@pytest.mark.parametrize("profile", PROFILES)
def test_degraded_fixtures_fail_with_the_named_finding(profile):
    collectives = judge(profile, "collectives.local", load(f"collectives/degraded_{profile}_built.json"))
    assert collectives.status is Status.FAIL and "collectives.local.slow-busbw" in fired(collectives)
    pcie = judge(profile, "gpu.visibility", load("gpu_visibility/pcie_degraded.json"))
    assert pcie.status is Status.FAIL and "gpu.visibility.pcie-degraded" in fired(pcie)
    missing = judge(profile, "gpu.visibility", load("gpu_visibility/gpu_missing.json"))
    assert missing.status is Status.FAIL and "gpu.visibility.count" in fired(missing)


def test_a_run_without_the_profiles_size_is_not_failed_by_its_floor():
    # The default sweep stops at 256 MiB (~383 GB/s on a healthy H100 node); the h100 floor is 460 GB/s
    # at 16 GiB. Judged together they would fail a healthy node; the check says it did not judge.
    outcome = judge("h100-8x", "collectives.local", load("collectives/gpu_8x_h100_nccl_built.json"))
    assert outcome.status is Status.WARN
    assert fired(outcome) == {"collectives.local.threshold-size-not-measured"}
