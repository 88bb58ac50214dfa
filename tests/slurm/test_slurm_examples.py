"""The README's Slurm examples, run on the Slurm test bed: the sbatch script and the slurm.conf
lines that make `preflight healthcheck` slurmd's HealthCheckProgram."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

EXAMPLES = Path(__file__).parents[2] / "examples" / "slurm"
PREFLIGHT = str(Path(sys.executable).with_name("preflight"))


def test_the_sbatch_script_checks_every_node_of_its_job_and_exits_with_the_verdict(make_slurm_bed, tmp_path):
    bed = make_slurm_bed(3)
    proc = subprocess.run(["sbatch", "-N3", "--wait", f"--chdir={tmp_path}", f"--export=ALL,PREFLIGHT={PREFLIGHT}",
                           str(EXAMPLES / "preflight.sbatch"), "--checks",
                           "node.environment,versions.pinned,versions.consistency", "--format", "json"],
                          env=bed.env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    jobid = re.search(r"Submitted batch job (\d+)", proc.stdout).group(1)
    log = (tmp_path / f"preflight-{jobid}.out").read_text()
    assert proc.returncode == 0, proc.stderr + log[-3000:]
    data = json.loads((tmp_path / f"preflight-report-{jobid}" / "results.json").read_text())
    assert data["verdict"]["verdict"] == "GO"
    assert {n["name"] for n in data["nodes"]} == {"n1", "n2", "n3"}
    assert {r["node"] for r in data["results"]} == {"n1", "n2", "n3", "cluster"}
    assert bed.jobs_left() == []
    for node in bed.nodes:
        assert bed.leftovers(node.index) == [], bed.leftovers(node.index)


def install_healthcheck(tmp_path: Path, conf: Path, min_shm_gib: float) -> Path:
    """The example script with this machine's preflight, a config, and the test bed's SLURM_CONF."""
    config = tmp_path / "preflight.toml"
    config.write_text(f'[checks."node.environment"]\nmin_shm_gib = {min_shm_gib}\n')
    script = (EXAMPLES / "preflight-healthcheck").read_text()
    script = re.sub(r"^PREFLIGHT=\S+", f"PREFLIGHT={PREFLIGHT}\nexport SLURM_CONF={conf}", script, flags=re.M)
    script = re.sub(r"^CONFIG=\S+", f"CONFIG={config}", script, flags=re.M)
    path = tmp_path / "preflight-healthcheck"
    path.write_text(script)
    path.chmod(0o755)
    return path


def test_the_health_check_drains_a_failing_node_and_resumes_it_once_fixed(make_slurm_bed, tmp_path):
    lines = (EXAMPLES / "slurm.conf").read_text()
    assert "HealthCheckProgram=/usr/local/sbin/preflight-healthcheck" in lines
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    # The bed's slurm.conf path is only known once it exists: the script reads it from a fixed place.
    link = conf_dir / "slurm.conf"
    program = install_healthcheck(tmp_path, link, min_shm_gib=0.5)
    lines = lines.replace("/usr/local/sbin/preflight-healthcheck", str(program))
    lines = re.sub(r"^HealthCheckInterval=\d+", "HealthCheckInterval=5", lines, flags=re.M)
    bed = make_slurm_bed(2, shm={2: "16m"}, extra_conf=lines, link_conf=link)

    def reason(name: str) -> str:
        state = bed.states()[name]
        return state.reason if state.drained else ""

    deadline = time.monotonic() + 180
    while not reason("n2").startswith("preflight: node.environment"):
        assert time.monotonic() < deadline, bed.states()["n2"].__dict__ | {"logs": bed.logs()[-3000:]}
        time.sleep(1)
    assert reason("n1") == ""
    bed.grow_shm(2, "1g")
    deadline = time.monotonic() + 180
    while reason("n2"):
        assert time.monotonic() < deadline, bed.states()["n2"].__dict__
        time.sleep(1)
    assert reason("n1") == ""
