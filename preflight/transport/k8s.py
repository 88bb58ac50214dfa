"""A Kubernetes node: commands run in a pod pinned to it, reached through the API server only.

`wrap(argv)` gives an argv that runs here: `python -m preflight.integrations.kubernetes.bridge`,
which creates the pod on the node (the team's own image, the node's GPUs, host networking),
forwards stdin to it and its output back through ConfigMaps, and deletes everything it created
when the command ends or when it is stopped. So the runner, the agent and the cluster checks use
it exactly like SSH or srun: this module knows nothing about checks or the API.

The bridge exits 255 when the pod never ran (still Pending at its start deadline, refused by the
API server, no permission): a transport failure, as ssh's 255 is.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from preflight.transport.base import Transport

# Named, not imported: the transport layer may not import preflight.integrations (tests/unit/test_layers.py).
# tests/unit/transport/test_module_names.py keeps the name importable, as a program, and its exit code agreed.
BRIDGE_MODULE = "preflight.integrations.kubernetes.bridge"
BRIDGE_FAILURE_EXIT = 255
# A Kubernetes node name is a DNS subdomain.
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class K8sTransport(Transport):
    kind = "k8s"
    client = "kubernetes"

    def __init__(self, name: str, address: str | None = None, python: str = "python3", *, namespace: str,
                 image: str, run_id: str, context: str | None = None, kubeconfig: str | None = None,
                 gpus: int = 0, start_timeout_s: float = 120.0, coordinator_python: str | None = None,
                 service_account: str = "preflight", expires: int | None = None, owner_uid: str = "") -> None:
        if not _NODE_NAME.match(name or ""):
            raise ValueError(f"invalid Kubernetes node name {name!r}")
        super().__init__(name, address or name, python)
        self.namespace, self.image, self.run_id = namespace, image, run_id
        self.context, self.kubeconfig, self.gpus = context, kubeconfig, int(gpus)
        self.start_timeout_s = float(start_timeout_s)
        self.coordinator_python = coordinator_python or sys.executable
        self.service_account = service_account
        # The run's deadline (Unix seconds) and its run record: every pod and ConfigMap carries both.
        self.expires, self.owner_uid = expires, owner_uid

    def bridge_argv(self) -> list[str]:
        argv = [self.coordinator_python, "-m", BRIDGE_MODULE, "--node", self.name, "--namespace", self.namespace,
                "--image", self.image, "--run-id", self.run_id, "--python", self.python, "--gpus", str(self.gpus),
                "--start-timeout", f"{self.start_timeout_s:g}", "--service-account", self.service_account]
        if self.expires is not None:
            argv += ["--expires", str(int(self.expires))]
        if self.owner_uid:
            argv += ["--owner-uid", self.owner_uid]
        if self.context:
            argv += ["--context", self.context]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        return [*argv, "--"]

    def wrap(self, argv: list[str]) -> list[str]:
        if not argv:
            raise ValueError("empty command")
        return [*self.bridge_argv(), *argv]

    def is_transport_failure(self, returncode: int) -> bool:
        return returncode == BRIDGE_FAILURE_EXIT

    def connect(self, timeout: float | None = None) -> None:
        """Run `true` in a pod on the node; TransportError with the API server's or scheduler's words."""
        limit = timeout if timeout is not None else self.start_timeout_s + 30
        self._connect_with_true(limit, client="kubernetes", binary=self.coordinator_python,
                                no_answer=f"no pod ran on {self.name}", failed=f"cannot run a pod on {self.name}",
                                last_line=True)

    def to_spec(self) -> dict[str, Any]:
        return {**super().to_spec(), "namespace": self.namespace, "image": self.image, "run_id": self.run_id,
                "context": self.context, "kubeconfig": self.kubeconfig, "allocatable_gpus": self.gpus,
                "start_timeout_s": self.start_timeout_s, "coordinator_python": self.coordinator_python,
                "service_account": self.service_account, "expires": self.expires, "owner_uid": self.owner_uid}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> K8sTransport:
        return cls(spec["name"], spec.get("address"), spec.get("python") or "python3", namespace=spec["namespace"],
                   image=spec["image"], run_id=spec["run_id"], context=spec.get("context"),
                   kubeconfig=spec.get("kubeconfig"), gpus=int(spec.get("allocatable_gpus") or 0),
                   start_timeout_s=float(spec.get("start_timeout_s", 120.0)),
                   coordinator_python=spec.get("coordinator_python"),
                   service_account=spec.get("service_account") or "preflight", expires=spec.get("expires"),
                   owner_uid=spec.get("owner_uid") or "")

    def __repr__(self) -> str:
        return f"K8sTransport({self.name!r}, namespace {self.namespace})"
