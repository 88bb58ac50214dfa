"""One real API server for every Kubernetes test (started once per session, stopped at the end)."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from tests.k8s.bed import ApiServer, apiserver_binary

NAMESPACE = "preflight-test"
CPU_NODES = ["k8s-n1", "k8s-n2", "k8s-n3"]
GPU_NODE = "k8s-gpu1"
DEAD_NODE = "k8s-dead1"


def _node_body(name: str, labels: dict[str, str], gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _node_status(gpus: int) -> dict:
    resources = {"cpu": "2", "memory": "24Gi", "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"status": {"capacity": resources, "allocatable": resources,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "stand-in kubelet", "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                                       "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}


@pytest.fixture(scope="session")
def kube():
    from tests import setup_state

    binary = setup_state.wait_for("apiserver") if setup_state.started("apiserver") else apiserver_binary()
    if binary is None:
        pytest.skip("no kube-apiserver: run scripts/k8s/build-apiserver.sh (CI does) or set PREFLIGHT_KUBE_APISERVER")
    bed = ApiServer().start(binary)
    try:
        from kubernetes import client, config

        admin = client.CoreV1Api(config.new_client_from_config(config_file=str(bed.dir / "admin.kubeconfig")))
        admin.create_namespace({"metadata": {"name": NAMESPACE}})
        nodes = [(n, {"role": "cpu", "preflight-test": "yes"}, 0) for n in CPU_NODES]
        nodes += [(GPU_NODE, {"role": "gpu"}, 8), (DEAD_NODE, {"role": "dead"}, 0)]
        for name, labels, gpus in nodes:
            admin.create_node(_node_body(name, labels, gpus))
            admin.patch_node_status(name, _node_status(gpus), _content_type="application/strategic-merge-patch+json")
            # The node is Ready: lift the not-ready taint admission put on it (the node controller's part).
            admin.patch_node(name, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
        from kubernetes import utils

        from preflight.integrations.kubernetes.manifests import objects

        api_client = config.new_client_from_config(config_file=str(bed.dir / "admin.kubeconfig"))
        for obj in objects(NAMESPACE, user="runner"):
            if obj["kind"] != "Pod":
                utils.create_from_dict(api_client, obj)
        yield {"bed": bed, "admin": admin, "namespace": NAMESPACE, "python": sys.executable,
               "runner": str(bed.kubeconfig("runner")), "nobody": str(bed.kubeconfig("nobody"))}
    finally:
        bed.stop()


@pytest.fixture
def run_id():
    return uuid.uuid4().hex[:8]


def k8s_env(kubeconfig: str) -> dict:
    return {**os.environ, "KUBECONFIG": kubeconfig}
