"""scaling.multi_gpu judged from recorded facts (this CPU machine) and built ones (8-GPU nodes)."""

import copy
from dataclasses import replace

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.scaling.multi_gpu import (
    Params, ScalingMultiGpu, count_text, default_device_counts, scaling_table,
)
from tests.conftest import finding_ids, load_facts

CHECK = ScalingMultiGpu()
HEALTHY = "scaling/gpu_8x_h100_healthy_built.json"
DEGRADED = "scaling/gpu_8x_p2p_disabled_built.json"
CPU = "scaling/cpu_2proc.json"


def evaluate(facts, expect=None, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), expect or Expect())


def measurement(outcome, name):
    found = [m for m in outcome.measurements if m.name == name]
    assert found, [m.name for m in outcome.measurements]
    return found[0]


def throughput(facts, n):
    return next(r["result"]["samples_per_s"] for r in facts["torch"] if r["devices"] == n)


def efficiency(facts, n):
    return throughput(facts, n) / (n * throughput(facts, 1))


@pytest.mark.parametrize("fixture", [HEALTHY, DEGRADED, CPU])
def test_throughput_is_samples_over_the_median_step(fixture):
    for run in load_facts(fixture)["torch"]:
        result = run["result"]
        ordered = sorted(result["step_samples_s"])
        median = (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
        assert result["step_s"] == pytest.approx(median)
        assert result["samples_per_s"] == pytest.approx(run["devices"] * result["batch_per_device"] / result["step_s"])


def test_healthy_8_gpu_node_passes_and_says_how_many_gpus_it_is_worth():
    facts = load_facts(HEALTHY)
    outcome = evaluate(facts)
    e8 = efficiency(facts, 8)
    assert e8 >= Params().min_efficiency
    assert outcome.status is Status.PASS and finding_ids(outcome, Status.PASS) == ["scaling.multi_gpu.efficiency",
                                                                                 "scaling.multi_gpu.tensorflow-efficiency"]
    assert outcome.summary.startswith(f"8 GPUs deliver the throughput of {8 * e8:.1f}")  # what the node is worth
    judged = measurement(outcome, "efficiency on 8 GPUs")
    assert judged.value == pytest.approx(e8, abs=1e-3) and judged.threshold == 0.90 and judged.ok
    assert measurement(outcome, "efficiency on 2 GPUs").threshold is None  # only the largest count is judged
    assert measurement(outcome, "effective devices on 8 GPUs").value == pytest.approx(8 * e8, abs=0.01)
    speedup = measurement(outcome, "speedup from 2 to 8 GPUs (ideal 4x)")
    assert speedup.value == pytest.approx(throughput(facts, 8) / throughput(facts, 2), abs=0.01)
    step = measurement(outcome, "step time on 8 GPUs")
    compute = measurement(outcome, "compute (no_sync) on 8 GPUs")
    comm = measurement(outcome, "exposed communication on 8 GPUs")
    assert comm.value == pytest.approx(step.value - compute.value, abs=0.02)
    assert len(step.samples) == facts["torch"][-1]["result"]["steps"]


def test_tensorflow_is_reported_beside_torch_and_not_judged_unless_expected():
    facts = load_facts(HEALTHY)
    outcome = evaluate(facts)
    tf = measurement(outcome, "tensorflow MirroredStrategy efficiency on 8 GPUs")
    assert tf.threshold is None
    assert any(d.startswith("tensorflow MirroredStrategy: 8 GPUs deliver") and "not judged" in d for d in outcome.details)
    tf_e = facts["tensorflow"]["table"][-1]["efficiency"]
    bar = tf_e + 0.01
    assert efficiency(facts, 8) >= bar  # in this fixture torch scales better than tensorflow
    judged = evaluate(facts, Expect(frameworks=["torch", "tensorflow"]), min_efficiency=bar, warn_efficiency=tf_e - 0.05)
    assert judged.status is Status.WARN and finding_ids(judged) == ["scaling.multi_gpu.tensorflow-efficiency"]
    assert measurement(judged, "tensorflow MirroredStrategy efficiency on 8 GPUs").ok is False
    assert evaluate(facts, min_efficiency=bar, warn_efficiency=tf_e - 0.05).status is Status.PASS


def test_tensorflow_failure_warns_or_errors_when_it_is_the_teams_framework():
    facts = load_facts(HEALTHY)
    facts["tensorflow"]["runs"][-1].update({"ok": False, "result": None, "error": "did not finish within 40s"})
    assert evaluate(facts).status is Status.WARN
    assert finding_ids(evaluate(facts)) == ["scaling.multi_gpu.tensorflow-failed"]
    assert evaluate(facts, Expect(frameworks=["tensorflow"])).status is Status.ERROR


def test_p2p_disabled_node_fails_with_the_communication_share_shown():
    facts = load_facts(DEGRADED)
    outcome = evaluate(facts)
    assert efficiency(facts, 8) < Params().warn_efficiency
    assert outcome.status is Status.FAIL and "scaling.multi_gpu.low-efficiency" in finding_ids(outcome)
    assert "exposed communication" in outcome.summary  # the step is split into compute and communication
    comm8 = measurement(outcome, "exposed communication on 8 GPUs").value
    comm2 = measurement(outcome, "exposed communication on 2 GPUs").value
    assert comm8 > comm2  # the all-reduce grows with the GPU count when it is not hidden


def test_the_warn_band_lies_between_the_two_thresholds():
    facts = load_facts(HEALTHY)
    e8 = efficiency(facts, 8)
    assert evaluate(facts, min_efficiency=e8 + 0.02, warn_efficiency=e8 - 0.02).status is Status.WARN
    assert evaluate(facts, min_efficiency=e8 + 0.04, warn_efficiency=e8 + 0.02).status is Status.FAIL


def test_cpu_run_is_information_not_judged_and_says_it_is_cpu_only():
    # The figure describes CPU processes sharing cores, not a GPU fabric: reported, never FAIL/NO-GO.
    facts = load_facts(CPU)
    e2 = efficiency(facts, 2)
    assert e2 < Params().warn_efficiency  # this recording would FAIL by the GPU thresholds
    outcome = evaluate(facts)
    assert outcome.status is Status.SKIP
    assert [f.id for f in outcome.findings if f.level is Status.SKIP] == ["scaling.multi_gpu.cpu-only.not-applicable"]
    assert "PASS at" not in outcome.summary  # no GPU threshold is quoted
    assert all(m.threshold is None and m.ok is None for m in outcome.measurements)
    assert evaluate(facts, Expect(frameworks=["torch", "tensorflow"]), min_efficiency=0.99).status is Status.SKIP
    assert any(d.startswith("CPU only: 2 gloo processes with 1 thread each share 2 CPUs") for d in outcome.details)
    assert measurement(outcome, "throughput on 1 CPU process").unit == "samples/s"
    assert facts["training_samples_per_s"] == pytest.approx(throughput(facts, 2))
    assert facts["device_kind"] == "cpu" and [row["devices"] for row in facts["table"]] == [1, 2]


def test_compute_that_grows_with_the_device_count_is_called_out():
    facts = load_facts(HEALTHY)
    top = facts["torch"][-1]["result"]
    top["compute_s"] = facts["torch"][0]["result"]["compute_s"] * 1.5
    outcome = evaluate(facts)
    assert any(d.startswith("compute alone (no_sync) grew from") for d in outcome.details)
    assert not any(d.startswith("compute alone") for d in evaluate(load_facts(HEALTHY)).details)


def test_one_device_is_skip_with_its_throughput():
    facts = load_facts(HEALTHY)
    facts["torch"] = facts["torch"][:1]
    outcome = evaluate(facts)
    assert outcome.status is Status.SKIP and finding_ids(outcome) == ["scaling.multi_gpu.single-device.not-applicable"]
    assert measurement(outcome, "throughput on 1 GPU").value > 0  # with its throughput


def test_a_device_count_that_could_not_run_is_error_naming_it():
    facts = load_facts(HEALTHY)
    facts["torch"][-1].update({"ok": False, "result": None, "missing_ranks": [6],
                               "error": "rank 6 of 8 never joined within 60s"})
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["scaling.multi_gpu.launch-failed"]
    assert "8 GPUs: rank 6 of 8 never joined" in outcome.findings[0].message  # the device count is named
    assert measurement(outcome, "efficiency on 4 GPUs").value > 0  # what was measured is kept


def test_without_torch_skip_unless_expected():
    facts = {"cpu_count": 2, "torch_version": None}
    assert finding_ids(evaluate(facts)) == ["scaling.multi_gpu.no-torch"] and evaluate(facts).status is Status.SKIP
    assert evaluate(facts, Expect(frameworks=["torch"])).status is Status.FAIL


def test_default_device_counts():
    assert default_device_counts("cuda", 8, 224, 1) == [1, 2, 4, 8]
    assert default_device_counts("cuda", 6, 224, 1) == [1, 2, 4, 6]
    assert default_device_counts("cuda", 1, 224, 1) == [1]
    assert default_device_counts("cpu", 0, 2, 1) == [1, 2]
    assert default_device_counts("cpu", 0, 1, 1) == [1, 2]  # two ranks are the least that can scale
    assert default_device_counts("cpu", 0, 64, 1) == [1, 2, 4, 8]
    assert default_device_counts("cpu", 0, 16, 4) == [1, 2, 4]


def test_scaling_table_definitions():
    table = scaling_table([
        {"devices": 2, "samples_per_s": 180.0, "step_s": 0.02, "compute_s": 0.015},
        {"devices": 1, "samples_per_s": 100.0, "step_s": 0.01, "compute_s": 0.009},
    ])
    assert [row["devices"] for row in table] == [1, 2]
    assert table[1]["efficiency"] == pytest.approx(180 / (2 * 100))
    assert table[1]["effective_devices"] == pytest.approx(2 * 180 / (2 * 100))
    assert table[1]["comm_s"] == pytest.approx(0.02 - 0.015)


def test_count_text():
    assert [count_text(1, "cuda"), count_text(8, "cuda"), count_text(1, "cpu"), count_text(2, "cpu")] == [
        "1 GPU", "8 GPUs", "1 CPU process", "2 CPU processes"]


def test_evaluate_is_pure():
    facts = load_facts(DEGRADED)
    before = copy.deepcopy(facts)
    evaluate(facts)
    assert facts == before


def test_throughput_declares_its_scaling_figure():
    outcome = evaluate(load_facts(HEALTHY))
    figures = [(m.series, m.at, m.value) for m in outcome.measurements if m.figure == "scaling"]
    torch_points = [(at, value) for series, at, value in figures if series == "torch"]
    assert [at for at, _ in torch_points] == [1, 2, 4, 8]
    assert torch_points[-1][1] == measurement(outcome, "throughput on 8 GPUs").value
    assert all(m.better == "higher" for m in outcome.measurements if m.figure == "scaling")
    assert any(series == "tensorflow" for series, _, _ in figures)


def test_findings_name_what_was_found():
    assert {f.id for f in evaluate(load_facts(DEGRADED)).findings} >= {"scaling.multi_gpu.low-efficiency"}
    single = load_facts(HEALTHY)
    single["torch"] = single["torch"][:1]
    assert [f.id for f in evaluate(single).findings] == ["scaling.multi_gpu.single-device.not-applicable"]
    assert [f.id for f in evaluate({"torch_version": None}).findings] == ["scaling.multi_gpu.no-torch"]


def test_a_step_is_never_shown_smaller_than_its_parts_and_superlinear_cpu_scaling_is_explained():
    from preflight_checks.scaling.table import step_text, superlinear_note

    assert step_text(0.0553, 0.0385) == "step 55.3 ms = 38.5 ms compute + 16.8 ms exposed communication"
    odd = step_text(0.1540, 0.1554)  # compute, timed in its own steps, came out longer than the step
    assert "=" not in odd and "155.4 ms" in odd and "no exposed communication measurable" in odd
    assert superlinear_note(1.0, True) == "" and superlinear_note(1.04, True) == ""
    note = superlinear_note(1.09, True)
    assert "1.09 is above 1" in note and "share this node's CPU cores" in note
    assert "share" not in superlinear_note(1.09, False)
