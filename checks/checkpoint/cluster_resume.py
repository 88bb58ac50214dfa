"""checkpoint.cluster_resume: a node is lost in the middle of a multi-node training job; the job must
notice, restart, and resume from the newest complete checkpoint on shared storage, ending with the
weights of a run that was never interrupted.

A check of its own rather than a mode of checkpoint.roundtrip: roundtrip is a node check (each
node's agent runs it alone, on its own storage), this one is a cluster check that starts torchrun on
every node at once, as collectives.cluster does, and its cost and failure modes (rendezvous, elastic
restarts, a directory that is not shared) are those of the cluster.

    env PREFLIGHT_NODE=<node> GLOO_SOCKET_IFNAME=<iface> ... <python> -m torch.distributed.run
        --nnodes=N --nproc-per-node=K --rdzv-backend=c10d --rdzv-endpoint=<first node>:<port>
        --local-addr=<node IP> --max-restarts=<max_restarts> ...
        -m preflight.workers.resume_train --dir <dir>/preflight-resume-<id> --steps 30 --save-every 10
        --kill-node <node> --kill-at-step 15

Every `save_every` steps the ranks save with torch.distributed.checkpoint into a temporary directory
that rank 0 renames once complete. After step `kill_at_step` every training process of the chosen
node is SIGKILLed at once; torchrun must restart the group, every rank must load the same newest
complete checkpoint, and after the last step the weights and optimizer state must hash to the digest
of an uninterrupted run of the same steps on the same ranks. Figures: time until the failure was
noticed, time until every rank had loaded the checkpoint again, steps lost, save and load times;
from the save time and a failure rate, the Young/Daly checkpoint interval for the planned job.
"""

from __future__ import annotations

import shlex
import time
import uuid
from typing import Any, Callable

from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings, too_few_nodes
from preflight.core.model import Finding, Measurement, Scope, Status
from preflight.launch.nodes import choose_backend
from preflight.launch.torchrun import MIN_LAUNCH_S, SLACK_S, launch, node_plan, probe_usable, run_agents, worker_timeouts
from preflight.engine.context import ClusterContext
from preflight.engine.faults import fault
from preflight_checks.checkpoint.cluster_events import agent_facts, stopped_by_us, timeline
from preflight_checks.checkpoint.cluster_params import FIXES, REMEDIATION, Params
from preflight_checks.checkpoint.cluster_tf import judge_tensorflow, run_tensorflow
from preflight_checks.checkpoint.interval import DEFAULT_FAILURES_PER_NODE_DAY, DEFAULT_SOURCE, plan, sentence

MODULE = "resume_train"
RUN_PREFIX = "preflight-resume-"
def victim(nodes: list[str], choice: str) -> str | None:
    """The node to lose: "first" (rank 0's), "last", or a node's name; None when it is not in the run. Pure."""
    if choice == "first":
        return nodes[0]
    if choice == "last":
        return nodes[-1]
    return choice if choice in nodes else None


