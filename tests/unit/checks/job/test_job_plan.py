"""job.plan judged from recorded facts: the batch trap, memory, and the prediction from the pieces
the other checks recorded (tests/data: CPU recordings on this machine and the namespace test bed,
and the GPU fixtures built from them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.core.model import FIGURE_SCALING, Status
from preflight_checks.canary.figures import interpolate_time
from preflight_checks.job.pieces import collect_pieces
from preflight_checks.job.plan import JobPlan

DATA = Path(__file__).resolve().parents[3] / "data"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def cpu_facts(nodes=("n1", "n2", "n3"), cluster=True) -> dict:
    """One-node recordings on every node, the test bed's cross-node all-reduce and multi-node run."""
    node_facts = {n: {"scaling.multi_gpu": load("scaling/cpu_2proc.json"),
                      "canary.training": load("canary/cpu_2ranks.json"),
                      "collectives.local": load("collectives/cpu_gloo_2ranks.json")} for n in nodes}
    cluster_facts = {"collectives.cluster": load("collectives_cluster/testbed_3nodes_pass.json"),
                     "scaling.multi_node": load("scaling_multi_node/testbed_3nodes.json")} if cluster else {}
    facts = collect_pieces(node_facts, cluster_facts, list(nodes), 1)
    facts.update({"nodes": list(nodes), "unreachable": []})
    return json.loads(json.dumps(facts))  # as recorded in results.json, for re-judging


def gpu_facts(with_cluster=True) -> dict:
    node_facts = {n: {"scaling.multi_gpu": load("scaling/gpu_8x_h100_healthy_built.json"),
                      "canary.training": load("canary/gpu_2x_built.json"),
                      "collectives.local": load("collectives/healthy_h100-8x_built.json")} for n in ("g1", "g2")}
    cluster = ({"collectives.cluster": load("collectives_cluster/gpu_2nodes_8x_h100_nccl_built.json")}
               if with_cluster else {})
    facts = collect_pieces(node_facts, cluster, ["g1", "g2"], 8)
    facts.update({"nodes": ["g1", "g2"], "unreachable": []})
    return facts


def judge(facts: dict, **plan):
    check = JobPlan()
    return check.evaluate(facts, check.params_from(plan), Expect())


def ids(outcome) -> dict[str, Status]:
    return {f.id: f.level for f in outcome.findings}


def value(outcome, name: str):
    found = [m.value for m in outcome.measurements if m.name == name]
    assert found, f"no measurement {name!r} in {[m.name for m in outcome.measurements]}"
    return found[0]


def test_without_a_job_table_it_skips_and_says_how_to_write_one():
    outcome = judge(cpu_facts())
    assert outcome.status is Status.SKIP
    assert ids(outcome) == {"job.plan.no-plan": Status.SKIP}
    assert "preflight init" in outcome.findings[0].fix and "[job]" in outcome.findings[0].fix


TUNED = {"nodes": 8, "gpus_per_node": 8, "micro_batch": 16, "tuned_global_batch": 1024, "tuned_learning_rate": 0.1}


@pytest.mark.parametrize("plan, level", [
    ({"grad_accum": 1, "learning_rate": 0.1, "tuned_global_batch": 1024, "lr_scaling": "linear"}, None),  # kept
    ({"learning_rate": 0.1, "micro_batch": 32, "lr_scaling": "linear"}, Status.WARN),  # 2x, rate not scaled
    ({"learning_rate": 0.2, "micro_batch": 32, "lr_scaling": "linear"}, None),  # 2x, linear, no warm-up needed
    ({"learning_rate": 0.4, "micro_batch": 64, "lr_scaling": "linear"}, Status.WARN),  # 4x: needs a warm-up
    ({"learning_rate": 0.4, "micro_batch": 64, "lr_scaling": "linear", "warmup_steps": 500}, None),
    ({"learning_rate": 0.1, "micro_batch": 16, "grad_accum": 16, "optimizer": "sgd"}, Status.FAIL),  # 16x cold
    ({"learning_rate": 0.1, "micro_batch": 16, "grad_accum": 16, "optimizer": "sgd", "warmup_steps": 100},
     Status.WARN),  # 16x warmed, rate not scaled
    ({"learning_rate": 0.4, "micro_batch": 16, "grad_accum": 16, "optimizer": "AdamW", "warmup_steps": 100}, None),
    ({"learning_rate": 0.1, "micro_batch": 32, "lr_scaling": "none"}, Status.WARN),  # "none" holds only at tuned
])
def test_the_batch_trap(plan, level):
    outcome = judge({}, **{**TUNED, **plan})
    assert ids(outcome).get("job.plan.batch-grows") is level


