"""Where the isolation pass's topology groups come from: Slurm's `scontrol show topology` (real
output), Kubernetes node labels, and the precedence of the sources in topology_of."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.integrations.topology import (
    LABELS_KEY, SWITCH_KEY, TOPOLOGY_LABELS, parse_scontrol_topology, slurm_leaf_switches, topology_labels,
)
from preflight.launch.topology import topology_from_specs, topology_of
from preflight.engine.context import ClusterContext

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm_topology"
FIXTURES = sorted(p for p in DATA.glob("*.txt"))


def by_leaf(leaves: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node, leaf in leaves.items():
        grouped.setdefault(leaf, []).append(node)
    return {leaf: sorted(nodes) for leaf, nodes in grouped.items()}


# -- Slurm ----------------------------------------------------------------------------------------


def test_there_are_real_fixtures_and_each_says_where_it_is_from():
    assert len(FIXTURES) >= 2
    for path in FIXTURES:
        source = json.loads(Path(f"{path}.source.json").read_text(encoding="utf-8"))
        assert source["source"] and source["program"].startswith("scontrol show topology")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_real_scontrol_output_gives_each_node_its_level_0_switch(path):
    expect = json.loads(Path(f"{path}.source.json").read_text(encoding="utf-8"))["expect"]
    assert by_leaf(parse_scontrol_topology(path.read_text(encoding="utf-8"))) == expect["leaves"]


def test_nodes_listed_only_by_an_upper_level_switch_have_no_leaf():
    leaves = parse_scontrol_topology((DATA / "leonardo_two_levels.txt").read_text(encoding="utf-8"))
    # lrdn0009 is under isw-L2-CELLG1 (Level=1) but on none of the leaves this excerpt shows.
    assert "lrdn0009" not in leaves and leaves["lrdn0013"] == "isw10100"
    assert "isw-L2-CELLG1" not in leaves.values()


def test_topology_block_lines_group_nodes_by_block():
    # Built from the format of Slurm's topology/block plugin (`BlockName=%s BlockIndex=%u Nodes=%s`).
    text = "BlockName=b1 BlockIndex=0 Nodes=gpu[01-02]\nBlockName=b2 BlockIndex=1 Nodes=gpu[03-04]\n"
    assert by_leaf(parse_scontrol_topology(text)) == {"b1": ["gpu01", "gpu02"], "b2": ["gpu03", "gpu04"]}


def test_a_line_cut_short_names_no_node_and_the_rest_still_count():
    text = ("SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[01-04]\n"
            "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=n[05-0\n"  # cut by SLURM_TOPO_LEN
            "No topology information available\n\n")
    assert by_leaf(parse_scontrol_topology(text)) == {"s1": ["n01", "n02", "n03", "n04"]}


def test_no_topology_plugin_is_no_topology_not_a_failure():
    assert parse_scontrol_topology("") == {}
    # Slurm 22.05.8 without a topology plugin (recorded on the test bed): exit 0, nothing on stdout.
    for code, out, err in ((0, "", "scontrol: error: No topology information available\n"),
                           (1, "", "slurm_load_topo error: Unable to contact slurm controller"), (0, "", "")):
        def run(argv, **kwargs):
            return subprocess.CompletedProcess(argv, code, out, err)
        assert slurm_leaf_switches(["n1"], run) == {}

    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])
    assert slurm_leaf_switches(["n1"], missing) == {}


def test_the_query_asks_for_whole_lines_and_keeps_only_the_runs_nodes():
    calls = []
    text = (DATA / "k8s_workers_three_levels.txt").read_text(encoding="utf-8")

    def run(argv, **kwargs):
        calls.append((argv, kwargs.get("env")))
        return subprocess.CompletedProcess(argv, 0, text, "")
    assert slurm_leaf_switches(["worker-0", "worker-payg-0", "elsewhere"], run) == {
        "worker-0": "4d63b28c08a3871d951ee886e3e35f14", "worker-payg-0": "unknown"}
    assert calls[0][0] == ["scontrol", "show", "topology"] and int(calls[0][1]["SLURM_TOPO_LEN"]) >= 4096


def test_an_allocation_gives_each_node_its_leaf_switch_in_the_spec():
    from preflight.run.nodes import allocation_nodes

    text = (DATA / "k8s_workers_three_levels.txt").read_text(encoding="utf-8")

    def run(argv, **kwargs):
        out = {"hostnames": "worker-0\nworker-1\n", "topology": text}.get(argv[2], "")
        return subprocess.CompletedProcess(argv, 0, out, "")
    nodes = allocation_nodes("/opt/venv/bin/python", {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "worker-[0-1]"}, run)
    specs = [n.spec() for n in nodes]
    assert [s[SWITCH_KEY] for s in specs] == ["4d63b28c08a3871d951ee886e3e35f14", "185ccb815910fcd0a3d1693651b78d1d"]
    assert topology_from_specs(specs) == {"worker-0": "4d63b28c08a3871d951ee886e3e35f14",
                                          "worker-1": "185ccb815910fcd0a3d1693651b78d1d"}


# -- Kubernetes -----------------------------------------------------------------------------------


def kube_node(name: str, labels: dict[str, str]):
    from kubernetes.client import V1Node, V1NodeSpec, V1NodeStatus, V1ObjectMeta

    return V1Node(metadata=V1ObjectMeta(name=name, labels=labels), spec=V1NodeSpec(), status=V1NodeStatus())


def test_kubernetes_labels_become_groups_and_a_zone_alone_does_not():
    from preflight.run.nodes import k8s_topology as _topology
    from preflight.integrations.kubernetes.nodes import from_node

    zone = {"topology.kubernetes.io/zone": "us-east-1a", "kubernetes.io/hostname": "a"}
    found = [from_node(kube_node("ip-10-0-0-1", {**zone, "topology.k8s.aws/network-node-layer-1": "nn-top",
                                                 "topology.k8s.aws/network-node-layer-3": "nn-a"})),
             from_node(kube_node("ip-10-0-0-2", {**zone, "topology.k8s.aws/network-node-layer-3": "nn-b"})),
             from_node(kube_node("ip-10-0-0-3", zone))]
    specs = [{"name": n.name, **_topology(n.labels)} for n in found]
    assert specs[0][LABELS_KEY] == {"topology.k8s.aws/network-node-layer-3": "nn-a"}
    assert LABELS_KEY not in specs[2]
    assert topology_from_specs(specs) == {"ip-10-0-0-1": "nn-a", "ip-10-0-0-2": "nn-b"}
    assert topology_from_specs([specs[2]]) is None


def test_the_tightest_label_any_node_has_is_used_for_every_node():
    assert TOPOLOGY_LABELS.index("network.topology.nvidia.com/leaf") < TOPOLOGY_LABELS.index(
        "cloud.google.com/gce-topology-subblock")
    specs = [{"name": "g1", LABELS_KEY: topology_labels({"cloud.google.com/gce-topology-subblock": "sb1",
                                                         "network.topology.nvidia.com/leaf": "leaf7"})},
             {"name": "g2", LABELS_KEY: topology_labels({"cloud.google.com/gce-topology-subblock": "sb1"})}]
    # One label for all: g2 has no leaf label, so it is left out rather than grouped by another key.
    assert topology_from_specs(specs) == {"g1": "leaf7"}


# -- precedence -----------------------------------------------------------------------------------


def test_hosts_file_groups_beat_slurm_switches_which_beat_labels():
    labels = {LABELS_KEY: {"network.topology.nvidia.com/leaf": "L"}}
    specs = [{"name": "a", "group": "r1", SWITCH_KEY: "s1", **labels},
             {"name": "b", "rack": "r2", SWITCH_KEY: "s1", **labels},
             {"name": "c", SWITCH_KEY: "s2", **labels}]
    assert topology_from_specs(specs) == {"a": "r1", "b": "r2"}
    assert topology_from_specs([{**s, "group": None, "rack": None} for s in specs]) == {"a": "s1", "b": "s1", "c": "s2"}
    assert topology_from_specs([{"name": s["name"], **labels} for s in specs]) == {"a": "L", "b": "L", "c": "L"}
    assert topology_from_specs([{"name": "a", "group": "g", "rack": "r"}]) == {"a": "g"}
    assert topology_from_specs([{"name": "a", "kind": "ssh"}]) is None


def test_topology_of_reads_the_cluster_context_nodes(tmp_path):
    ctx = ClusterContext(nodes=[{"name": "n1", "kind": "ssh", "group": "leaf1"}, {"name": "n2", "kind": "ssh"}],
                         output_dir=tmp_path, scratch_dir=tmp_path, expect=Expect(), timeout_s=5)
    assert topology_of(ctx) == {"n1": "leaf1"}
    ctx.nodes = [{"name": "n1", "kind": "ssh"}]
    assert topology_of(ctx) is None
