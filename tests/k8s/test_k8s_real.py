"""preflight on Kubernetes against a real kube-apiserver (etcd + RBAC), with a stand-in kubelet
(tests/k8s/kubelet.py) that runs preflight's pods as local processes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_preflight
from tests.k8s.conftest import CPU_NODES, DEAD_NODE, GPU_NODE, k8s_env
from tests.k8s.kubelet import Kubelet

pytestmark = pytest.mark.k8s
MANAGED = "app.kubernetes.io/managed-by=preflight"
CHECKS = "node.environment,versions.pinned,versions.consistency"


def _run(kube, tmp_path, *extra, kubeconfig=None, selector="role=cpu", timeout=240, checks=CHECKS):
    return run_preflight("run", "--k8s", "--namespace", kube["namespace"], "--selector", selector,
                         "--image", "registry.example/team/train:1", "--remote-python", kube["python"],
                         "--checks", checks, "--out", str(tmp_path / "out"), "--format", "json", *extra,
                         cwd=tmp_path, timeout=timeout, env=k8s_env(kubeconfig or kube["runner"]))


def _left(kube):
    admin, ns = kube["admin"], kube["namespace"]
    return ([p.metadata.name for p in admin.list_namespaced_pod(ns, label_selector=MANAGED).items]
            + [c.metadata.name for c in admin.list_namespaced_config_map(ns, label_selector=MANAGED).items])


def _clear_preflight_state(kube):
    for name in CPU_NODES:
        node = kube["admin"].read_node(name)
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in (node.spec.taints or [])
                  if not t.key.startswith("preflight.dev/") and t.key != "maintenance"]
        kube["admin"].patch_node(name, {"spec": {"taints": taints}}, _content_type="application/merge-patch+json")


def test_gpu_nodes_are_found_by_their_nvidia_gpu_capacity(kube):
    from preflight.integrations.kubernetes.nodes import discover

    found = discover(kube["admin"])
    assert [n.name for n in found] == [GPU_NODE] and found[0].gpu_allocatable == 8
    assert [n.name for n in discover(kube["admin"], "role=cpu")] == CPU_NODES


def test_the_printed_manifests_are_accepted_by_the_server(kube):
    from kubernetes import config, utils

    from preflight.integrations.kubernetes.manifests import objects

    api_client = config.new_client_from_config(config_file=str(kube["bed"].dir / "admin.kubeconfig"))
    docs = objects("dry-run-ns", user="alice", group="ml-platform", service_account="ops/runner")
    kube["admin"].create_namespace({"metadata": {"name": "dry-run-ns"}})
    for obj in docs:
        if obj["kind"] == "ClusterRole":
            continue  # cluster-wide and one per cluster: the session's fixture created it for real
        utils.create_from_dict(api_client, obj, namespace="dry-run-ns", dry_run="All")
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api_client)
    assert rbac.read_cluster_role("preflight-runner").rules[0].resources == ["nodes"]
    assert {d["kind"] for d in docs} >= {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                         "ClusterRoleBinding", "Pod"}
    assert [sa.metadata.name for sa in kube["admin"].list_namespaced_service_account("dry-run-ns").items
            if sa.metadata.name == "preflight"] == []  # a dry run creates nothing


def test_a_three_node_run_is_go_names_every_node_and_leaves_nothing(kube, tmp_path):
    _clear_preflight_state(kube)
    with Kubelet(kube["admin"], kube["bed"], kube["namespace"], CPU_NODES, python=kube["python"]) as kubelet:
        run = _run(kube, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted(n["name"] for n in report["nodes"]) == CPU_NODES
    assert {r["node"] for r in report["results"] if r["check_id"] == "node.environment"} == set(CPU_NODES)
    assert kubelet.started_pods, "the run's pods ran on the stand-in kubelet"
    assert _left(kube) == []


def test_a_planted_fault_cordons_only_its_node_and_uncordon_keeps_an_operators_taint(kube, tmp_path):
    _clear_preflight_state(kube)
    admin = kube["admin"]
    admin.patch_node("k8s-n3", {"spec": {"taints": [{"key": "maintenance", "value": "disk", "effect": "NoSchedule"}]}},
                     _content_type="application/merge-patch+json")
    with Kubelet(admin, kube["bed"], kube["namespace"], CPU_NODES, shm={"k8s-n2": "16m"}, python=kube["python"]):
        run = _run(kube, tmp_path, "--cordon")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    taints = {n: {t.key: t.value for t in (admin.read_node(n).spec.taints or [])} for n in CPU_NODES}
    assert taints["k8s-n2"] == {"preflight.dev/not-ready": "node.environment.shm-small"}
    assert "preflight.dev/not-ready" not in taints["k8s-n1"] and "preflight.dev/not-ready" not in taints["k8s-n3"]
    condition = {c.type: c for c in admin.read_node("k8s-n2").status.conditions}["PreflightReady"]
    assert condition.status == "False" and condition.reason == "node.environment.shm-small"
    labels = {n: admin.read_node(n).metadata.labels for n in CPU_NODES}
    assert labels["k8s-n2"]["preflight.dev/verdict"] == "NO-GO" and labels["k8s-n1"]["preflight.dev/verdict"] == "GO"
    # The operator fixes n2; n3 stays in maintenance, taint and all.
    with Kubelet(admin, kube["bed"], kube["namespace"], CPU_NODES, python=kube["python"]):
        (tmp_path / "again").mkdir()
        again = _run(kube, tmp_path / "again", "--uncordon")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    taints = {n: {t.key: t.value for t in (admin.read_node(n).spec.taints or [])} for n in CPU_NODES}
    assert "preflight.dev/not-ready" not in taints["k8s-n2"]
    assert taints["k8s-n3"] == {"maintenance": "disk"}
    condition = {c.type: c for c in admin.read_node("k8s-n2").status.conditions}["PreflightReady"]
    assert condition.status == "True"
    assert _left(kube) == []
    _clear_preflight_state(kube)


def test_past_the_blast_radius_cordon_cordons_nobody_and_names_who_would_have_been(kube, tmp_path):
    _clear_preflight_state(kube)
    admin = kube["admin"]
    shm = {"k8s-n2": "16m", "k8s-n3": "16m"}  # two of three nodes: more than the blast radius (at least 1)
    with Kubelet(admin, kube["bed"], kube["namespace"], CPU_NODES, shm=shm, python=kube["python"]):
        run = _run(kube, tmp_path, "--cordon")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    taints = {n: {t.key for t in (admin.read_node(n).spec.taints or [])} for n in CPU_NODES}
    assert not any("preflight.dev/not-ready" in keys for keys in taints.values()), taints
    assert "kubernetes: not cordoned: 2 nodes would be drained or cordoned, more than the blast radius of 1" in run.stdout
    assert _left(kube) == []
    _clear_preflight_state(kube)


def test_a_pod_that_never_starts_is_an_error_naming_its_node(kube, tmp_path):
    with Kubelet(kube["admin"], kube["bed"], kube["namespace"], CPU_NODES, python=kube["python"]):
        run = _run(kube, tmp_path, "--k8s-start-timeout", "4", selector="role=dead")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    errors = [r for r in report["results"] if r["status"] == "ERROR"]
    assert errors and all(r["node"] == DEAD_NODE for r in errors)
    assert any("Pending" in r["summary"] for r in errors), [r["summary"] for r in errors]
    assert _left(kube) == []


def test_without_the_printed_roles_the_run_fails_clearly(kube, tmp_path):
    run = _run(kube, tmp_path, kubeconfig=kube["nobody"])
    assert run.returncode == 2
    assert "forbidden" in run.stderr and "preflight k8s manifests" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_saved_node_listing_is_judged_offline(kube, tmp_path):
    """The API server's own NodeList, saved as `kubectl get nodes -o json` would, read by `k8s judge`."""
    import json

    from click.testing import CliRunner

    from preflight.cli.main import cli

    raw = kube["admin"].list_node(_preload_content=False)  # the NodeList JSON as the server sent it
    served = (getattr(raw, "data", None) or raw.read()).decode()
    saved = tmp_path / "nodes.json"
    saved.write_text(served, encoding="utf-8")
    done = CliRunner().invoke(cli, ["k8s", "judge", str(saved)])
    assert done.exit_code == 0 and GPU_NODE in done.output and CPU_NODES[0] not in done.output, done.output
    doc = json.loads(served)
    for item in doc["items"]:
        if item["metadata"]["name"] == GPU_NODE:
            item.setdefault("spec", {})["unschedulable"] = True
            item["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    saved.write_text(json.dumps(doc), encoding="utf-8")
    done = CliRunner().invoke(cli, ["k8s", "judge", str(saved)])
    assert done.exit_code == 1 and GPU_NODE in done.output
