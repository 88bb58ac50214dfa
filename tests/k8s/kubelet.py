"""A stand-in for the kubelet of the test nodes, for preflight's own pods only.

No kubelet or container runtime can run on the test machines, so this plays the kubelet's part
against the real API server: it watches the pods bound (spec.nodeName) to the nodes it serves, runs
each pod's command as a local process with the pod's environment and a kubeconfig holding a token
of the pod's service account (from the TokenRequest API, so RBAC applies to the pod as it would in
a cluster), reports the pod's phase and its container's exit through the status subresource, and
ends the process when the pod is deleted, then confirms the deletion, and ends a pod past its
activeDeadlineSeconds (phase Failed, reason DeadlineExceeded) as a kubelet does. A node may get a
private, small /dev/shm (a planted fault). With `netns` (node -> network namespace of the test bed,
tests/cluster/testbed.py) each node's pods run inside that node's namespace, with host networking
meaning the node's own address, and reach the API server through `server` (a relay on the bed's
bridge). Pods of nodes it does not serve stay Pending, as they would on a node whose kubelet is
gone. preflight's code does not know it is there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.nvml.standin import OVERLAY_LIBS, SYSTEM_LIBRARY_DIR

STRATEGIC = "application/strategic-merge-patch+json"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, api: Any, bed: Any, namespace: str, nodes: list[str], shm: dict[str, str] | None = None,
                 python: str | None = None, libs: dict[str, Path] | None = None,
                 netns: dict[str, str] | None = None, server: str | None = None,
                 addresses: dict[str, str] | None = None) -> None:
        self.api, self.bed, self.ns, self.nodes = api, bed, namespace, set(nodes)
        self.shm = shm or {}
        # Node -> a directory of libraries laid over the system library directory for that node's pods
        # (the stand-in NVML library, as a driver installed on that node only).
        self.libs = libs or {}
        self.python = python
        self.netns, self.server, self.addresses = netns or {}, server, addresses or {}
        self.started_at: dict[str, float] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = threading.Event()
        self.dir = Path(tempfile.mkdtemp(prefix="preflight-kubelet-"))
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.started_pods: list[str] = []

    def __enter__(self) -> "Kubelet":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.thread.join(10)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def running(self) -> list[str]:
        """What still runs of the pods this kubelet started (every process in a pod's work directory)."""
        import psutil

        found = []
        for proc in psutil.process_iter(["pid", "cwd", "cmdline"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(str(self.dir)):
                found.append(f"{proc.info['pid']} {' '.join(proc.info.get('cmdline') or [])}")
        return found

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - keep serving; a failed sync is retried
                print(f"kubelet stand-in: {exc}")
            self.stopping.wait(0.3)

    def _sync(self) -> None:
        pods = self.api.list_namespaced_pod(self.ns).items
        seen = set()
        for pod in pods:
            name, node = pod.metadata.name, pod.spec.node_name
            if node not in self.nodes:
                continue
            seen.add(name)
            proc = self.procs.get(name)
            if pod.metadata.deletion_timestamp is not None:
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(25)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(5)
                self.api.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
                self.procs.pop(name, None)
                continue
            deadline = pod.spec.active_deadline_seconds
            if proc is not None and proc.poll() is None and deadline is not None \
                    and time.monotonic() - self.started_at.get(name, time.monotonic()) > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
                self._finished(pod, 137, reason="DeadlineExceeded")
                continue
            if proc is None and (pod.status is None or pod.status.phase in (None, "Pending")):
                self._start(pod)
            elif proc is not None and proc.poll() is not None and pod.status.phase == "Running":
                self._finished(pod, proc.returncode)

    def _start(self, pod: Any) -> None:
        name, node = pod.metadata.name, pod.spec.node_name
        container = pod.spec.containers[0]
        token = self.api.create_namespaced_service_account_token(
            pod.spec.service_account_name or "default", self.ns,
            {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}}).status.token
        kubeconfig = self.bed.kubeconfig(f"pod-{name}", token, server=self.server)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        for item in container.env or []:
            if item.value_from is not None and item.value_from.field_ref is not None:
                env[item.name] = {"metadata.namespace": self.ns, "metadata.name": name,
                                  "spec.nodeName": node}.get(item.value_from.field_ref.field_path, "")
            else:
                env[item.name] = item.value or ""
        env["KUBECONFIG"] = str(kubeconfig)
        env["PREFLIGHT_TEST_NODE"] = node
        command = list(container.command or []) + list(container.args or [])
        if self.python and command and command[0] in ("python3", "python"):
            command[0] = self.python
        if node in self.shm or node in self.libs:
            script = (('mount -t tmpfs -o "size=$SHM,mode=1777" pft-shm /dev/shm && ' if node in self.shm else "")
                      + (OVERLAY_LIBS if node in self.libs else "")
                      + 'exec "$@"')
            command = ["unshare", "--mount", "env", f"SHM={self.shm.get(node, '')}", f"LIBS={self.libs.get(node, '')}",
                       f"SYSLIB={SYSTEM_LIBRARY_DIR}", "sh", "-c", script, "sh", *command]
        if node in self.netns:
            command = ["ip", "netns", "exec", self.netns[node], *command]
        workdir = self.dir / name
        workdir.mkdir(parents=True, exist_ok=True)
        log = open(workdir / "log", "wb")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.started_pods.append(name)
        self.started_at[name] = time.monotonic()
        address = self.addresses.get(node, "127.0.0.1")
        self.api.patch_namespaced_pod_status(name, self.ns, {"status": {
            "phase": "Running", "hostIP": address, "podIP": address, "startTime": _now(),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
            "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "", "ready": True,
                                   "restartCount": 0, "state": {"running": {"startedAt": _now()}}}]}},
            _content_type=STRATEGIC)

    def _finished(self, pod: Any, code: int, reason: str = "") -> None:
        container = pod.spec.containers[0]
        self.api.patch_namespaced_pod_status(pod.metadata.name, self.ns, {"status": {
            "phase": "Succeeded" if code == 0 else "Failed", **({"reason": reason} if reason else {}),
            "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "", "ready": False,
                                   "restartCount": 0, "state": {"terminated": {
                                       "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                       "startedAt": _now(), "finishedAt": _now()}}}]}},
            _content_type=STRATEGIC)
