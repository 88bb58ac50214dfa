"""canary.training judged from recorded facts (this CPU machine) and built ones (a 2-GPU node)."""

import copy
import math
from dataclasses import replace

import pytest

from preflight_checks.canary.figures import collectives_reference, interpolate_time, percentile, summarise
from preflight.core.check import Expect
from preflight.core.model import FIGURE_STEP, Status
from preflight_checks.canary.training import NOT_MEASURED, CanaryTraining, Params
from tests.conftest import load_facts

CHECK = CanaryTraining()
CPU = "canary/cpu_2ranks.json"
GPU = "canary/gpu_2x_built.json"


def evaluate(facts, expect=None, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), expect or Expect())


def ids(outcome):
    return {f.id for f in outcome.findings if f.level is not Status.PASS}


def named(outcome, name):
    found = [m for m in outcome.measurements if m.name == name]
    assert found, [m.name for m in outcome.measurements]
    return found[0]


def test_percentile_interpolates_between_closest_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert percentile([], 50) is None


def test_interpolation_is_log_log_inside_the_sweep_and_linear_beyond_it():
    sweep = [{"bytes": 1 << 20, "time_s": 0.001}, {"bytes": 1 << 22, "time_s": 0.004}]
    assert interpolate_time(sweep, 1 << 21) == pytest.approx(0.002)
    assert interpolate_time(sweep, 1 << 23) == pytest.approx(0.008)
    assert interpolate_time(sweep, 8) == pytest.approx(0.001)


def test_cpu_run_measures_step_time_data_wait_and_latency_and_says_gpu_figures_are_not_measured():
    facts = load_facts(CPU)
    outcome = evaluate(facts)
    assert outcome.status in (Status.PASS, Status.WARN)
    ranks = facts["run"]["result"]["ranks"]
    slowest = [max(r["step_s"][i] for r in ranks) for i in range(facts["run"]["result"]["steps"])]
    assert named(outcome, "step time median").value == pytest.approx(percentile(slowest, 50) * 1e3, rel=1e-3)
    share = max(sum(r["wait_s"]) / sum(r["step_s"]) for r in ranks)
    wait = named(outcome, "data wait share of step time")
    assert wait.value == pytest.approx(share * 100, abs=0.01) and wait.threshold == 10.0
    every_bucket = [b[1] for r in ranks for b in r["buckets"]]
    assert named(outcome, "all-reduce latency per bucket p99").value == pytest.approx(
        percentile(every_bucket, 99) * 1e3, rel=1e-3)
    assert named(outcome, "GPU utilisation").value == NOT_MEASURED
    assert named(outcome, "device memory headroom").value == NOT_MEASURED
    assert named(outcome, "non-finite losses").ok is True


def test_every_step_is_declared_as_a_step_figure_with_both_series():
    facts = load_facts(CPU)
    outcome = evaluate(facts)
    steps = facts["run"]["result"]["steps"]
    points = [m for m in outcome.measurements if m.figure == FIGURE_STEP]
    assert {m.series for m in points} == {"step time", "data wait"}
    assert sorted(m.at for m in points if m.series == "step time") == list(range(steps))
    assert all(m.better == "lower" and m.unit == "ms" for m in points)


def test_latency_ratio_threshold_decides_the_comm_latency_finding():
    facts = load_facts(CPU)
    ratio = named(evaluate(facts), [m.name for m in evaluate(facts).measurements if "over reference" in m.name][0])
    assert "canary.training.comm-latency-high" in ids(evaluate(facts, max_latency_ratio=ratio.value * 0.9))
    assert "canary.training.comm-latency-high" not in ids(evaluate(facts, max_latency_ratio=ratio.value * 1.1))


def test_collectives_local_figures_of_the_same_world_size_become_the_reference():
    facts = load_facts(CPU)
    sweep = load_facts("collectives/cpu_gloo_2ranks.json")
    reference = collectives_reference(sweep, 2, "gloo")
    assert reference["source"] == "collectives.local"
    assert collectives_reference(sweep, 4, "gloo") is None  # another world size proves nothing here
    assert collectives_reference(None, 2, "gloo") is None
    facts["collectives_reference"] = reference
    summary = summarise(facts["run"]["result"], reference)
    worst = summary["worst_latency"]
    assert worst["reference_s"] == pytest.approx(interpolate_time(reference["sizes"], worst["bytes"]))
    assert "collectives.local" in " ".join(evaluate(facts).details)