def test_the_fix_gives_the_rate_the_warm_up_and_the_batch_that_keeps_the_tuned_one():
    outcome = judge({}, nodes=16, gpus_per_node=8, micro_batch=32, grad_accum=2, tuned_at_gpus=8,
                    tuned_learning_rate=0.1, optimizer="sgd", learning_rate=0.1)
    finding = next(f for f in outcome.findings if f.id == "job.plan.batch-grows")
    assert finding.level is Status.FAIL  # 16x with no warm-up
    assert "8,192" in finding.message and "512" in finding.message  # 32 x 2 x 128 against 32 x 2 x 8
    assert "learning_rate = 1.6" in finding.fix and "warm" in finding.fix
    assert "micro_batch = 2, grad_accum = 2" in finding.fix  # 2 x 2 x 128 = 512
    assert outcome.lead[0].startswith("The global batch grows 16x")
    sqrt = judge({}, nodes=16, gpus_per_node=8, micro_batch=32, grad_accum=2, tuned_at_gpus=8,
                 tuned_learning_rate=1e-4, optimizer="adamw", learning_rate=1e-4, warmup_steps=2000)
    grows = next(f for f in sqrt.findings if f.id == "job.plan.batch-grows")
    assert grows.level is Status.WARN and "learning_rate = 0.0004" in grows.fix  # 1e-4 x sqrt(16)


def test_parallelism_that_does_not_divide_the_gpus_fails():
    outcome = judge({}, nodes=3, gpus_per_node=8, micro_batch=4, tensor_parallel=8, pipeline_parallel=2)
    assert ids(outcome) == {"job.plan.bad-parallelism": Status.FAIL}


def test_the_prediction_from_the_test_beds_recordings():
    facts = cpu_facts()
    outcome = judge(facts, nodes=3, gpus_per_node=1, micro_batch=128)
    # The pieces, looked up by hand: scaling.multi_gpu's no_sync step of one process at batch 128, and
    # collectives.cluster's all-reduce of the model's 4.2 MB of gradients among its 3 ranks (no overlap:
    # the recorded step on 2 processes exposes more than the whole all-reduce).
    compute = load("scaling/cpu_2proc.json")["torch"][0]["result"]["compute_s"]
    nbytes = load("scaling/cpu_2proc.json")["torch"][0]["result"]["gradient_bytes"]
    sizes = load("collectives_cluster/testbed_3nodes_pass.json")["run"]["result"]["sizes"]
    allreduce = interpolate_time(sizes, nbytes)
    step = (compute + allreduce) * 1e3
    assert value(outcome, "predicted step time at 3 CPU processes") == pytest.approx(step, abs=0.01)
    assert value(outcome, "predicted scaling efficiency at 3 CPU processes") == pytest.approx(
        compute / (compute + allreduce), abs=1e-3)
    assert value(outcome, "predicted throughput at 3 CPU processes") == pytest.approx(
        3 * 128 / (compute + allreduce), rel=1e-3)
    chart = [m for m in outcome.measurements if m.figure == FIGURE_SCALING]
    assert [m.at for m in chart] == [1, 3, 6] and {m.series for m in chart} == {"predicted"}
    assert {m.counts for m in chart} == {"CPU processes"}
    assert outcome.status is Status.PASS
    assert "job.plan.reference-model.caveat" in ids(outcome)
    assert any(line.startswith("At 3 CPU processes (3 nodes)") for line in outcome.lead)
    assert any(line.startswith("Bottleneck: ") for line in outcome.lead)
    # Beside scaling.multi_node's measured run of the same model on the same 3 nodes.
    measured = load("scaling_multi_node/testbed_3nodes.json")["all_nodes"]["result"]["step_s"]
    assert any(d.startswith(f"scaling.multi_node measured 3 nodes (3 ranks) at {measured * 1e3:.2f} ms")
               for d in outcome.details)


