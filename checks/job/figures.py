"""job.plan's memory judgement and its prediction, as findings, measurements and the sentences a
product manager reads. Pure."""

from __future__ import annotations

from typing import Any

from preflight.core.check import measure
from preflight.core.model import FIGURE_SCALING, Finding, Measurement, Status
from preflight_checks.job.predict import HOW, predict


def _counted(n: int, cpu: bool) -> str:
    unit = ("CPU process" if n == 1 else "CPU processes") if cpu else ("GPU" if n == 1 else "GPUs")
    return f"{n:,} {unit}"


def _nodes(n: int) -> str:
    return f"{n:,} node" + ("" if n == 1 else "s")


def memory_findings(check: Any, plan: Any, facts: dict[str, Any]) -> list[Finding]:
    """micro_batch against the canary's largest batch per GPU that fits, on the tightest node."""
    memories = [(node, p["memory"]) for node, p in (facts.get("per_node") or {}).items() if p.get("memory")]
    if plan.micro_batch is None:
        return []
    if not memories:
        return [check.finding("memory-not-judged.caveat", Status.PASS, "memory was not judged: canary.training did "
                              "not run", fix="Run canary.training with find_max_batch = true on your model.")]
    if all(m.get("device_kind") != "cuda" for _, m in memories):
        return [check.finding("memory-not-judged.caveat", Status.PASS, "memory was not judged: the nodes have no GPU",
                              fix="")]
    if (plan.tensor_parallel or 1) * (plan.pipeline_parallel or 1) > 1:
        return [check.finding("memory-not-judged.caveat", Status.PASS, "memory was not judged: the canary holds the "
                              "whole model on one GPU; with tensor or pipeline parallelism a GPU holds part of it",
                              fix="")]
    known = [(node, m) for node, m in memories if m.get("largest_fitting")]
    if not known:
        return [check.finding("memory-not-judged.caveat", Status.PASS, "memory was not judged: the canary did not look "
                              "for the largest batch that fits", fix=(
                                  "Set canary.training.find_max_batch = true (and canary.training.entry for your "
                                  "model)."))]
    node, tightest = min(known, key=lambda item: item[1]["largest_fitting"])
    largest, failing = tightest["largest_fitting"], tightest.get("first_failing")
    model = tightest.get("entry") or "the canary's reference model"
    where = f"on {node} ({model})"
    if plan.micro_batch <= largest:
        return [check.finding("micro-batch-fits", Status.PASS,
                              f"micro_batch {plan.micro_batch} fits: a step of {largest} per GPU ran {where}")]
    if failing and plan.micro_batch >= failing:
        return [check.finding("micro-batch-too-large", Status.FAIL,
                              f"micro_batch {plan.micro_batch} does not fit: {failing} per GPU ran out of memory "
                              f"{where}, {largest} was the largest that fit")]
    return [check.finding("micro-batch-near-limit", Status.WARN,
                          f"micro_batch {plan.micro_batch} lies between {largest}, which fit {where}, and "
                          f"{failing or 'the doubling limit'}, which " + ("did not" if failing else "was not tried"))]


def _not_predicted(check: Any, missing: list[str], gpus: int, cpu: bool) -> Finding:
    how = "; ".join(HOW[m] for m in missing if m in HOW)
    return check.finding("not-predicted", Status.WARN, f"the step at {_counted(gpus, cpu)} was not predicted: "
                         f"{', '.join(missing)} not measured", fix=f"Measure {how}.")


