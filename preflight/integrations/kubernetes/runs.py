"""Every run's objects carry their owner and their expiry, so nothing is left behind, even after SIGKILL.

A Kubernetes run first creates its run record, a ConfigMap `preflight-run-<id>` labelled with the
run id and with the deadline by which the whole run must be over (`preflight.dev/expires`, Unix
seconds: the checks' timeouts, the pods' start timeout and a margin). Its annotations say who runs
it (host, boot id, pid and the process's start time) and when it last said it was alive
(`preflight.dev/heartbeat`, renewed every HEARTBEAT_S by the coordinator while it runs). Every pod
and ConfigMap of the run carries the same labels, an ownerReference to the record (so a cluster's
garbage collector removes them with it), and every pod `activeDeadlineSeconds` up to the deadline
(so the kubelet ends it even when nobody is left to delete it).

A run is dead when (`dead_reason`):
- its deadline has passed; or
- its record is gone (the record is made first and deleted last); or
- its heartbeat is older than STALE_S; or
- its coordinator ran on this machine (same boot id) and that process is gone.

The objects of dead runs are deleted by every Kubernetes run when it starts (`sweep_dead`), and by
`preflight k8s cleanup`, which also lists what it removes. Objects without an expiry label come
from a preflight that did not write one: only `cleanup --run ID` touches them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from preflight.integrations.kubernetes.api import MANAGED_BY, MANAGER, MERGE, RUN_LABEL, api_error, label_value, \
    object_name, run_labels, run_selector

EXPIRES_LABEL = "preflight.dev/expires"
ROLE_LABEL = "preflight.dev/role"
RUN_ROLE = "run"
HEARTBEAT = "preflight.dev/heartbeat"
HOST = "preflight.dev/coordinator-host"
BOOT_ID = "preflight.dev/coordinator-boot-id"
PID = "preflight.dev/coordinator-pid"
PID_START = "preflight.dev/coordinator-start"
HEARTBEAT_S = 15.0
STALE_S = 120.0  # eight missed heartbeats: a coordinator this quiet is gone
MARGIN_S = 300.0  # beyond the checks' timeouts: starting pods, the cluster checks' own setup, cleanup


def record_name(run_id: str) -> str:
    return object_name("preflight-run", run_id)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """The process's start time since boot (clock ticks, /proc/PID/stat field 22), "" when unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


def run_object_labels(run_id: str, expires: int, node: str | None = None) -> dict[str, str]:
    """The labels of every object of the run: who manages it, the run, the node, the deadline."""
    return {**run_labels(run_id, node), EXPIRES_LABEL: str(int(expires))}


def owner_reference(run_id: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": record_name(run_id), "uid": uid,
            "blockOwnerDeletion": False}


