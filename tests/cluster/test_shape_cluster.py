"""`preflight run --shape` end to end over SSH on the namespace test bed: one node broken for a reason of
its own, and the answer is a GO on the others, written as a Slurm exclude list, a hosts file and a
Kubernetes node affinity, with exit code 4."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.cluster.test_cli_cluster import bed_config, results, run_cli

pytestmark = pytest.mark.root


def test_one_node_with_too_few_cpus_gives_a_go_on_the_others(testbed3, tmp_path):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the broken node is one pinned to one CPU, among nodes with two or more")
    broken = testbed3.node(3)
    # The node's interpreter runs pinned to one CPU: its checks see one usable CPU, a fault of that node.
    wrapper = tmp_path / "python-one-cpu"
    wrapper.write_text(f"#!/bin/sh\nexec taskset -c 0 {testbed3.python or sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("".join(f"{n.address}" + (f" python={wrapper}" if n is broken else "") + "\n"
                             for n in testbed3.nodes))
    config = bed_config(tmp_path, **{"node.environment": "min_cpus = 2\nrequire_unlimited_memlock = false"})
    proc = run_cli(testbed3, tmp_path, "--config", str(config), "--checks", "node.environment,versions.consistency",
                   "--shape", "nodes-multiple-of=2", "--format", "json,md,junit,prometheus", hosts=hosts)
    data = results(tmp_path)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    env = {r["node"]: r for r in data["results"] if r["check_id"] == "node.environment"}
    assert [f["id"] for f in env[broken.address]["findings"] if f["level"] == "FAIL"] == ["node.environment.cpus-few"]
    healthy = [n.address for n in testbed3.nodes if n is not broken]
    assert data["subset"]["offered"] and data["subset"]["nodes"] == healthy
    assert data["subset"]["exclude"] == [broken.address]
    assert data["subset"]["reasons"] == {broken.address: "node.environment.cpus-few"}
    assert data["verdict"]["verdict"] == "NO-GO" and data["verdict"]["exit_code"] == 4
    assert data["verdict"]["subset_go"] is True
    out = tmp_path / "out"
    assert (out / "subset-exclude.txt").read_text().strip() == broken.address
    assert (out / "subset-hosts.txt").read_text().split() == healthy
    affinity = (out / "subset-k8s-affinity.yaml").read_text()
    assert all(json.dumps(n) in affinity for n in healthy) and broken.address not in affinity
    assert f"--exclude={broken.address}" in (out / "report.md").read_text()
    assert 'type="SUBSET-GO"' in (out / "junit.xml").read_text()
    assert "preflight_exit_code 4.0" in (out / "preflight.prom").read_text()
    assert f"GO on 2 of 3 nodes (shape nodes-multiple-of=2): exclude this: {broken.address}" in proc.stdout
