"""`preflight run --k8s` across nodes: the stand-in kubelet runs each node's pods inside that node's
network namespace of the test bed (tests/cluster/testbed.py), so net.bandwidth and collectives.cluster
measure real links between the nodes the API server lists, and --cordon acts on what they find."""

from __future__ import annotations

import json

import pytest

from tests.cluster.conftest import _skip_without_test_bed, make_testbed  # noqa: F401 - fixtures
from tests.conftest import run_preflight
from tests.k8s.bed import Relay
from tests.k8s.conftest import _node_status, k8s_env
from tests.k8s.kubelet import Kubelet

pytestmark = [pytest.mark.k8s, pytest.mark.root]
TAINT = "preflight.dev/not-ready"
# Short measurements: a link shaped to 100 Mbit/s is far from an unshaped one (gigabits) after a second.
QUICK_BANDWIDTH = "duration_s = 1\nomit_s = 0\nrepeats = 1\nstreams = 1"


@pytest.fixture
def netns_nodes(kube, make_testbed):  # noqa: F811
    """Three Kubernetes nodes whose addresses are the test bed's, served by a kubelet in their namespaces."""
    bed = make_testbed(3)
    admin = kube["admin"]
    names = [f"k8s-ns{n.index}" for n in bed.nodes]
    for name, node in zip(names, bed.nodes):
        admin.create_node({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": {"role": "netns"}}})
        status = _node_status(0)
        status["status"]["addresses"] = [{"type": "InternalIP", "address": node.address}]
        admin.patch_node_status(name, status, _content_type="application/strategic-merge-patch+json")
        admin.patch_node(name, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    try:
        with Relay(bed.bridge_address, kube["bed"].port) as relay:
            yield {"bed": bed, "names": names, "server": relay.server,
                   "netns": {name: n.netns for name, n in zip(names, bed.nodes)},
                   "addresses": {name: n.address for name, n in zip(names, bed.nodes)}}
    finally:
        for name in names:
            admin.delete_node(name)


def _kubelet(kube, nodes, **kwargs):
    return Kubelet(kube["admin"], kube["bed"], kube["namespace"], nodes["names"], python=kube["python"],
                   netns=nodes["netns"], server=nodes["server"], addresses=nodes["addresses"], **kwargs)


def _config(tmp_path, **sections):
    # Each check gets 600 s, twice its default: on a loaded machine a pod per iperf3 end and per rank
    # starts slowly (net.bandwidth's three ring links took 112 s beside three busy loops), and what
    # these tests decide is who is named and cordoned, not how fast. The run's own time limits stop a
    # hung check, so the test waits for the run, not the other way round.
    text = "[run]\ntimeout = 600\n" + "".join(f'[checks."{cid}"]\n{body}\n' for cid, body in sections.items())
    path = tmp_path / "preflight.toml"
    path.write_text(text)
    return path


def _run(kube, tmp_path, config, checks, *extra, timeout=1500):
    return run_preflight("run", "--k8s", "--namespace", kube["namespace"], "--selector", "role=netns",
                         "--image", "registry.example/team/train:1", "--remote-python", kube["python"],
                         "--config", str(config), "--checks", checks, "--out", str(tmp_path / "out"),
                         "--format", "json", "--no-history", *extra, cwd=tmp_path, timeout=timeout,
                         env=k8s_env(kube["runner"]))


def _taints(kube, names):
    return {n: {t.key: t.value for t in (kube["admin"].read_node(n).spec.taints or [])} for n in names}


def test_cross_node_checks_run_in_the_nodes_namespaces_and_a_broken_node_is_cordoned(kube, netns_nodes, tmp_path):
    names = netns_nodes["names"]
    broken = names[1]
    config = _config(tmp_path, **{"net.bandwidth": f"min_gbps = 0.2\n{QUICK_BANDWIDTH}",
                                  "collectives.cluster": "min_busbw_gbps = 0.001"})
    with _kubelet(kube, netns_nodes, shm={broken: "16m"}) as kubelet:
        run = _run(kube, tmp_path, config, "node.environment,net.bandwidth,collectives.cluster", "--cordon")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert kubelet.started_pods
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    cluster = {r["check_id"]: r for r in report["results"] if r["scope"] == "cluster"}
    assert {cid: r["status"] for cid, r in cluster.items()} == {"net.bandwidth": "PASS", "collectives.cluster": "PASS"}, \
        {cid: r["summary"] for cid, r in cluster.items()}
    # The links measured are between the nodes' own addresses, as the API server lists them.
    links = {m["at"] for m in cluster["net.bandwidth"]["measurements"] if m.get("figure") == "link"}
    addresses = set(netns_nodes["addresses"].values())
    assert links and all(set(link.split(" -> ")) <= addresses | set(names) for link in links), links
    taints = _taints(kube, names)
    assert taints[broken] == {TAINT: "node.environment.shm-small"}
    assert all(TAINT not in taints[n] for n in names if n != broken)


def test_a_node_named_by_isolation_is_cordoned(kube, netns_nodes, tmp_path):
    names = netns_nodes["names"]
    slow = names[2]
    netns_nodes["bed"].shape(netns_nodes["bed"].node(3), "100mbit")
    # Confirming a node takes its readings spread over confirm_span rounds (eight rounds among three
    # nodes); beside three busy loops a round took 20 s, so the pass gets 480 s, not its default 120.
    config = _config(tmp_path, **{"net.bandwidth": f"min_gbps = 0.5\nisolation_timeout_s = 480\n{QUICK_BANDWIDTH}"})
    with _kubelet(kube, netns_nodes):
        run = _run(kube, tmp_path, config, "net.bandwidth", "--cordon")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    result = next(r for r in report["results"] if r["check_id"] == "net.bandwidth")
    isolated = [f for f in result["findings"] if f["id"] == "net.bandwidth.isolated-node"]
    assert isolated, [f["id"] for f in result["findings"]]
    component = isolated[0].get("component") or {}
    assert component.get("kind") == "node" and component.get("nodes") == [slow] and component.get("confirmed"), \
        isolated[0]  # the finding names the node as data: that is what --cordon acts on
    taints = _taints(kube, names)
    assert TAINT in taints[slow] and all(TAINT not in taints[n] for n in names if n != slow)
