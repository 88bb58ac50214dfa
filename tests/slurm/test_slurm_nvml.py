"""`preflight healthcheck` as the Slurm Prolog of the README's example, on a two-node bed where one node
has an NVIDIA driver: the stand-in NVML library (tests/nvml/standin) laid over that node's system
library directory, answering from a real H100 reading with double-bit ECC errors put in. The node
without a driver runs the job; the node whose GPU has uncorrectable ECC errors is drained by its
own prolog, with the finding in the reason."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.nvml.standin import node_driver
from tests.slurm.test_slurm_examples import EXAMPLES, install_healthcheck

pytestmark = pytest.mark.root


def test_the_prolog_drains_only_the_node_whose_nvml_shows_uncorrectable_ecc_errors(make_slurm_bed, tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    link = conf_dir / "slurm.conf"
    program = install_healthcheck(tmp_path, link, min_shm_gib=0.001)
    # The bed's torch is a CPU build beside a GPU node's driver: jobs here are said to need tensorflow
    # only (which the quick level does not probe), so that what torch sees, or how long its import takes
    # on a loaded machine, does not block, and the reason names what the stand-in put in (the reason is
    # the first blocking finding's).
    with (tmp_path / "preflight.toml").open("a") as config:
        config.write('\n[expect]\nframeworks = ["tensorflow"]\n')
    lines = (EXAMPLES / "slurm.conf").read_text()
    assert "#Prolog=/usr/local/sbin/preflight-healthcheck" in lines and "#PrologFlags=Alloc" in lines
    prolog = "".join(line[1:] + "\n" for line in lines.splitlines() if line.startswith(("#Prolog=", "#PrologFlags=")))
    prolog = prolog.replace("/usr/local/sbin/preflight-healthcheck", str(program))
    driver = node_driver(tmp_path / "n2-driver", "fault-ecc-double-bit")
    bed = make_slurm_bed(2, extra_conf=prolog, link_conf=link, node_libs={2: driver})

    done = tmp_path / "ran-on"
    job = subprocess.run(["sbatch", "-N1", "-w", "n1", f"--output={tmp_path / 'n1.out'}",
                          "--wrap", f"hostname > {done}"], env=bed.env, capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL)
    assert job.returncode == 0, job.stderr
    faulty = subprocess.run(["sbatch", "-N1", "-w", "n2", "--wrap", "true"], env=bed.env, capture_output=True,
                            text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert faulty.returncode == 0, faulty.stderr
    faulty_id = re.search(r"(\d+)", faulty.stdout).group(1)
    try:
        deadline = time.monotonic() + 120
        while not (done.exists() and bed.states()["n2"].drained):
            assert time.monotonic() < deadline, {"n2": bed.states()["n2"].__dict__, "logs": bed.logs()[-4000:]}
            time.sleep(1)
        assert done.read_text().strip() == "n1"
        states = bed.states()
        assert not states["n1"].drained, states["n1"].__dict__
        assert states["n2"].reason.startswith("preflight: gpu.visibility (gpu.visibility.ecc-uncorrectable)"), \
            states["n2"].__dict__
    finally:
        bed.release(faulty_id)