def prediction_outcome(check: Any, plan: Any, facts: dict[str, Any], shape: dict[str, Any], batch: dict[str, Any],
                       measurements: list[Measurement], lead: list[str], details: list[str]) -> list[Finding]:
    """The prediction's findings; its figures into `measurements`, its sentences into `lead` and `details`."""
    cpu, gpus = shape["cpu"], shape["gpus"]
    if batch["tp"] * batch["pp"] > 1:
        return [check.finding("parallelism-not-predicted.caveat", Status.PASS, (
            f"the speed-up was not predicted: the measured steps are data-parallel, and the plan has tensor_parallel "
            f"{batch['tp']} x pipeline_parallel {batch['pp']}"), fix="")]
    micro = plan.micro_batch
    basis = {"micro": micro, "accum": batch["grad_accum"], "per_node": shape["per_node"], "gpus": gpus}
    result = predict(facts.get("per_node") or {}, facts.get("cluster_allreduce"), {
        **basis, "micro": micro or _measured_batch(facts)})
    if not result.get("steps"):
        return [_not_predicted(check, result["missing"], gpus, cpu)]
    findings = _caveats(check, result, micro, details)
    steps = {s["gpus"]: s for s in result["steps"] if "missing" not in s}
    measurements += _measurements(result["one"], steps, cpu)
    job = steps.get(gpus)
    missing = [m for m in result["missing"] if m != "overlap"]
    if missing:
        findings.append(_not_predicted(check, missing, max(s["gpus"] for s in result["steps"] if "missing" in s), cpu))
    if job is None:
        return findings
    lead += _speed_sentences(result["one"], steps, gpus, cpu)
    details += _step_details(steps, cpu)
    details += _against_measured(facts.get("measured"), result, shape)
    if job["data_bound"]:
        findings.append(check.finding("data-bound", Status.WARN, (
            f"the loader supplies {result['pieces']['supply']:,.0f} samples/s per node; at {_counted(gpus, cpu)} a "
            f"node would consume {job['demand']:,.0f}: each step waits for data")))
    else:
        findings.append(check.finding("predicted", Status.PASS, lead[-1]))
    return findings


def _measured_batch(facts: dict[str, Any]) -> int | None:
    for pieces in (facts.get("per_node") or {}).values():
        for piece in pieces.get("compute", []):
            if piece.get("batch"):
                return int(piece["batch"])
    return None


def _caveats(check: Any, result: dict[str, Any], micro: int | None, details: list[str]) -> list[Finding]:
    compute, overlap = result["compute"], result["overlap"]
    details.append(f"compute: {compute['source']} on {compute['node']}, {compute['model']}, "
                   f"{compute['compute_s'] * 1e3:.2f} ms per no_sync step at {compute['batch']} samples"
                   + (f" (the slowest of {compute['slowest_of']} nodes)" if compute["slowest_of"] > 1 else ""))
    details.append(f"gradients: {result['pieces']['gradient_bytes'] / 1e6:,.1f} MB per step (the model's parameters, "
                   "fp32)")
    data = result.get("data")
    if data is None:
        details.append("data: not compared, dataloader.throughput did not run")
    elif data["synthetic"]:
        details.append("data: not compared, dataloader.throughput read its synthetic set "
                       f"({data['samples_per_s']:,.0f} samples/s); set dataloader.path to your dataset")
    found = []
    if micro is None:
        found.append(check.finding("batch-assumed.caveat", Status.PASS, (
            f"micro_batch is not in [job]: predicted at the batch measured, {compute['batch']} per rank"),
            fix="Add micro_batch to the [job] table of preflight.toml."))
    elif compute["batch"] != micro:
        found.append(check.finding("other-batch.caveat", Status.PASS, (
            f"compute was measured at {compute['batch']} samples per rank, not micro_batch {micro}: scaled per sample"),
            fix=f"Measure at micro_batch: scaling.multi_gpu.batch_per_device = {micro} (or canary.training."
                f"batch_per_rank = {micro})."))
    if not compute.get("team_model"):
        found.append(check.finding("reference-model.caveat", Status.PASS, (
            f"predicted for {compute['source']}'s reference model, not your own"), fix=(
            'Time your model: scaling.multi_gpu.workload = "package.module:factory" or canary.training.entry.')))
    if overlap is None:
        found.append(check.finding("overlap-not-measured.caveat", Status.PASS, (
            "how much of the all-reduce the backward pass hides was not measured: none of it is taken as hidden, the "
            "slowest case"), fix=f"Measure {HOW['overlap']}."))
    else:
        details.append(f"overlap: {overlap['overlap']:.0%} of the all-reduce hidden behind the backward pass "
                       f"({overlap['source']} on {overlap['node']}, {overlap['ranks']} ranks: "
                       f"{overlap['exposed_s'] * 1e3:.2f} ms exposed of {overlap['comm_s'] * 1e3:.2f} ms)")
    return found