def test_data_wait_warns_then_fails_by_its_stated_thresholds():
    facts = load_facts(CPU)
    for rank in facts["run"]["result"]["ranks"]:
        rank["wait_s"] = [t * 0.2 for t in rank["step_s"]]  # 20% of every step waits for data
    outcome = evaluate(facts, max_latency_ratio=1e9)
    assert ids(outcome) == {"canary.training.data-wait"} and outcome.status is Status.WARN
    assert evaluate(facts, fail_data_wait_share=0.15).status is Status.FAIL
    assert "DataLoader" in " ".join(outcome.remediation)


def test_a_nan_loss_fails():
    facts = load_facts(CPU)
    facts["run"]["result"]["ranks"][1]["losses"][-1] = math.nan
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL and "canary.training.loss-not-finite" in ids(outcome)


def test_gpu_run_judges_the_least_busy_gpu_and_memory_headroom():
    facts = load_facts(GPU)
    outcome = evaluate(facts, max_latency_ratio=1e9)
    util = named(outcome, "GPU utilisation (least busy GPU)")
    assert util.value == pytest.approx(sum([40, 35, 50, 45, 42, 38]) / 6, abs=0.1) and util.threshold == 70.0
    # rank 1 peaks at 74 of 80 GiB: 7.5% headroom, under the 10% floor
    headroom = named(outcome, "device memory headroom")
    assert headroom.value == pytest.approx(7.5) and headroom.ok is False
    assert named(outcome, "largest batch per GPU that fits").value == 1024
    assert ids(outcome) == {"canary.training.gpu-utilization-low", "canary.training.memory-headroom-low"}
    assert outcome.status is Status.WARN
    relaxed = evaluate(facts, max_latency_ratio=1e9, min_gpu_utilization_pct=30, min_memory_headroom=0.05)
    assert relaxed.status is Status.PASS


def test_gpu_run_without_nvml_samples_warns_that_utilisation_is_unknown():
    facts = load_facts(GPU)
    facts["run"]["result"]["gpu_utilization"] = {"samples": {"0": [], "1": []}, "error": "NVMLError_LibraryNotFound"}
    assert "canary.training.gpu-utilization-unknown" in ids(evaluate(facts, max_latency_ratio=1e9))


def test_failed_run_is_an_error_naming_the_entry_and_no_torch_is_skip_or_fail():
    facts = copy.deepcopy(load_facts(CPU))
    facts["entry"] = "team.train:make"
    facts["run"] = {"ok": False, "error": "rank 0: ModuleNotFoundError: No module named 'team'"}
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and ids(outcome) == {"canary.training.run-failed"}
    assert "team.train:make" in outcome.remediation[0]
    assert evaluate({"torch_version": None}).status is Status.SKIP
    assert evaluate({"torch_version": None}, Expect(frameworks=["torch"])).status is Status.FAIL


def test_tensorflow_run_is_reported_beside_torch_with_its_data_wait_judged():
    facts = load_facts(CPU)
    tf = facts["tensorflow"]
    outcome = evaluate(facts)
    label = f"tensorflow MirroredStrategy ({tf['replicas']} replicas)"
    assert named(outcome, f"{label} step time median").value == pytest.approx(percentile(tf["step_s"], 50) * 1e3, rel=1e-3)
    share = named(outcome, f"{label} data wait share")
    assert share.value == pytest.approx(100 * sum(tf["wait_s"]) / sum(tf["step_s"]), abs=0.01)
    tf["wait_s"] = [t * 0.5 for t in tf["step_s"]]
    assert "canary.training.tensorflow-data-wait" in ids(evaluate(facts))


def test_tensorflow_failure_warns_unless_the_team_uses_tensorflow():
    facts = load_facts(CPU)
    facts["tensorflow"] = {"ok": False, "error": "InvalidArgumentError: Graph execution error"}
    relaxed = evaluate(facts, max_latency_ratio=1e9)
    assert relaxed.status is Status.WARN and ids(relaxed) == {"canary.training.tensorflow-failed"}
    assert evaluate(facts, Expect(frameworks=["tensorflow"]), max_latency_ratio=1e9).status is Status.ERROR
    facts["tensorflow"] = {"skipped": "tensorflow is not installed"}
    assert evaluate(facts, max_latency_ratio=1e9).status is Status.PASS
    assert evaluate(facts, Expect(frameworks=["tensorflow"]), max_latency_ratio=1e9).status is Status.FAIL