class CheckpointClusterResume(Check):
    id = "checkpoint.cluster_resume"
    title = "A node lost mid-training: the job restarts and resumes from the newest checkpoint"
    scope = Scope.CLUSTER
    tags = ("cluster", "checkpoint", "torch", "resume", "elastic")
    why = (
        "Over weeks on many nodes a node will be lost: its ranks die, the others wait in a collective. Unless the "
        "job notices, restarts and every rank loads the same complete checkpoint from shared storage, the run hangs "
        "until someone looks, trains again from zero, or silently continues from a torn checkpoint."
    )
    remediation = REMEDIATION
    fixes = FIXES
    Params = Params
    timeout_s = 480.0
    config_aliases = {"job.nodes": "job_nodes", "job.days": "job_days"}
    levels = {"quick": {"skip": "it starts torchrun on every node, loses one and waits for the restart, a minute or "
                                "more"},
              "thorough": {"timeout": 600, "steps": 60, "payload_mb": 256.0, "kill_at_step": 35}}

    # Not expected_to_run: without a shared directory it has nothing to resume from, and says so
    # (SKIP, no-dir) without blocking; with one, a run that fails is ERROR or FAIL and blocks.

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        facts: dict[str, Any] = {"nodes": ctx.node_names, "unreachable": list(ctx.unreachable), "dir": params.dir}
        if not params.dir or len(ctx.node_names) < 2:
            return facts
        facts.update(probe_usable(ctx))
        usable = facts.get("usable") or []
        if len(usable) < 2:
            return facts
        choice = choose_backend({n: facts["probes"][n] for n in usable}, backend=params.backend,
                                cpu_ranks_per_node=params.ranks_per_node)
        facts["choice"] = choice
        target = victim(usable, params.kill_node)
        facts["kill_node"] = target
        if choice.get("error") or target is None:
            return facts
        plan_ = node_plan(ctx, facts["probes"], usable, socket_ifname=params.socket_ifname, extra_env=params.env,
                          threads=1)
        for node in usable:
            plan_[node]["env"]["PREFLIGHT_NODE"] = node
            if choice["backend"] == "nccl":  # a rank stuck in NCCL raises instead of hanging
                plan_[node]["env"].setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
        facts["plan"] = plan_
        run_dir = f"{params.dir.rstrip('/')}/{RUN_PREFIX}{uuid.uuid4().hex[:12]}"
        left = ctx.time_left() - SLACK_S - 35.0  # 35 s kept for the clean-up
        budget = max(MIN_LAUNCH_S, left * (0.45 if params.tensorflow else 1.0))
        rdzv_s, _, pg_s = worker_timeouts(budget, params.rdzv_timeout_s, 3.0, params.pg_timeout_s)
        args = ["--dir", run_dir, "--steps", str(params.steps), "--save-every", str(params.save_every),
                "--seed", str(params.seed), "--backend", choice["backend"], "--device", choice["device"],
                "--payload-mb", str(params.payload_mb), "--pg-timeout-s", f"{pg_s:.1f}",
                "--kill-node", target, "--kill-at-step", str(params.kill_at_step), "--kill-phase", params.kill_phase]
        # Tests only (preflight.engine.faults): checkpoints are written in place, not published by a rename.
        if fault(self.id, "no_atomic"):
            args.append("--no-atomic")
        facts["settings"] = {"max_restarts": params.max_restarts, "pg_timeout_s": round(pg_s, 1),
                             "rdzv_timeout_s": round(rdzv_s, 1), "launch_timeout_s": round(budget, 1),
                             "atomic": "--no-atomic" not in args, "run_dir": run_dir,
                             "nccl_async_error_handling": plan_[usable[0]]["env"].get("TORCH_NCCL_ASYNC_ERROR_HANDLING")}
        port = params.rdzv_port or facts["probes"][usable[0]].get("free_port")
        specs, launch_facts = launch(ctx, nodes=usable, plan=plan_, nproc=choice["nproc_per_node"], module=MODULE,
                                     worker_args=args, budget_s=budget, rdzv_timeout_s=rdzv_s, port=port,
                                     max_restarts=params.max_restarts)
        facts["launch"] = {k: launch_facts[k] for k in ("host", "rdzv_endpoint", "world_size", "nproc_per_node")}
        began = time.monotonic()
        try:
            agents = run_agents(ctx, specs, budget)
            if params.tensorflow:
                facts["tensorflow"] = run_tensorflow(ctx, usable, plan_, f"{run_dir}-tf", target, params,
                                                     max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S - 35.0))
        finally:
            facts["cleanup"] = self._cleanup(ctx, usable, run_dir)
            if params.tensorflow:
                facts["cleanup_tf"] = self._cleanup(ctx, usable, f"{run_dir}-tf")
        facts["wall_s"] = round(time.monotonic() - began, 1)
        facts["events"] = [{**report, "from": node} for node, agent in agents.items()
                           for report in agent.get("reports", [])]
        facts["agents"] = agent_facts(agents)
        return facts

    @staticmethod
    def _cleanup(ctx: ClusterContext, nodes: list[str], run_dir: str) -> dict[str, Any]:
        """Remove the run's checkpoints, from every node (a directory that is not shared has a copy on each)."""
        out = {}
        for node in nodes:
            python = ctx.transport(node).python
            argv = [python, "-m", f"preflight.workers.{MODULE}", "--cleanup", run_dir]
            try:
                proc = ctx.run_on(node, argv, timeout=30)
                out[node] = proc.returncode == 0 and '"removed": true' in proc.stdout
            except Exception as exc:  # noqa: BLE001 - said in the facts, never hides the measurement
                out[node] = f"{shlex.join(argv)}: {exc}"
        return out

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        if not facts.get("dir"):
            return outcome_from_findings([self.finding(
                "no-dir", Status.SKIP, "no checkpoint directory is set: the nodes need one shared directory to resume "
                "from; set checkpoint.dir (or checkpoint.cluster_resume.dir) to the shared filesystem")], passed="")
        early = too_few_nodes(type(self), facts.get("nodes", []), facts.get("unreachable", []), expect,
                              single="a node lost from a multi-node job needs two nodes or more",
                              nothing="no node could be lost and resumed")
        if early:
            return early
        usable = facts.get("usable") or []
        if len(usable) < 2:
            problems = {n: p.get("error") or "no torch with torch.distributed" for n, p in facts.get("probes", {}).items()
                        if n not in usable}
            return outcome_from_findings([self.finding("too-few-usable", Status.ERROR, "fewer than two nodes can run "
                                                       "torchrun: " + "; ".join(f"{n}: {e}" for n, e in problems.items()))],
                                         passed="")
        if facts.get("choice", {}).get("error"):
            return outcome_from_findings([self.finding("no-backend", Status.ERROR, facts["choice"]["error"])], passed="")
        if facts.get("kill_node") is None:
            return outcome_from_findings([self.finding(
                "unknown-node", Status.ERROR, f"kill_node {params.kill_node!r} is not one of the run's nodes "
                f"({', '.join(usable)})")], passed="")
        return judge(self, facts, params)


