"""job.plan in a real run on this machine: it reads what scaling.multi_gpu and collectives.local measured
in the same run (nothing faked in between) and predicts the job of [job] from it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.torch]
pytest.importorskip("torch")

CONFIG = """
[job]
nodes = 1
gpus_per_node = 2
micro_batch = 128
tuned_at_gpus = 1
tuned_learning_rate = 0.1
learning_rate = 0.1
optimizer = "sgd"

[checks."scaling.multi_gpu"]
device_counts = [1, 2]
steps = 3
warmup = 1
tensorflow = false

[checks."collectives.local"]
iters = 3
warmup = 1
"""


def test_a_run_predicts_the_job_from_what_it_measured(tmp_path):
    (tmp_path / "preflight.toml").write_text(CONFIG)
    proc = subprocess.run([sys.executable, "-m", "preflight", "run", "--checks",
                           "job.plan,scaling.multi_gpu,collectives.local", "--out", "out", "--no-history",
                           "--format", "json,md"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["planned"].index("job.plan") > report["planned"].index("scaling.multi_gpu")
    plan = next(r for r in report["results"] if r["check_id"] == "job.plan")
    names = {m["name"]: m["value"] for m in plan["measurements"]}
    assert names["predicted step time at 2 CPU processes"] > 0, plan["summary"]
    assert "collectives.local" in " ".join(plan["details"])  # one node: the all-reduce within it
    # 128 x 2 ranks against 128 x 1 where it was tuned: the batch doubles and the rate stays (linear rule).
    grows = next(f for f in plan["findings"] if f["id"] == "job.plan.batch-grows")
    assert grows["level"] == "WARN" and "learning_rate = 0.2" in grows["fix"]
    assert plan["lead"][0].startswith("The global batch grows 2x")
    assert "### The job as it will run" in (tmp_path / "out" / "report.md").read_text()
