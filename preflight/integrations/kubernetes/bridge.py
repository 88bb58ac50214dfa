"""`python -m preflight.integrations.kubernetes.bridge ... -- COMMAND`: run COMMAND in a pod on a node.

The coordinator-side end of K8sTransport (preflight.transport.k8s). It creates, in the run's
namespace, a ConfigMap for the command's stdin and a pod pinned to the node (`nodeName`, host
networking, the node's GPUs, tolerating every taint so a cordoned node can be checked again) that
runs `preflight.integrations.kubernetes.pod`; it forwards its own stdin into that ConfigMap and prints
what the pod writes into its output ConfigMaps, then exits with the command's exit code and deletes
what it created. Results travel through ConfigMaps rather than pod logs: they need nothing but the
API server (no kubelet port reachable from the coordinator, which may run outside the cluster), and
they stay readable after the container is gone.

Exit 255 means the pod never ran the command: still Pending at --start-timeout (the scheduler's or
kubelet's reason is printed), refused by the API server, or gone before it finished.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import uuid
from typing import Any

from preflight.integrations.kubernetes.api import KubernetesError, api_error, core_api, object_name, run_labels
from preflight.integrations.kubernetes.channel import Channel, read_output
from preflight.integrations.kubernetes.runs import EXPIRES_LABEL, owner_reference

FAILED = 255
POD_MODULE = "preflight.integrations.kubernetes.pod"
POLL_S = 0.5


def pod_manifest(name: str, node: str, image: str, python: str, service_account: str, gpus: int,
                 labels: dict[str, str], in_name: str, out_prefix: str, command: list[str],
                 deadline_s: int | None = None, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod that runs `command` on `node` (also printed by `preflight k8s manifests`). `deadline_s`
    (activeDeadlineSeconds) ends it when the run's deadline passes, whoever is left to delete it;
    `owner` is the run record it belongs to (preflight.integrations.kubernetes.runs)."""
    container: dict[str, Any] = {
        "name": "preflight",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [python, "-m", POD_MODULE, "--in", in_name, "--out", out_prefix, "--", *command],
        "env": [{"name": "PREFLIGHT_K8S_NAMESPACE",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
    }
    if gpus > 0:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"activeDeadlineSeconds": max(1, int(deadline_s))} if deadline_s is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, **({"ownerReferences": [owner]} if owner else {})},
        "spec": {
            **spec,
            "nodeName": node,
            "restartPolicy": "Never",
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "serviceAccountName": service_account,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 30,
            "containers": [container],
        },
    }


def pending_reason(pod: Any) -> str:
    """Why a pod has not started, in the scheduler's or kubelet's words."""
    status = pod.status
    for cond in (status.conditions or []) if status else []:
        if cond.status != "True" and (cond.reason or cond.message):
            return f"{cond.type}: {cond.reason or ''} {cond.message or ''}".strip()
    for cs in (status.container_statuses or []) if status else []:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None:
            return f"{waiting.reason or 'waiting'}: {waiting.message or ''}".strip()
    return "no kubelet started it (is the node Ready, and its kubelet running?)"


