"""job.plan: the job as it will run: its batch, its learning rate, its size, and what doubling the GPUs buys.

The other checks ask whether the cluster is ready; this one asks whether the job is. It reads the
job's plan (the [job] table of preflight.toml, every key optional) and what the other checks
measured in this run (Check.reads: nothing is pulled into a run for it), and judges three things:

1. The batch trap (preflight_checks.job.batch): the global batch at the job's size against the one
   the hyper-parameters were tuned at, and the learning rate by its rule (linear with a warm-up,
   Goyal et al. 2017; square root for adaptive optimizers). `job.plan.batch-grows` WARNs, and FAILs
   when the batch grows more than 8x with no warm-up; its fix gives the rate, the warm-up, or the
   micro-batch and accumulation that keep the tuned batch.
2. Memory: micro_batch against the canary's largest batch per GPU that fits (find_max_batch).
3. The prediction (preflight_checks.job.predict), from measured pieces only: step time, scaling
   efficiency and throughput at the job's size, half and double it, and the bottleneck (compute,
   communication, data). A piece that was not measured is named, with how to measure it.

collect() copies what it reads of the other checks into its facts (preflight_checks.job.pieces), so
`preflight report --rejudge` judges the same facts against another plan.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from preflight.core.check import Check, Expect, Outcome, outcome_from_findings, param
from preflight.core.model import Finding, Measurement, Scope, Status
from preflight.engine.context import ClusterContext
from preflight_checks.job import batch as trap
from preflight_checks.job.figures import memory_findings, prediction_outcome
from preflight_checks.job.pieces import READS, collect_pieces

NO_PLAN_FIX = ("Describe the job in a [job] table of preflight.toml (`preflight init` writes one, commented): nodes, "
               "gpus_per_node, micro_batch, grad_accum, learning_rate, optimizer, tuned_global_batch (or "
               "tuned_at_gpus), tuned_learning_rate, lr_scaling.")


@dataclass
class Params:
    nodes: int | None = param(None, kind="count", minimum=1, help="nodes the job runs on (count)")
    gpus_per_node: int | None = param(None, kind="count", minimum=1,
                                      help="GPUs (ranks) per node (count); unset: the GPUs the nodes have")
    micro_batch: int | None = param(None, kind="count", minimum=1, help="samples per GPU per step (count)")
    grad_accum: int | None = param(None, kind="count", minimum=1,
                                   help="micro-batches accumulated per optimizer step (count); unset: 1")
    tensor_parallel: int | None = param(None, kind="count", minimum=1, help="tensor-parallel degree (count); unset: 1")
    pipeline_parallel: int | None = param(None, kind="count", minimum=1,
                                          help="pipeline-parallel degree (count); unset: 1")
    learning_rate: float | None = param(None, kind="rate", help="peak learning rate the job will use")
    warmup_steps: int | None = param(None, kind="count", help="learning-rate warm-up steps (count)")
    optimizer: str | None = param(None, kind="text", help='optimizer ("sgd", "adamw", ...): picks the rate rule')
    tuned_at_gpus: int | None = param(None, kind="count", minimum=1,
                                      help="GPUs the hyper-parameters were tuned on (count)")
    tuned_global_batch: int | None = param(None, kind="count", minimum=1,
                                           help="global batch the hyper-parameters were tuned at (samples)")
    tuned_learning_rate: float | None = param(None, kind="rate", help="learning rate tuned at that batch")
    lr_scaling: str | None = param(None, kind="choice", choices=("linear", "sqrt", "none"),
                                   help=('how the rate follows the batch: "linear" (SGD), "sqrt" (Adam, AdamW) or '
                                         '"none"; unset: from the optimizer'))


class JobPlan(Check):
    id = "job.plan"
    title = "The job as it will run: batch, learning rate, memory, and the predicted speed-up"
    scope = Scope.CLUSTER
    tags = ("cluster", "job", "performance")
    why = (
        "A cluster can be ready while the job is not. A batch that grows with the GPUs changes convergence unless "
        "the learning rate follows it (linear with a warm-up for SGD, Goyal et al. 2017; square root for Adam): "
        "the run trains, and quietly lands somewhere worse. A micro-batch that does not fit fails at the first step. "
        "And whether doubling the GPUs halves the time depends on how much of each step waits on the all-reduce "
        "or the loader: this predicts it from what the other checks measured, before the GPUs are paid for."
    )
    remediation = (NO_PLAN_FIX,)
    fixes = {
        "no-plan": NO_PLAN_FIX,
        "bad-parallelism": "Choose tensor_parallel x pipeline_parallel so that it divides nodes x gpus_per_node.",
        "batch-grows": "Scale the learning rate by its rule, with a warm-up, or keep the tuned global batch.",
        "micro-batch-too-large": ("Lower micro_batch to what fits and raise grad_accum to keep the global batch; or "
                                  "activation checkpointing, FSDP/ZeRO sharding."),
        "micro-batch-near-limit": ("Run canary.training with find_max_batch = true at micro_batch on your model "
                                   "(canary.training.entry, batch_per_rank) to see whether it fits."),
        "not-predicted": "Measure the missing piece (named in the finding) and run again.",
        "data-bound": ("Feed the loop faster: more DataLoader workers, data on local disk, fewer small files "
                       "(dataloader.throughput measures the loader alone)."),
        # Caveats (PASS): what was not judged or not measured as the job will run, and how to measure it.
        "batch-not-judged.caveat": "Add micro_batch and tuned_global_batch (or tuned_at_gpus) to the [job] table.",
        "memory-not-judged.caveat": "Run canary.training with find_max_batch = true on your model (its entry).",
        "parallelism-not-predicted.caveat": ("Time a step of your tensor- or pipeline-parallel model yourself: the "
                                             "measured steps here are data-parallel."),
        "batch-assumed.caveat": "Add micro_batch to the [job] table of preflight.toml.",
        "other-batch.caveat": ("Measure at micro_batch: scaling.multi_gpu.batch_per_device or "
                               "canary.training.batch_per_rank."),
        "reference-model.caveat": ('Time your model: scaling.multi_gpu.workload = "package.module:factory" or '
                                   "canary.training.entry."),
        "overlap-not-measured.caveat": "Run canary.training, or scaling.multi_gpu with collectives.local, on a node.",
    }
    Params = Params
    timeout_s = 30.0
    config_table = "job"
    shape_defaults = {"nodes-multiple-of": "nodes", "gpus-per-node": "gpus_per_node"}
    reads = READS
    levels = {"quick": {"timeout": 10}}

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        names = ctx.node_names
        facts = collect_pieces(ctx.node_facts, ctx.cluster_facts, names, params.gpus_per_node)
        facts.update({"nodes": names, "unreachable": list(ctx.unreachable)})
        return facts

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if all(getattr(params, f.name) is None for f in fields(params)):
            return outcome_from_findings([self.finding(
                "no-plan", Status.SKIP, "no [job] table in preflight.toml: there is no job to judge")], passed="")
        shape = job_shape(facts, params)
        findings: list[Finding] = []
        lead: list[str] = []
        details = list(shape["notes"])
        figures = trap.batch_plan(params, shape["nodes"], shape["per_node"])
        if "shape_error" in figures:
            findings.append(self.finding("bad-parallelism", Status.FAIL, figures["shape_error"]))
            return outcome_from_findings(findings, passed="", notes=details)
        findings += self._batch(params, figures, lead, details)
        findings += memory_findings(type(self), params, facts)
        measurements: list[Measurement] = []
        findings += prediction_outcome(type(self), params, facts, shape, figures, measurements, lead, details)
        outcome = outcome_from_findings(findings, measurements, passed=" ".join(lead), notes=details)
        outcome.lead = lead
        return outcome

    def _batch(self, params: Params, figures: dict[str, Any], lead: list[str], details: list[str]) -> list[Finding]:
        """The batch trap's finding (none when the plan keeps the batch or follows its rule), its lead sentence."""
        if figures["missing"]:
            what = " and ".join(figures["missing"])
            text = f"the batch was not judged: {what} {'is' if len(figures['missing']) == 1 else 'are'} not in [job]"
            lead.append(text[:1].upper() + text[1:] + ".")
            return [self.finding("batch-not-judged.caveat", Status.PASS, text,
                                 fix=f"Add {what} to the [job] table of preflight.toml.")]
        if figures.get("tuned_basis"):
            details.append(f"tuned global batch {figures['tuned']:,}: {figures['tuned_basis']}")
        rate = trap.judge_rate(params, figures)
        level = trap.trap_level(figures, rate)
        k = figures["growth"]
        batch_text = (f"Global batch {figures['global']:,} ({params.micro_batch} per GPU x {figures['grad_accum']} "
                      f"accumulation x {figures['dp']} data-parallel ranks)")
        if level is None:
            if abs(k - 1.0) < 1e-9:
                lead.append(f"{batch_text}, as tuned: the learning rate stays as tuned.")
            elif rate["follows"]:
                lead.append(f"{batch_text}, {k:.3g}x the tuned {figures['tuned']:,}; the learning rate "
                            f"{params.learning_rate:g} follows the {rate['rule']} rule"
                            + (f" with {rate['warmup']} warm-up steps." if rate["warmup"] else "."))
            else:
                asked = f"; the {rate['rule']} rule asks for {rate['asked']:.3g}" if rate["asked"] else ""
                lead.append(f"{batch_text}, smaller than the tuned {figures['tuned']:,} ({k:.3g}x){asked}.")
            return []
        sentence = trap.trap_sentence(params, figures, rate)
        lead.append(sentence[:1].upper() + sentence[1:] + ".")
        return [self.finding("batch-grows", Status.FAIL if level == "FAIL" else Status.WARN, sentence,
                             fix=trap.trap_fix(params, figures, rate))]


def job_shape(facts: dict[str, Any], params: Params) -> dict[str, Any]:
    """Nodes and GPUs per node of the job: the plan's, else this run's (said in `notes`)."""
    notes = []
    run_nodes = len(facts.get("nodes") or []) + len(facts.get("unreachable") or [])
    nodes = params.nodes
    if nodes is None:
        nodes = max(1, run_nodes)
        notes.append(f"nodes is not in [job]: the job is taken to run on this run's {nodes} node"
                     + ("s" if nodes != 1 else ""))
    per_node = params.gpus_per_node
    gpus = [p.get("gpus") for p in (facts.get("per_node") or {}).values() if p.get("gpus") is not None]
    cpu = not gpus or max(gpus) == 0
    if per_node is None:
        per_node = 1 if cpu else min(g for g in gpus if g)
        notes.append("gpus_per_node is not in [job]: " + ("the nodes have no GPU, so one CPU process per node"
                                                           if cpu else f"the {per_node} GPUs each node has"))
    return {"nodes": nodes, "per_node": per_node, "gpus": nodes * per_node, "cpu": cpu, "notes": notes}