def test_a_gpu_job_names_its_bottleneck_and_the_speed_up_of_doubling():
    outcome = judge(gpu_facts(), nodes=2, micro_batch=4096, tuned_global_batch=65536, tuned_learning_rate=0.1,
                    learning_rate=0.1, lr_scaling="linear")
    assert "job.plan.batch-grows" not in ids(outcome)  # 4096 x 16 GPUs is the tuned batch
    assert [m.at for m in outcome.measurements if m.figure == FIGURE_SCALING] == [1, 8, 16, 32]
    efficiency = value(outcome, "predicted scaling efficiency at 16 GPUs")
    assert 0 < efficiency < 1
    speed = [line for line in outcome.lead if line.startswith("At 16 GPUs (2 nodes)")]
    assert speed and "16 -> 32:" in speed[0] and "8 -> 16:" in speed[0]
    assert value(outcome, "predicted throughput at 32 GPUs") < 2 * value(outcome, "predicted throughput at 16 GPUs")
    assert any(line.startswith("Bottleneck: compute") for line in outcome.lead)  # NVLink-class all-reduce hides
    # The canary's largest batch that fits is 1024 per GPU: 4096 does not.
    assert ids(outcome)["job.plan.micro-batch-too-large"] is Status.FAIL


def test_what_is_not_measured_is_named_with_how_to_measure_it():
    outcome = judge(gpu_facts(with_cluster=False), nodes=4, micro_batch=512)
    missing = next(f for f in outcome.findings if f.id == "job.plan.not-predicted")
    assert missing.level is Status.WARN and "collectives.cluster" in missing.fix
    nothing = judge({"nodes": ["a"], "unreachable": [], "per_node": {"a": {}}}, nodes=2, micro_batch=8)
    assert ids(nothing)["job.plan.not-predicted"] is Status.WARN
    assert "scaling.multi_gpu" in next(f.fix for f in nothing.findings if f.id == "job.plan.not-predicted")


def test_memory_is_not_judged_on_a_cpu_node_and_fits_below_the_canarys_largest_batch():
    cpu = judge(cpu_facts(), nodes=3, gpus_per_node=1, micro_batch=64)
    assert ids(cpu)["job.plan.memory-not-judged.caveat"] is Status.PASS
    assert "no GPU" in next(f.message for f in cpu.findings if f.id == "job.plan.memory-not-judged.caveat")
    fits = judge(gpu_facts(), nodes=2, micro_batch=1024)
    assert ids(fits)["job.plan.micro-batch-fits"] is Status.PASS
    near = judge(gpu_facts(), nodes=2, micro_batch=1536)
    assert ids(near)["job.plan.micro-batch-near-limit"] is Status.WARN


def test_a_job_that_is_not_measured_at_its_batch_says_so():
    outcome = judge(cpu_facts(), nodes=3, gpus_per_node=1, micro_batch=32)
    assert ids(outcome)["job.plan.other-batch.caveat"] is Status.PASS
    other = next(f for f in outcome.findings if f.id == "job.plan.other-batch.caveat")
    assert "batch_per_device = 32" in other.fix
    # Per sample: a quarter of the measured batch takes a quarter of its compute.
    compute = load("scaling/cpu_2proc.json")["torch"][0]["result"]["compute_s"]
    assert value(outcome, "throughput on 1 CPU process (compute alone)") == pytest.approx(128 / compute, rel=1e-3)