class Bridge:
    def __init__(self, api: Any, args: argparse.Namespace) -> None:
        self.api, self.args = api, args
        self.ns = args.namespace
        self.pod = object_name("preflight", args.run_id, args.node, uuid.uuid4().hex[:6])
        self.labels = {**run_labels(args.run_id, args.node), "preflight.dev/pod": self.pod}
        if args.expires is not None:
            self.labels[EXPIRES_LABEL] = str(int(args.expires))
        self.owner = owner_reference(args.run_id, args.owner_uid) if args.owner_uid else None
        self.channel = Channel(api, self.ns, self.pod, self.labels, self.owner)
        self.stopping = threading.Event()
        self.created = False
        self.ran = False  # the pod left Pending: its kubelet will confirm its deletion

    def start(self) -> None:
        self.channel.create_input()
        self.created = True
        body = pod_manifest(self.pod, self.args.node, self.args.image, self.args.python, self.args.service_account,
                            self.args.gpus, self.labels, self.channel.in_name, self.channel.out_prefix,
                            self.args.command, self._deadline_s(), self.owner)
        try:
            self.api.create_namespaced_pod(self.ns, body)
        except Exception as exc:  # noqa: BLE001 - ApiException and transport errors alike
            raise api_error(exc, f"creating pod {self.pod} on {self.args.node}") from None

    def _deadline_s(self) -> int | None:
        """Seconds from now to the run's deadline (the pod's activeDeadlineSeconds), None without one."""
        return None if self.args.expires is None else max(1, int(self.args.expires - time.time()))

    def forward_stdin(self) -> None:
        text = ""
        for line in sys.stdin:
            text += line
            self.channel.write_input(text, closed=False)
        self.channel.write_input(text, closed=True)

    def wait(self) -> int:
        deadline = time.monotonic() + self.args.start_timeout
        offsets: dict[str, int] = {}
        ran = False
        gone_at: float | None = None
        while not self.stopping.is_set():
            exit_code = read_output(self.channel, offsets, sys.stdout, sys.stderr)
            if exit_code is not None:
                return exit_code
            pod = self._read_pod()
            if pod is None:
                sys.stderr.write(f"pod {self.pod} on {self.args.node} was deleted before its command finished\n")
                return FAILED
            phase = pod.status.phase if pod.status else None
            if phase == "Pending" and not ran and time.monotonic() > deadline:
                sys.stderr.write(f"pod {self.pod} on {self.args.node} still Pending after "
                                 f"{self.args.start_timeout:.0f}s: {pending_reason(pod)}\n")
                return FAILED
            ran = ran or phase in ("Running", "Succeeded", "Failed")
            self.ran = ran
            if phase in ("Succeeded", "Failed"):
                gone_at = gone_at or time.monotonic()
                if time.monotonic() - gone_at > 10:  # the command's last words never arrived
                    sys.stderr.write(f"pod {self.pod} on {self.args.node} ended ({phase}) without reporting "
                                     f"its command's exit: {self._terminated(pod)}\n")
                    return FAILED
            self.stopping.wait(POLL_S)
        return 128 + signal.SIGTERM

    def _read_pod(self) -> Any:
        try:
            return self.api.read_namespaced_pod(self.pod, self.ns)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, f"reading pod {self.pod}") from None

    @staticmethod
    def _terminated(pod: Any) -> str:
        for cs in pod.status.container_statuses or []:
            term = cs.state.terminated if cs.state else None
            if term is not None:
                return f"{term.reason or 'terminated'} (exit {term.exit_code}) {term.message or ''}".strip()
        return "no container status"

    def cleanup(self) -> None:
        if not self.created:
            return
        try:
            # A pod that never started has no kubelet to confirm a graceful deletion: remove it at once.
            self.api.delete_namespaced_pod(self.pod, self.ns, grace_period_seconds=5 if self.ran else 0)
        except Exception:  # noqa: BLE001,S110 - already gone is fine; the run's end sweeps the rest
            pass
        self.channel.delete_all()


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--python", default="python3", help="the interpreter inside the image")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--service-account", default="preflight")
    parser.add_argument("--expires", type=int, default=None, help="the run's deadline, Unix seconds")
    parser.add_argument("--owner-uid", default=None, help="uid of the run record that owns the pod")
    parser.add_argument("--context")
    parser.add_argument("--kubeconfig")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command after --")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        bridge = Bridge(core_api(args.context, args.kubeconfig), args)
    except KubernetesError as exc:
        sys.stderr.write(f"{exc}\n")
        return FAILED

    def stop(*_: Any) -> None:
        bridge.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        bridge.start()
        threading.Thread(target=bridge.forward_stdin, daemon=True).start()
        return bridge.wait()
    except KubernetesError as exc:
        sys.stderr.write(f"{exc}\n")
        return FAILED
    finally:
        bridge.cleanup()
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
