"""`preflight k8s manifests`: what a Kubernetes run needs, as YAML a team can review and apply.

Least privilege, in the run's namespace unless a node-level verb needs more:
- the coordinator (a user or service account of your choice, bound with `--user` / `--group` /
  `--service-account`): create, read and delete its pods and ConfigMaps in the namespace; list nodes
  (to find the GPU nodes); with --cordon/--uncordon, patch nodes (preflight's taint, its labels) and
  nodes/status (the PreflightReady condition);
- the pods, as the `preflight` service account: read their input ConfigMap and write their output
  ConfigMaps in the namespace, nothing else.
"""

from __future__ import annotations

from typing import Any

from preflight.integrations.kubernetes.api import MANAGED_BY, MANAGER
from preflight.integrations.kubernetes.bridge import pod_manifest
from preflight.integrations.kubernetes.runs import EXPIRES_LABEL

POD_ACCOUNT = "preflight"
RUNNER_ROLE = "preflight-runner"


def objects(namespace: str, *, user: str | None = None, group: str | None = None,
            service_account: str | None = None, cordon: bool = True, image: str = "registry.example/team/train:tag") -> list[dict[str, Any]]:
    labels = {MANAGED_BY: MANAGER}
    meta = lambda name, ns=True: {"name": name, "labels": labels, **({"namespace": namespace} if ns else {})}  # noqa: E731
    subjects: list[dict[str, Any]] = []
    if user:
        subjects.append({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"})
    if group:
        subjects.append({"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"})
    if service_account:
        ns, _, name = service_account.rpartition("/")
        subjects.append({"kind": "ServiceAccount", "name": name, "namespace": ns or namespace})
    node_verbs = ["get", "list", "watch"] + (["patch"] if cordon else [])
    found: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(POD_ACCOUNT)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("preflight-pod"),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta("preflight-pod"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "preflight-pod"},
         "subjects": [{"kind": "ServiceAccount", "name": POD_ACCOUNT, "namespace": namespace}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(RUNNER_ROLE),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete",
                                                                         "deletecollection"]},
                   {"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["create", "get", "list", "patch", "delete", "deletecollection"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(RUNNER_ROLE, ns=False),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": node_verbs}]
         + ([{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}] if cordon else [])},
    ]
    if subjects:
        found += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(RUNNER_ROLE),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER_ROLE},
             "subjects": subjects},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": meta(f"{RUNNER_ROLE}-{namespace}", ns=False),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNNER_ROLE},
             "subjects": subjects},
        ]
    # The run's deadline and record are filled in per run (preflight.integrations.kubernetes.runs).
    pod = pod_manifest("preflight-run-id-node-name", "node-name", image, "python3", POD_ACCOUNT, 8,
                       {MANAGED_BY: MANAGER, "preflight.dev/run": "run-id", "preflight.dev/node": "node-name",
                        EXPIRES_LABEL: "1767225600"},
                       "preflight-run-id-node-name-in", "preflight-run-id-node-name-out",
                       ["python3", "-m", "preflight.workers.guard", "--stdin", "--", "python3", "-m",
                        "preflight.engine.agent"], deadline_s=3600)
    pod["metadata"]["namespace"] = namespace
    found.append(pod)
    return found


def render(namespace: str, **options: Any) -> str:
    import yaml

    docs = objects(namespace, **options)
    head = ("# preflight on Kubernetes: the service account of its pods, the least-privilege roles, and the\n"
            "# pod each node check runs in (run-id, node-name, the run's deadline and its owner, the run's\n"
            "# record, are filled in per run; the pod is created by preflight itself, shown here for review only).\n")
    return head + "\n".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