def test_a_slow_loader_makes_data_the_bottleneck():
    facts = cpu_facts()
    for pieces in facts["per_node"].values():
        pieces["data"] = {"samples_per_s": 1000.0, "synthetic": False}
    outcome = judge(facts, nodes=3, gpus_per_node=1, micro_batch=128)
    assert ids(outcome)["job.plan.data-bound"] is Status.WARN
    assert value(outcome, "predicted step time at 3 CPU processes") == pytest.approx(128 / 1000.0 * 1e3, abs=0.01)
    assert any(line.startswith("Bottleneck: data") for line in outcome.lead)


def test_tensor_and_pipeline_parallel_jobs_are_not_predicted_from_data_parallel_steps():
    outcome = judge(cpu_facts(), nodes=4, gpus_per_node=1, micro_batch=8, tensor_parallel=2, pipeline_parallel=2)
    assert "job.plan.parallelism-not-predicted.caveat" in ids(outcome)
    assert not [m for m in outcome.measurements if m.name.startswith("predicted")]


def test_the_canarys_no_sync_steps_and_hook_give_the_overlap():
    """canary.training recorded with its no_sync steps: the overlap is 1 - exposed / the hook's all-reduce."""
    from preflight_checks.canary.figures import percentile, summarise
    from preflight_checks.job.pieces import canary_compute, canary_overlap

    facts = load("canary/cpu_2ranks_no_sync.json")
    compute = canary_compute(facts)
    ranks = facts["run"]["result"]["ranks"]
    assert compute["compute_s"] == max(percentile(r["compute_s"], 50) for r in ranks)
    assert compute["gradient_bytes"] == 4 * facts["run"]["result"]["parameters"]
    s = summarise(facts["run"]["result"])
    overlap = canary_overlap(facts, compute)
    exposed = max(0.0, s["step_median_s"] - s["data_wait_median_s"] - compute["compute_s"])
    assert overlap["overlap"] == pytest.approx(max(0.0, min(1.0, 1 - exposed / s["comm_per_step_p50_s"])))
    # The canary on its own node is the compute and the overlap when it ran at micro_batch.
    node = {"canary.training": facts, "collectives.local": load("collectives/cpu_gloo_2ranks.json")}
    pieces = collect_pieces({"n1": node}, {"collectives.cluster": load("collectives_cluster/testbed_3nodes_pass.json")},
                            ["n1"], 2)
    pieces.update({"nodes": ["n1"], "unreachable": []})
    outcome = judge(pieces, nodes=2, gpus_per_node=2, micro_batch=compute["batch"])
    assert any(d.startswith(f"overlap: {overlap['overlap']:.0%}") and "canary.training" in d for d in outcome.details)
    assert "job.plan.other-batch.caveat" not in ids(outcome)


def test_it_runs_after_what_it_reads_without_pulling_it_into_a_run():
    from preflight.core.registry import discover
    from preflight.run.plan import select

    registry = discover()
    order = [c.id for c in registry.ordered()]
    for read in ("collectives.cluster", "scaling.multi_node", "canary.training", "scaling.multi_gpu"):
        assert order.index(read) < order.index("job.plan")
    assert select(registry.checks, ["job.plan"], set(), explicit=True).ids == ["job.plan"]
    kept = select(registry.checks, ["job.plan", "scaling.multi_gpu"], {"collectives.cluster"}, explicit=True)
    assert "job.plan" in kept.ids and "collectives.cluster" not in kept.ids  # kept: it says what is missing


def test_a_batch_smaller_than_tuned_is_no_trap_and_says_what_the_rule_asks():
    outcome = judge({}, nodes=1, gpus_per_node=8, micro_batch=16, tuned_global_batch=1024, tuned_learning_rate=0.1,
                    lr_scaling="linear")
    assert "job.plan.batch-grows" not in ids(outcome)
    assert outcome.lead[0] == ("Global batch 128 (16 per GPU x 1 accumulation x 8 data-parallel ranks), smaller than "
                               "the tuned 1,024 (0.125x); the linear rule asks for 0.0125.")
