"""The labelled fault corpus (preflight.launch.fault_corpus) that bench/error_rates.py measures."""

from __future__ import annotations

import pytest

from preflight.launch.fault_corpus import FAULT_TYPES, row, run_trial


def test_the_corpus_has_the_fault_types_the_error_rates_are_measured_on():
    assert len(FAULT_TYPES) >= 15
    assert {"healthy", "slow-node", "refused-link", "slow-link", "boundary", "straggler", "flapping-node",
            "two-bad-nodes", "node-and-link", "gpu-5pct-slow", "nic-rail-half", "small-shm",
            "read-only-checkpoint", "torch-drift", "no-framework", "dead-node"} <= set(FAULT_TYPES)


@pytest.mark.parametrize("kind", ["slow-node", "slow-link", "boundary", "straggler", "gpu-5pct-slow", "small-shm"])
def test_a_fault_is_named_as_labelled(kind):
    trial = run_trial(kind, 16, 7, noise=0.05, gpu_noise=0.01)
    assert trial.truth and trial.truth <= trial.blamed


def test_a_dead_node_is_no_go_and_acted_on_by_nobody():
    trial = run_trial("dead-node", 16, 3, noise=0.05, gpu_noise=0.01)
    assert trial.nogo and not trial.blamed


def test_a_healthy_row_acts_on_no_node():
    figures = row("healthy", 16, 0.05, 0.01, 30)
    assert figures["false_nogo_node_runs"] == 0 and figures["precision"] is None


def test_unknown_fault_types_are_refused():
    with pytest.raises(ValueError, match="unknown fault type"):
        run_trial("cosmic-ray", 8, 1, noise=0.05, gpu_noise=0.01)


def test_a_healthy_run_below_its_floor_once_is_go_when_a_recheck_meets_it():
    # seed 82: the first all-node reading of this healthy fleet falls below its floor, the pass blames
    # nothing, and the reading taken again meets it (preflight.launch.recheck): GO, one round more
    trial = run_trial("healthy", 8, 82, noise=0.10, gpu_noise=0.02)
    assert trial.rechecks == 1 and not trial.nogo and not trial.blamed
    assert trial.rounds > trial.rechecks


def test_a_shortfall_below_the_floor_in_every_reading_is_no_go():
    # seed 20, a floor near the healthy figure: below it in the first reading and in both rechecks,
    # with nothing blamed: NO-GO on three readings
    trial = run_trial("healthy", 8, 20, noise=0.10, gpu_noise=0.02, floor=0.95)
    assert trial.rechecks == 2 and trial.nogo and not trial.blamed
