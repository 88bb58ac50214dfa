"""kubernetes.gpus against the real API server: three GPU nodes, each advertising 2 nvidia.com/gpu,
whose pods find the stand-in NVML library as their node's driver (tests/nvml/standin) answering from
a real two-GPU H100 reading; on one a GPU has fallen out of the driver's count, on another NVML still
lists a GPU it has lost. NVML's usable GPUs are compared with allocatable on each, and only those two
nodes fail."""

from __future__ import annotations

import json

import pytest

from tests.k8s.conftest import _node_body, _node_status
from tests.k8s.kubelet import Kubelet
from tests.k8s.test_k8s_real import _left, _run
from tests.nvml.standin import node_driver

pytestmark = pytest.mark.k8s
NODES = {"k8s-h100a": "gpud_535.161.08_h100_hw_slowdown", "k8s-h100b": "fault-gpu-missing",
         "k8s-h100c": "fault-gpu-lost-midrun"}


@pytest.fixture
def nvml_nodes(kube, tmp_path):
    admin = kube["admin"]
    for name in NODES:
        admin.create_node(_node_body(name, {"role": "nvml"}, 2))
        admin.patch_node_status(name, _node_status(2), _content_type="application/strategic-merge-patch+json")
        admin.patch_node(name, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    try:
        yield {name: node_driver(tmp_path / f"driver-{name}", description) for name, description in NODES.items()}
    finally:
        for name in NODES:
            admin.delete_node(name)


def test_nvml_counts_against_allocatable_fail_only_the_nodes_that_lost_a_gpu(kube, nvml_nodes, tmp_path):
    with Kubelet(kube["admin"], kube["bed"], kube["namespace"], list(NODES), python=kube["python"], libs=nvml_nodes):
        run = _run(kube, tmp_path, "--set", "gpu.visibility.probe_tensorflow=false", selector="role=nvml",
                   checks="gpu.visibility,kubernetes.gpus")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    gpus = next(r for r in report["results"] if r["check_id"] == "kubernetes.gpus")
    assert gpus["facts"]["nodes"] == {"k8s-h100a": {"allocatable": 2, "nvml": 2},
                                      "k8s-h100b": {"allocatable": 2, "nvml": 1},
                                      "k8s-h100c": {"allocatable": 2, "nvml": 1}}
    failing = [(f["id"], f.get("node")) for f in gpus["findings"] if f["level"] == "FAIL"]
    assert failing == [("kubernetes.gpus.allocatable-mismatch", "k8s-h100b"),
                       ("kubernetes.gpus.allocatable-mismatch", "k8s-h100c")]
    visibility = {r["node"]: r for r in report["results"] if r["check_id"] == "gpu.visibility"}
    assert visibility["k8s-h100a"]["facts"]["nvml"]["driver_version"] == "535.161.08"
    assert _left(kube) == []