Found = Callable[..., None]


def _not_reached(facts: dict[str, Any], params: Params, agents: dict[str, dict[str, Any]], found: Found) -> None:
    """The run ended before the step where a node was to be lost: ERROR, with the nodes' errors."""
    errors = "; ".join(f"{n}: {a.get('last_error') or 'exit ' + str(a.get('returncode'))}" for n, a in agents.items()
                       if a.get("returncode") not in (0, None) or a.get("killed"))
    found("kill-not-reached", Status.ERROR, f"the training run never reached step {params.kill_at_step}, where "
          f"{facts.get('kill_node')} was to be lost" + (f" ({errors})" if errors else ""))


def _not_restarted(kill: dict[str, Any], agents: dict[str, dict[str, Any]], settings: dict[str, Any],
                   found: Found) -> None:
    """No node restarted after the loss: the survivors waited until stopped, or torchrun gave up."""
    stopped = stopped_by_us(agents)
    if stopped:
        found("never-noticed", Status.FAIL, f"the job never noticed that {kill['node']} was lost: "
              f"{', '.join(stopped)} still waited after {settings.get('launch_timeout_s')} s and was stopped "
              f"(process-group timeout {settings.get('pg_timeout_s')} s)")
    else:
        found("no-restart", Status.FAIL, f"torchrun did not restart the job after {kill['node']} was lost "
              f"(--max-restarts={settings.get('max_restarts')}): the job ended, and would have to be "
              "resubmitted by hand")


def _judge_resume(line: dict[str, Any], params: Params, found: Found) -> tuple[list[Measurement], bool]:
    """Where the ranks resumed from (one complete, newest checkpoint) and how fast; whether that went wrong."""
    measurements = []
    kill = line["kill"]
    if line.get("noticed_s") is not None:
        measurements.append(measure("failure noticed after", line["noticed_s"], "s", better="lower"))
    steps = {c["step"] for c in line["resume_choices"]}
    if len(steps) > 1:
        found("resume-step-differs", Status.FAIL, "ranks resumed from different checkpoints: "
              + ", ".join(f"rank {c['rank']} ({c['node']}) step {c['step']}" for c in line["resume_choices"]))
    torn = [c for c in line["resume_choices"] if c["step"] and not c.get("complete")]
    if torn:
        found("torn-checkpoint", Status.FAIL, f"after the restart ranks loaded the step-{torn[0]['step']} checkpoint, "
              "which was never completed (its save was cut short by the failure)")
    if steps == {0} and line.get("saved_before_kill"):
        found("from-zero", Status.FAIL, f"after the restart the job trained again from step 0, though the step-"
              f"{line['saved_before_kill']} checkpoint was saved before {kill['node']} was lost")
    if "resume_s" in line:
        resume = measure("resume after failure", line["resume_s"], "s", at_most=params.max_resume_s, param="max_resume_s")
        measurements += [resume, measure("steps lost", line["steps_lost"], "steps", better="lower"),
                         measure("checkpoint load across nodes", line["load_s"], "s", better="lower")]
        if not resume.ok:
            found("slow-resume", Status.WARN, f"every rank had loaded the checkpoint again {line['resume_s']:.0f} s "
                  f"after the failure, over the budget of {params.max_resume_s:g} s")
    if line.get("save_s") is not None:
        measurements.append(measure("checkpoint save across nodes", round(line["save_s"], 4), "s", better="lower"))
    return measurements, bool(torn or len(steps) > 1)


def _judge_result(line: dict[str, Any], wrong_checkpoint: bool, found: Found) -> list[Measurement]:
    """Whether the resumed job finished, and with the weights of an uninterrupted run."""
    result = line.get("result")
    if result is None:
        if not wrong_checkpoint:
            errors = "; ".join(f"rank {e.get('rank')} ({e.get('node')}): {e.get('error')}" for e in line["errors"][-3:])
            found("resume-failed", Status.FAIL, f"the job restarted after {line['kill']['node']} was lost but did not "
                  "finish" + (f": {errors}" if errors else ""))
        return []
    same = result.get("digest") == result.get("reference_digest") and result.get("ranks_agree")
    if not same:
        found("weights-differ", Status.FAIL, "the resumed job's final weights and optimizer state differ from an "
              "uninterrupted run's" + ("" if result.get("ranks_agree") else " (and the ranks disagree)"))
    return [measure("final weights equal an uninterrupted run", "yes" if same else "no", equals="yes")]


