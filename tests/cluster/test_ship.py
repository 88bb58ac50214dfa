"""`preflight run --ship` on the namespace test bed: node 2's interpreter has torch and preflight's
requirements but not preflight (a venv that sees this test environment's site directories as plain
paths, so their editable installs do not load), as a training image without preflight would."""

from __future__ import annotations

import contextlib
import glob
import json
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.cluster.test_cli_cluster import preflight_processes
from tests.conftest import preflight_cmd

pytestmark = pytest.mark.root

SHIPPED = "/tmp/preflight-ship-*"


def python_without_preflight(tmp_path: Path) -> str:
    """A venv whose interpreter imports torch but not preflight."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    # This environment's site directories, and those its own .pth files add (as plain paths: no
    # editable install of preflight comes with them).
    ours = [sysconfig.get_path("purelib")] + [line.strip() for pth in Path(sysconfig.get_path("purelib")).glob("*.pth")
                                              for line in pth.read_text().splitlines()
                                              if line.startswith("/") and Path(line.strip()).is_dir()]
    (Path(own) / "node-image.pth").write_text("".join(f"{d}\n" for d in ours))
    lacks = subprocess.run([python, "-c", "import preflight"], capture_output=True, text=True, cwd=tmp_path)
    has_torch = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, cwd=tmp_path)
    assert lacks.returncode != 0 and has_torch.returncode == 0, (lacks.stderr, has_torch.stderr)
    return python


def ship_args(bed, tmp_path: Path, python: str, *more: str) -> list[str]:
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"{bed.node(1).address} python={bed.python}\n{bed.node(2).address} python={python}\n")
    options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
    return preflight_cmd("run", "--nodes", str(hosts), *options, "--out", str(tmp_path / "out"), "--ship", *more)


@contextlib.contextmanager
def stopped_at_the_end(proc: subprocess.Popen):
    """The run this test started ends with the test, passed or failed."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ship_measures_a_node_without_preflight_and_leaves_nothing_behind(make_testbed, tmp_path):
    bed = make_testbed(2)
    python = python_without_preflight(tmp_path)
    before = set(glob.glob(SHIPPED))
    proc = subprocess.run(ship_args(bed, tmp_path, python, "--checks", "node.environment,versions.consistency"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    two = bed.node(2).address
    on_two = {r["check_id"]: r for r in data["results"] if r["node"] == two}
    assert on_two["node.environment"]["status"] != "ERROR", (on_two, proc.stderr[-3000:])
    consistency = next(r for r in data["results"] if r["check_id"] == "versions.consistency")
    assert consistency["status"] == "PASS", consistency["summary"]  # node 2's own torch, as node 1's
    assert f"runs on {two} from /tmp/preflight-ship-" in proc.stderr
    assert all(n["reachable"] is not False for n in data["nodes"])
    assert set(glob.glob(SHIPPED)) == before
    assert preflight_processes(bed, bed.node(2)) == []


def test_without_ship_the_node_is_reached_but_lacks_preflight_and_the_fix_names_ship(make_testbed, tmp_path):
    bed = make_testbed(1)
    python = python_without_preflight(tmp_path)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"{bed.node(1).address} python={python}\n")
    options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
    proc = subprocess.run(preflight_cmd("run", "--nodes", str(hosts), *options, "--out", str(tmp_path / "out"),
                                        "--checks", "node.environment", "--no-color"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "unreachable" not in proc.stdout, proc.stdout
    assert "without preflight" in proc.stdout and "preflight is not installed" in proc.stdout
    assert "--ship" in proc.stdout and "--ship-wheel" not in proc.stdout
    report = (tmp_path / "out" / "report.md").read_text()
    assert "--ship" in report and "unreachable" not in report.lower()


def test_an_interrupted_ship_run_removes_what_it_shipped(make_testbed, tmp_path):
    bed = make_testbed(1)
    python = python_without_preflight(tmp_path)
    before = set(glob.glob(SHIPPED))
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"{bed.node(1).address} python={python}\n")
    options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
    proc = subprocess.Popen(preflight_cmd("run", "--nodes", str(hosts), *options, "--out", str(tmp_path / "out"),
                                          "--ship", "--checks", "checkpoint.roundtrip"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with stopped_at_the_end(proc):
        deadline = time.monotonic() + 300
        while not set(glob.glob(SHIPPED)) - before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert set(glob.glob(SHIPPED)) - before, "nothing was shipped"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, output[-3000:]
    assert set(glob.glob(SHIPPED)) == before, output[-3000:]
