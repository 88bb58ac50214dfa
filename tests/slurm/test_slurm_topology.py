"""The leaf switch of each node of a real allocation, from a real slurmctld with the topology/tree
plugin, in the node specs the cluster checks get (preflight.launch.topology)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.slurm.slurmbed import SlurmBed

pytestmark = pytest.mark.root

# Two leaves under one top switch: n1 and n2 on leaf1, n3 on leaf2.
TOPOLOGY_CONF = "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n3\nSwitchName=top Switches=leaf[1-2]\n"
SPECS = ("import json, sys\nfrom preflight.run.nodes import allocation_nodes\n"
         "print(json.dumps([n.spec() for n in allocation_nodes(sys.executable)]))\n")


@dataclass
class TreeBed(SlurmBed):
    """A Slurm test bed whose controller runs topology/tree with TOPOLOGY_CONF."""

    __test__ = False

    def slurm_conf(self) -> str:
        # topology.conf sits beside slurm.conf, where slurmctld looks for it.
        (self.sdir / "topology.conf").write_text(TOPOLOGY_CONF)
        return "TopologyPlugin=topology/tree\n" + super().slurm_conf()


def test_each_node_of_an_allocation_gets_its_leaf_switch(make_testbed, tmp_path):
    from preflight.launch.topology import topology_from_specs

    bed = make_testbed(3, kind=TreeBed)
    env = bed.allocate(3)
    try:
        proc = subprocess.run([sys.executable, "-c", SPECS], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr[-2000:]
        specs = json.loads(proc.stdout)
    finally:
        bed.release(env["SLURM_JOB_ID"])
    assert [(s["name"], s["kind"]) for s in specs] == [("n1", "slurm"), ("n2", "slurm"), ("n3", "slurm")]
    assert topology_from_specs(specs) == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2"}