@dataclass
class RunRecord:
    """This run's record in the API server, kept alive by a heartbeat while the run goes on."""

    api: Any
    namespace: str
    run_id: str
    expires: int
    uid: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def create(cls, api: Any, namespace: str, run_id: str, budget_s: float) -> RunRecord:
        expires = int(time.time() + max(0.0, budget_s) + MARGIN_S)
        record = cls(api, namespace, run_id, expires)
        pid = os.getpid()
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": record_name(run_id),
            "labels": {**run_object_labels(run_id, expires), ROLE_LABEL: RUN_ROLE},
            "annotations": {HEARTBEAT: str(int(time.time())), HOST: socket.gethostname(), BOOT_ID: _boot_id(),
                            PID: str(pid), PID_START: _start_ticks(pid)}}}
        try:
            made = api.create_namespaced_config_map(namespace, body)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"creating the run record {record_name(run_id)} in {namespace}") from None
        record.uid = str(getattr(made.metadata, "uid", "") or "")
        return record

    def beat(self) -> None:
        try:
            self.api.patch_namespaced_config_map(record_name(self.run_id), self.namespace, {"metadata": {
                "annotations": {HEARTBEAT: str(int(time.time()))}}}, _content_type=MERGE)
        except Exception:  # noqa: BLE001,S110 - a missed beat is retried; STALE_S allows for several
            pass

    def start_heartbeat(self, interval_s: float = HEARTBEAT_S) -> RunRecord:
        def loop() -> None:
            while not self._stop.wait(interval_s):
                self.beat()

        self._thread = threading.Thread(target=loop, name="preflight-k8s-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop_heartbeat(self) -> None:
        self._stop.set()


def _process_gone(annotations: dict[str, str]) -> bool:
    """True when the coordinator ran on this machine (same boot) and its process is no longer there."""
    boot = annotations.get(BOOT_ID, "")
    if not boot or boot != _boot_id():
        return False
    try:
        pid = int(annotations.get(PID, ""))
    except ValueError:
        return False
    started, recorded = _start_ticks(pid), annotations.get(PID_START, "")
    return not started or bool(recorded) and started != recorded  # gone, or the pid is another process now


def dead_reason(record: Any | None, expires: int | None, now: float) -> str:
    """Why a run is over ("" while it may still be running): `record` is its run record (None: gone)."""
    if expires is not None and now > expires:
        return "its deadline has passed"
    if record is None:
        return "its run record is gone"
    annotations = dict(record.metadata.annotations or {})
    try:
        beat = float(annotations.get(HEARTBEAT, ""))
    except ValueError:
        beat = None
    if _process_gone(annotations):
        return f"its coordinator (pid {annotations.get(PID)} on {annotations.get(HOST)}) is gone"
    if beat is not None and now - beat > STALE_S:
        return f"no heartbeat for {now - beat:.0f}s"
    return ""


@dataclass
class LeftRun:
    """The objects of one run in the namespace, and whether (and why) that run is over."""

    run_id: str
    pods: list[str] = field(default_factory=list)
    config_maps: list[str] = field(default_factory=list)
    expires: int | None = None
    dead: str = ""  # why it is over; "" while it may still be running

    @property
    def count(self) -> int:
        return len(self.pods) + len(self.config_maps)


def _expires(labels: dict[str, str]) -> int | None:
    try:
        return int(labels.get(EXPIRES_LABEL, ""))
    except ValueError:
        return None


def runs_in(api: Any, namespace: str, now: float | None = None) -> list[LeftRun]:
    """Every run that has objects in the namespace, oldest deadline first, each judged alive or dead."""
    now = time.time() if now is None else now
    selector = f"{MANAGED_BY}={MANAGER},{RUN_LABEL}"
    try:
        pods = api.list_namespaced_pod(namespace, label_selector=selector).items
        maps = api.list_namespaced_config_map(namespace, label_selector=selector).items
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"listing preflight's objects in {namespace}") from None
    runs: dict[str, LeftRun] = {}
    records: dict[str, Any] = {}
    for kind, items in (("pod", pods), ("map", maps)):
        for item in items:
            labels = dict(item.metadata.labels or {})
            run = runs.setdefault(labels[RUN_LABEL], LeftRun(labels[RUN_LABEL]))
            (run.pods if kind == "pod" else run.config_maps).append(item.metadata.name)
            expires = _expires(labels)
            if expires is not None:
                run.expires = expires if run.expires is None else min(run.expires, expires)
            if kind == "map" and labels.get(ROLE_LABEL) == RUN_ROLE:
                records[run.run_id] = item
    for run in runs.values():
        run.dead = dead_reason(records.get(run.run_id), run.expires, now)
    return sorted(runs.values(), key=lambda r: (r.expires or 0, r.run_id))


def delete_run(api: Any, namespace: str, run_id: str) -> int:
    """Delete every pod and ConfigMap of the run (pods without waiting for a grace period they no longer
    need), the run record last; how many objects there were."""
    selector = run_selector(run_id)
    try:
        pods = api.list_namespaced_pod(namespace, label_selector=selector).items
        maps = api.list_namespaced_config_map(namespace, label_selector=selector).items
        for pod in pods:
            started = pod.status is not None and pod.status.phase not in (None, "Pending")
            api.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=5 if started else 0)
        others = [m for m in maps if (m.metadata.labels or {}).get(ROLE_LABEL) != RUN_ROLE]
        if others:
            api.delete_collection_namespaced_config_map(namespace, label_selector=f"{selector},!{ROLE_LABEL}")
        for record in (m for m in maps if m not in others):
            api.delete_namespaced_config_map(record.metadata.name, namespace)
    except Exception as exc:  # noqa: BLE001
        if getattr(exc, "status", None) == 404:
            return 0
        raise api_error(exc, f"cleaning up run {run_id} in {namespace}") from None
    return len(pods) + len(maps)


def sweep_dead(api: Any, namespace: str, now: float | None = None, only: str | None = None,
               force: bool = False) -> list[LeftRun]:
    """Delete the objects of every dead run that wrote an expiry (or of run `only`: dead, or any with
    `force`); the runs it removed."""
    removed = []
    for run in runs_in(api, namespace, now):
        if only is not None and run.run_id != label_value(only):
            continue
        if only is None and run.expires is None:
            continue  # written by a preflight that set no expiry: only an explicit --run removes it
        if not run.dead and not force:
            continue
        delete_run(api, namespace, run.run_id)
        removed.append(run)
    return removed