def _passed(line: dict[str, Any], measurements: list[Measurement], advice: tuple | None) -> str:
    """The summary of a run that resumed: the figures, TensorFlow's part and the interval advice."""
    kill = line["kill"]
    passed = (f"{kill['node']} lost after step {kill['step']}; the job noticed in {line.get('noticed_s')} s, resumed "
              f"from step {line.get('resumed_step')} in {line.get('resume_s')} s and ended bit for bit equal to an "
              "uninterrupted run")
    if any(m.name.startswith("TensorFlow final") and m.value == "yes" for m in measurements):
        passed += "; TensorFlow (MultiWorkerMirroredStrategy, BackupAndRestore) resumed equal too"
    if advice:
        passed += f"; {advice[2]}"
    return passed


def judge(check: type[Check] | Check, facts: dict[str, Any], params: Params) -> Outcome:
    """The launch's events and ends, judged under `params`. Pure."""
    findings: list[Finding] = []
    details: list[str] = []
    measurements: list[Measurement] = []
    agents = facts.get("agents", {})
    line = timeline(facts.get("events", []), agents)
    usable = facts.get("usable", [])

    def found(kind: str, level: Status, message: str, node: str | None = None) -> None:
        findings.append(check.finding(kind, level, message, node=node))

    if facts.get("tensorflow"):
        tf_measurements, tf_details = judge_tensorflow(facts["tensorflow"], found)
        measurements += tf_measurements
        details += tf_details
    unshared = {n: seen for n, seen in line["visible"].items() if set(usable) - set(seen)}
    if unshared:
        found("not-shared", Status.FAIL, f"{facts.get('dir')} is not one directory on every node: "
              + "; ".join(f"{n} sees only {', '.join(seen) or 'nothing'}" for n, seen in sorted(unshared.items())))
    kill = line.get("kill")
    if kill is None:
        _not_reached(facts, params, agents, found)
        return outcome_from_findings(findings, measurements, passed="", notes=details)
    details.append(f"{kill['node']} lost after step {kill['step']} ({kill['phase']}): every training process "
                   f"on it SIGKILLed at once; newest checkpoint before it: step {line.get('saved_before_kill', 0)}")
    if not line["restarted_nodes"]:
        _not_restarted(kill, agents, facts.get("settings", {}), found)
        return outcome_from_findings(findings, measurements, passed="", notes=details)
    resume_measurements, wrong_checkpoint = _judge_resume(line, params, found)
    measurements += resume_measurements
    measurements += _judge_result(line, wrong_checkpoint, found)
    advice = interval_advice(line, facts, params)
    if advice:
        measurements += advice[0]
        details += advice[1]
    return outcome_from_findings(findings, measurements, passed=_passed(line, measurements, advice), notes=details)


def interval_advice(line: dict[str, Any], facts: dict[str, Any], params: Params) -> tuple[list, list[str], str] | None:
    """The Young/Daly interval for the planned job, from the measured save time. Pure."""
    if line.get("save_s") is None:
        return None
    save_s = line["save_s"]
    basis = f"{save_s:.3g} s measured for {line.get('save_bytes', 0) / 1e6:.1f} MB across nodes"
    if params.job_checkpoint_gb and line.get("save_bytes"):
        save_s = params.job_checkpoint_gb * 1e9 / (line["save_bytes"] / max(line["save_s"], 1e-6))
        basis = f"{save_s:.0f} s for {params.job_checkpoint_gb:g} GB at the rate measured across nodes"
    rate = params.failures_per_node_day or DEFAULT_FAILURES_PER_NODE_DAY
    source = "failures_per_node_day as set" if params.failures_per_node_day else DEFAULT_SOURCE
    nodes = params.job_nodes or len(facts.get("usable") or []) or 2
    p = plan(save_s=save_s, restart_s=line.get("resume_s") or 0.0, failures_per_node_day=rate, nodes=nodes,
             days=params.job_days)
    text = sentence(p)
    figures = [measure("checkpoint interval (Young/Daly)", round(p["interval_min"], 2) if p["interval_min"] else None,
                       "min"),
               measure("interruptions expected", round(p["interruptions"], 1), "count"),
               measure("GPU time lost to saving and redoing", round(100 * p["lost_fraction"], 2), "%", better="lower")]
    notes = [f"plan: {text} (save {basis}; restart {p['restart_s']:.0f} s as measured; {rate:.5f} failures per "
             f"node-day, from {source}; job MTBF {p['mtbf_h']:.1f} h)" if p["mtbf_h"] else f"plan: {text}"]
    return figures, notes, text
