"""Record checkpoint.cluster_resume's real facts on the test bed into tests/data/checkpoint_cluster_resume/
(needs root):

    .venv-test/bin/python tests/cluster/record_resume_data.py

Two nodes over ssh; the unit tests judge these files. Cases: n2 lost between checkpoints (passes);
no elastic restart (--max-restarts=0); n2 lost while saving, checkpoints published in place (torn);
n2 with a private directory where n1 has the shared one; TensorFlow's worker 1 lost too.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cluster.testbed import TestBed  # noqa: E402

from preflight.core.check import Expect  # noqa: E402
from preflight.engine import faults  # noqa: E402
from preflight.engine.context import ClusterContext  # noqa: E402
from preflight.engine.execute import execute  # noqa: E402
from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoint_cluster_resume"
CASES = {
    "lost-n2": ({}, {}, {}),
    "no-restart": ({"max_restarts": 0}, {}, {}),
    "torn": ({"kill_phase": "save", "kill_at_step": 20}, {"no_atomic": True}, {}),
    "not-shared": ({"payload_mb": 2}, {}, {2: True}),
    "tensorflow": ({"tensorflow": True, "steps": 12, "save_every": 5, "kill_at_step": 7}, {}, {}),
}


def record(name: str, overrides: dict, fault: dict, private: dict) -> None:
    directory = Path(tempfile.mkdtemp(prefix="pft-resume-", dir="/tmp"))
    scratch = Path(tempfile.mkdtemp(prefix="pft-scratch-"))
    bed = TestBed(2, private_dirs={i: [str(directory)] for i in private})
    try:
        bed.start()
        specs = [bed.transport(n.index, name=n.name).to_spec() for n in bed.nodes]
        ctx = ClusterContext(nodes=specs, output_dir=scratch, scratch_dir=scratch, expect=Expect(), timeout_s=300)
        if fault:
            import os

            os.environ[faults.ENV] = faults.env_value({"checkpoint.cluster_resume": fault})
        check = CheckpointClusterResume()
        params = check.params_from({"dir": str(directory), "rdzv_timeout_s": 40, "pg_timeout_s": 40, "tensorflow": False,
                                    **overrides})
        result = execute(check, ctx, params, ctx.expect, node="cluster")
        facts = {k: v for k, v in result.facts.items() if k not in ("probes", "plan")}
        facts["_source"] = f"recorded on the network-namespace test bed (tests/cluster/record_resume_data.py): {name}"
        facts["_params"] = overrides
        DATA.mkdir(parents=True, exist_ok=True)
        (DATA / f"{name}.json").write_text(json.dumps(facts, indent=1, default=str) + "\n")
        print(name, result.status.value, result.summary[:200])
    finally:
        import os

        os.environ.pop(faults.ENV, None)
        bed.stop()
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        record(case, *CASES[case])
