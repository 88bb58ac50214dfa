"""The TensorFlow part of checkpoint.cluster_resume: MultiWorkerMirroredStrategy across the nodes with
BackupAndRestore (preflight.workers.resume_tf), one worker lost, every worker started again as a
scheduler would, training resumed from the backup and compared with an uninterrupted run.

TensorFlow has no launcher that restarts a lost worker (torchrun's part); the check plays the
scheduler: it waits until every worker of the first start has ended (the survivors must notice the
loss by themselves, through the coordination service's heartbeats), then starts them all again.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from preflight.core.check import measure
from preflight.core.model import Measurement, Status
from preflight.launch.torchrun import AgentSpec, pick_port, run_agents
from preflight.engine.context import ClusterContext
from preflight_checks.checkpoint.cluster_events import agent_facts

MODULE = "preflight.workers.resume_tf"


def run_tensorflow(ctx: ClusterContext, nodes: list[str], plan: dict[str, Any], backup_dir: str, victim_node: str,
                   params: Any, budget_s: float) -> dict[str, Any]:
    """Both starts of the TensorFlow job, as facts: each start's events and how each worker ended."""
    ports = {n: pick_port(ctx, n, plan[n]["ip"]) for n in nodes}
    if any(p is None for p in ports.values()):
        return {"error": "no free port for a TensorFlow worker on " + ", ".join(n for n, p in ports.items() if p is None)}
    workers = ",".join(f"{plan[n]['ip']}:{ports[n]}" for n in nodes)
    out: dict[str, Any] = {"workers": workers, "kill_node": victim_node, "kill_epoch": params.tf_kill_epoch,
                           "epochs": params.tf_epochs, "starts": []}
    deadline = time.monotonic() + budget_s
    for restarted in (False, True):
        specs = []
        for index, node in enumerate(nodes):
            argv = ["env", "TF_CPP_MIN_LOG_LEVEL=2", "OMP_NUM_THREADS=1", "PYTHONUNBUFFERED=1", plan[node]["python"],
                    "-m", MODULE, "--index", str(index), "--workers", workers, "--backup-dir", backup_dir,
                    "--epochs", str(params.tf_epochs), "--seed", str(params.seed),
                    "--kill-index", str(nodes.index(victim_node)), "--kill-epoch", str(params.tf_kill_epoch)]
            # One group per worker: nobody is stopped because another ended; survivors must notice by themselves.
            specs.append(AgentSpec(node=node, argv=argv + (["--restarted"] if restarted else []), group=node))
        agents = run_agents(ctx, specs, max(20.0, deadline - time.monotonic()))
        events = [{**r, "from": n} for n, a in agents.items() for r in a.get("reports", [])]
        out["starts"].append({"events": events, "agents": agent_facts(agents)})
        if any("skip" in e for e in events) or not any(e.get("event") == "kill" for e in events):
            break
    return out


def _noticed(first: list[dict[str, Any]], kill: dict[str, Any]) -> list[Measurement]:
    """How long after the loss the first start's survivors reported an error, if they did."""
    noticed = [e["t"] for e in first if e.get("ok") is False and e["t"] >= kill["t"]]
    if not noticed:
        return []
    return [measure("TensorFlow failure noticed after", round(min(noticed) - kill["t"], 3), "s", better="lower")]


def _judge_restart(second: list[dict[str, Any]], kill: dict[str, Any], facts: dict[str, Any],
                   found: Callable[[str, Status, str], None]) -> tuple[list[Measurement], list[str]]:
    """The second start judged: where it resumed, whether it finished, and its digest against an uninterrupted run."""
    begins = [e["epoch"] for e in second if e.get("event") == "epoch-begin"]
    if begins and min(begins) == 0:
        found("tensorflow-from-zero", Status.FAIL, f"after the restart TensorFlow trained again from epoch 0, though "
              f"BackupAndRestore had epoch {kill['epoch']} saved")
    result = next((e for e in second if e.get("ok") is True), None)
    if result is None:
        errors = [e.get("error") for e in second if e.get("ok") is False]
        found("tensorflow-failed", Status.FAIL, "the restarted TensorFlow job did not finish"
              + (f": {'; '.join(filter(None, errors))}" if errors else ""))
        return [], []
    details = []
    if begins:
        details.append(f"TensorFlow: every worker started again; resumed at epoch {min(begins)} of {facts.get('epochs')}")
    same = result.get("digest") == result.get("reference_digest")
    if not same:
        found("tensorflow-weights-differ", Status.FAIL, "the resumed TensorFlow job's final weights differ from an "
              "uninterrupted run's")
    return [measure("TensorFlow final weights equal an uninterrupted run", "yes" if same else "no", equals="yes")], details


def judge_tensorflow(facts: dict[str, Any], found: Callable[[str, Status, str], None]) -> tuple[list[Measurement], list[str]]:
    """The TensorFlow starts judged: what was lost, whether it resumed, and the digests. Pure."""
    if facts.get("error"):
        found("tensorflow-failed", Status.ERROR, f"TensorFlow part could not start: {facts['error']}")
        return [], []
    starts = facts.get("starts") or []
    first = starts[0]["events"] if starts else []
    skip = next((e["skip"] for e in first if "skip" in e), None)
    if skip:
        return [], [f"TensorFlow (MultiWorkerMirroredStrategy with BackupAndRestore) not measured: {skip}"]
    kill = next((e for e in first if e.get("event") == "kill"), None)
    if kill is None:
        errors = [e.get("error") for e in first if e.get("ok") is False]
        found("tensorflow-failed", Status.ERROR, "the TensorFlow job never reached the epoch where a worker was to be "
              f"lost ({'; '.join(filter(None, errors)) or 'no error reported'})")
        return [], []
    details = [f"TensorFlow: worker {kill['index']} ({facts.get('kill_node')}) SIGKILLed after epoch {kill['epoch']}"]
    stopped = [n for n, a in starts[0]["agents"].items() if a.get("killed")]
    if stopped:
        found("tensorflow-never-noticed", Status.FAIL, f"TensorFlow workers on {', '.join(stopped)} never noticed that "
              f"worker {kill['index']} was lost and were stopped")
        return [], details
    second = starts[1]["events"] if len(starts) > 1 else []
    restart_measurements, restart_details = _judge_restart(second, kill, facts, found)
    return _noticed(first, kill) + restart_measurements, details + restart_details
