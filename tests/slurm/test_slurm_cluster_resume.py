"""checkpoint.cluster_resume inside a real Slurm allocation: `preflight run --slurm` starts torchrun on
both allocated nodes through Slurm, rank 0's node loses every training process, torchrun restarts the
job and it resumes from the shared checkpoint directory, ending bit for bit equal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.torch]
pytest.importorskip("torch")


def test_losing_rank_0s_node_in_a_slurm_allocation_resumes_exactly(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(2)
    shared = tmp_path / "shared"
    shared.mkdir()
    config = tmp_path / "preflight.toml"
    config.write_text(f'[expect]\nnodes = 2\n[checkpoint]\ndir = "{shared}"\n[job]\nnodes = 64\ndays = 14\n'
                      '[checks."checkpoint.cluster_resume"]\nkill_node = "first"\nrdzv_timeout_s = 40\n'
                      'pg_timeout_s = 40\ntensorflow = false\n')
    out = tmp_path / "out"
    proc = subprocess.run(["salloc", "-N2", sys.executable, "-m", "preflight", "run", "--slurm", "--config", str(config),
                           "--checks", "checkpoint.cluster_resume", "--out", str(out)], cwd=tmp_path,
                          env={**bed.env, "CI": "1"}, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    data = json.loads((out / "results.json").read_text())
    result = next(r for r in data["results"] if r["check_id"] == "checkpoint.cluster_resume")
    assert result["status"] == "PASS", result["summary"] + proc.stdout[-2000:]
    assert "a 14-day job on 64 nodes" in result["summary"]
    assert result["facts"]["kill_node"] == "n1"
    assert list(shared.iterdir()) == []
    assert bed.jobs_left() == []  # salloc returns while Slurm may still list the job as COMPLETING
    for node in bed.nodes:
        assert bed.leftovers(node.index) == [], bed.leftovers(node.index)
