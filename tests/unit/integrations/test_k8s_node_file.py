"""`preflight k8s judge FILE`: a saved node listing judged offline. The documents are built in the shape
the Kubernetes API serves a core/v1 Node (kubectl's `-o json` List, `-o yaml`, the API's NodeList),
not captured from a cluster (tests/k8s reads the real API server's own)."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.integrations.kubernetes.nodes import node_problems, nodes_from_text


def node(name, gpus, allocatable=None, ready="True", unschedulable=False, taints=None, labels=None):
    spec = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"capacity": {"cpu": "96", **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
                       "allocatable": {"cpu": "96", **({"nvidia.com/gpu": str(gpus if allocatable is None
                                                                             else allocatable)} if gpus else {})},
                       "addresses": [{"type": "InternalIP", "address": f"10.0.0.{len(name)}"},
                                     {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]}}


LISTING = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [
    node("gpu-a", 8), node("gpu-b", 8, allocatable=7), node("gpu-c", 8, unschedulable=True),
    node("gpu-d", 8, ready="Unknown",
         taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]),
    node("cpu-a", 0, labels={"role": "cpu"})]}


def test_every_form_kubectl_and_the_api_write_is_read():
    as_json = nodes_from_text(json.dumps(LISTING), "nodes.json")
    assert [n.name for n in as_json] == ["cpu-a", "gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    assert nodes_from_text(yaml.safe_dump(LISTING), "nodes.yaml") == as_json
    node_list = {"kind": "NodeList", "items": [{k: v for k, v in n.items() if k not in ("kind", "apiVersion")}
                                               for n in LISTING["items"]]}
    assert nodes_from_text(json.dumps(node_list), "api.json") == as_json
    several = "\n---\n".join(yaml.safe_dump(n) for n in LISTING["items"])
    assert nodes_from_text(several, "several.yaml") == as_json
    by_name = {n.name: n for n in as_json}
    assert (by_name["gpu-b"].gpu_capacity, by_name["gpu-b"].gpu_allocatable, by_name["gpu-a"].address) == (8, 7, "10.0.0.5")
    assert not node_problems(by_name["gpu-a"]) and len(node_problems(by_name["gpu-d"])) == 2
    assert all(node_problems(by_name[n]) for n in ("gpu-b", "gpu-c"))


def test_judge_names_the_gpu_nodes_that_cannot_take_a_job_and_exits_one(tmp_path):
    saved = tmp_path / "nodes.json"
    saved.write_text(json.dumps(LISTING), encoding="utf-8")
    done = CliRunner().invoke(cli, ["k8s", "judge", str(saved)])
    assert done.exit_code == 1 and "cpu-a" not in done.output
    lines = {line.split()[1]: line.split()[0] for line in done.output.splitlines() if line.startswith(("OK", "NO"))}
    assert lines == {"gpu-a": "OK", "gpu-b": "NO", "gpu-c": "NO", "gpu-d": "NO"}
    healthy = tmp_path / "healthy.yaml"
    healthy.write_text(yaml.safe_dump(node("gpu-a", 8)), encoding="utf-8")
    assert CliRunner().invoke(cli, ["k8s", "judge", str(healthy)]).exit_code == 0
    picked = CliRunner().invoke(cli, ["k8s", "judge", str(saved), "--selector", "role=cpu"])
    assert picked.exit_code == 0 and "cpu-a" in picked.output


def test_a_file_without_nodes_is_a_usage_error_naming_it(tmp_path):
    for name, text in (("pods.json", json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {}}]})),
                       ("broken.json", "{\"items\": [")):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        done = CliRunner().invoke(cli, ["k8s", "judge", str(path)])
        assert done.exit_code == 2 and str(path) in done.output and "Traceback" not in done.output
    missing = CliRunner().invoke(cli, ["k8s", "judge", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "none.json" in missing.output
