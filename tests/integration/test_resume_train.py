"""The kill-and-resume worker (preflight.workers.resume_train) for real on this CPU: two gloo ranks under
torchrun, the node lost after a step, torchrun's restart resuming from the newest complete checkpoint
and ending with the weights of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from preflight.launch.ranks import free_port
from tests.conftest import ROOT


def run(tmp_path: Path, *worker_args: str) -> list[dict]:
    """One torchrun of two ranks on node "n1", restarted at most once; the events every rank printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFLIGHT_NODE": "n1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
            "--max-restarts", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "-m", "preflight.workers.resume_train", "--dir", str(tmp_path / "preflight-resume-t"),
            "--steps", "8", "--save-every", "3", "--payload-mb", "1", "--pg-timeout-s", "30", *worker_args]
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_a_node_lost_in_training_resumes_from_the_newest_checkpoint_and_ends_equal(tmp_path):
    events = run(tmp_path, "--kill-node", "n1", "--kill-at-step", "5", "--kill-phase", "train")
    kills = [e for e in events if e.get("event") == "kill"]
    assert [(k["rank"], k["step"], k["attempt"]) for k in kills] == [(0, 5, 0)]
    assert [e["nodes"] for e in events if e.get("event") == "visible"] == [["n1"], ["n1"]]
    saved = sorted((e["attempt"], e["rank"], e["step"]) for e in events if e.get("event") == "saved")
    assert saved == [(0, 0, 3), (0, 1, 3), (1, 0, 6), (1, 1, 6)]
    resumed = sorted((e["attempt"], e["rank"], e["step"]) for e in events if e.get("event") == "resumed")
    assert resumed == [(0, 0, 0), (0, 1, 0), (1, 0, 3), (1, 1, 3)]
    choices = [e for e in events if e.get("event") == "resume" and e["attempt"] == 1]
    assert {(c["step"], c["complete"], Path(c["path"]).name) for c in choices} == {(3, True, "step-00000003")}
    finals = {e["digest"] for e in events if e.get("event") == "final"}
    result = next(e for e in events if e.get("ok") is True)
    assert result["attempt"] == 1 and result["ranks_agree"] and result["steps"] == 8 and result["world_size"] == 2
    assert finals == {result["digest"]} and result["digest"] == result["reference_digest"]