def _measurements(one: dict[str, Any], steps: dict[int, dict[str, Any]], cpu: bool) -> list[Measurement]:
    counts = "CPU processes" if cpu else "GPUs"
    out = [measure(f"throughput on {_counted(1, cpu)} (compute alone)", round(one["throughput"], 1), "samples/s",
                   figure=FIGURE_SCALING, series="predicted", at=1, better="higher", counts=counts)]
    for n, s in sorted(steps.items()):
        on = f"at {_counted(n, cpu)}"
        out += [measure(f"predicted step time {on}", round(s["step_s"] * 1e3, 2), "ms"),
                measure(f"predicted scaling efficiency {on}", round(s["efficiency"], 3), ""),
                measure(f"predicted throughput {on}", round(s["throughput"], 1), "samples/s",
                        figure=FIGURE_SCALING, series="predicted", at=n, better="higher", counts=counts)]
    return out


def _speed_sentences(one: dict[str, Any], steps: dict[int, dict[str, Any]], gpus: int, cpu: bool) -> list[str]:
    job = steps[gpus]
    speed = job["throughput"] / one["throughput"]
    text = (f"At {_counted(gpus, cpu)} ({_nodes(job['nodes'])}) the job is predicted to train {speed:.3g}x as fast as "
            f"on {_counted(1, cpu)} ({job['efficiency']:.0%} scaling efficiency, {job['throughput']:,.0f} samples/s)")
    pairs = [(a, b) for a, b in ((gpus // 2, gpus), (gpus, 2 * gpus)) if a in steps and b in steps and a != b]
    for a, b in pairs:
        text += (f"; {a:,} -> {b:,}: {steps[b]['throughput'] / steps[a]['throughput']:.2f}x the throughput, not "
                 f"{b / a:g}x")
    what = {"compute": "compute: the devices are busy computing",
            "communication": "communication: the all-reduce costs more than the compute it feeds",
            "data": "data: the loader cannot keep up"}[job["bottleneck"]]
    neck = (f"Bottleneck: {what}; {job['comm_share']:.0%} of each step waits on the all-reduce"
            + (f" and {1 - job['unfed_step_s'] / job['step_s']:.0%} on data" if job["data_bound"] else "") + ".")
    return [text + ".", neck]


def _step_details(steps: dict[int, dict[str, Any]], cpu: bool) -> list[str]:
    return [f"{_counted(n, cpu)} on {_nodes(s['nodes'])}: step {s['unfed_step_s'] * 1e3:.2f} ms = "
            f"{s['compute_s'] * 1e3:.2f} ms compute + {s['exposed_s'] * 1e3:.2f} ms of a "
            f"{s['allreduce_s'] * 1e3:.2f} ms all-reduce not hidden ({s['allreduce_from']})" + (
                f"; the loader stretches it to {s['step_s'] * 1e3:.2f} ms" if s["data_bound"] else "")
            for n, s in sorted(steps.items())]


def _against_measured(measured: dict[str, Any] | None, result: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """scaling.multi_node's measured all-node step beside the prediction for the same size and model."""
    run = (measured or {}).get("all_nodes")
    compute = result["compute"]
    if not run or run.get("gradient_bytes") != compute.get("gradient_bytes") or run.get("batch") != compute["batch"]:
        return []
    from preflight_checks.job.predict import step_at

    pieces = {**result["pieces"], "compute_s": compute["compute_s"], "local": []}
    ranks = run["world_size"]
    predicted = step_at(ranks, max(1, ranks // max(1, run["nodes"])), {"micro": compute["batch"], "accum": 1}, pieces)
    if "missing" in predicted or not run.get("step_s"):
        return []
    error = predicted["step_s"] / run["step_s"] - 1.0
    return [f"scaling.multi_node measured {run['nodes']} nodes ({ranks} ranks) at {run['step_s'] * 1e3:.2f} ms a step; "
            f"this prediction for them is {predicted['step_s'] * 1e3:.2f} ms ({error:+.0%})"]
