"""Nothing left behind on Kubernetes, even after SIGKILL: a coordinator killed for real mid-run leaves its
pods and ConfigMaps, each with the run's deadline and owner; `preflight k8s cleanup` removes them all
and ends what ran in the pods, and a run still going is never touched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import preflight_cmd, run_preflight
from tests.k8s.conftest import CPU_NODES, k8s_env
from tests.k8s.kubelet import Kubelet

pytestmark = pytest.mark.k8s


def _ours(kube):
    """Every pod and ConfigMap preflight made in the namespace, labelled or not (names start preflight-)."""
    admin, ns = kube["admin"], kube["namespace"]
    return ([p.metadata.name for p in admin.list_namespaced_pod(ns).items if p.metadata.name.startswith("preflight-")]
            + [c.metadata.name for c in admin.list_namespaced_config_map(ns).items
               if c.metadata.name.startswith("preflight-")])


def _wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_a_coordinator_killed_with_sigkill_leaves_objects_that_cleanup_removes(kube, tmp_path):
    admin, ns = kube["admin"], kube["namespace"]
    assert _ours(kube) == []
    argv = preflight_cmd("run", "--k8s", "--namespace", ns, "--selector", "role=cpu", "--image",
                         "registry.example/team/train:1", "--remote-python", kube["python"], "--checks",
                         "example.sleep", "--set", "example.sleep.seconds=120", "--out", str(tmp_path / "out"),
                         "--no-history")
    with Kubelet(admin, kube["bed"], ns, CPU_NODES, python=kube["python"]) as kubelet:
        coordinator = subprocess.Popen(argv, cwd=tmp_path, env=k8s_env(kube["runner"]), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            def running() -> bool:  # every node's pod runs and has written output (its agent said hello)
                pods = [p for p in admin.list_namespaced_pod(ns).items if p.status and p.status.phase == "Running"]
                outputs = [c for c in admin.list_namespaced_config_map(ns).items if "-out-" in c.metadata.name]
                return len(pods) == len(CPU_NODES) and len(outputs) >= len(CPU_NODES)

            _wait(lambda: running() or coordinator.poll() is not None, 120, "the run's pods never all ran")
            assert coordinator.poll() is None, coordinator.communicate()[0][-3000:]
            # The coordinator and everything it started (its bridges, which run in sessions of their own
            # and would otherwise clean up after it) die at once, as on a machine that is lost.
            import psutil

            started = psutil.Process(coordinator.pid).children(recursive=True)
            os.killpg(coordinator.pid, signal.SIGKILL)
            for child in started:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            coordinator.wait(10)
        finally:
            if coordinator.poll() is None:
                os.killpg(coordinator.pid, signal.SIGKILL)
                coordinator.wait(10)
            coordinator.stdout.close()
        pods = admin.list_namespaced_pod(ns).items
        assert len(pods) == len(CPU_NODES)
        deadline = int(pods[0].metadata.labels["preflight.dev/expires"])
        assert 120 < deadline - time.time() < 3600  # the checks' timeouts, the start timeout and a margin
        assert all(p.spec.active_deadline_seconds and p.metadata.owner_references for p in pods)
        maps = admin.list_namespaced_config_map(ns).items
        record = [m for m in maps if (m.metadata.labels or {}).get("preflight.dev/role") == "run"]
        assert len(record) == 1 and pods[0].metadata.owner_references[0].uid == record[0].metadata.uid
        outputs = [m for m in maps if "-out-" in m.metadata.name]
        assert outputs and all(m.metadata.labels.get("preflight.dev/expires") for m in outputs)

        dry = run_preflight("k8s", "cleanup", "--namespace", ns, "--dry-run", cwd=tmp_path,
                            env=k8s_env(kube["runner"]), timeout=60)
        assert dry.returncode == 0 and "coordinator" in dry.stdout and "is gone" in dry.stdout, dry.stdout
        assert len(_ours(kube)) == len(pods) + len(maps)  # a dry run removes nothing
        done = run_preflight("k8s", "cleanup", "--namespace", ns, cwd=tmp_path, env=k8s_env(kube["runner"]),
                             timeout=60)
        assert done.returncode == 0 and f"{len(CPU_NODES)} pod(s)" in done.stdout, done.stdout + done.stderr
        _wait(lambda: _ours(kube) == [], 60, f"left behind: {_ours(kube)}")
        _wait(lambda: kubelet.running() == [], 30, f"still running in the pods: {kubelet.running()}")
    again = run_preflight("k8s", "cleanup", "--namespace", ns, cwd=tmp_path, env=k8s_env(kube["runner"]), timeout=60)
    assert again.returncode == 0 and "nothing" in again.stdout


def test_cleanup_leaves_a_live_run_alone_and_needs_run_for_force(kube, tmp_path):
    from kubernetes import client, config

    from preflight.integrations.kubernetes.runs import RunRecord, runs_in

    api = client.CoreV1Api(config.new_client_from_config(config_file=kube["runner"]))
    record = RunRecord.create(api, kube["namespace"], "alive-run", budget_s=60)
    try:
        kept = run_preflight("k8s", "cleanup", "--namespace", kube["namespace"], cwd=tmp_path,
                             env=k8s_env(kube["runner"]), timeout=60)
        assert kept.returncode == 0 and "kept run alive-run" in kept.stdout, kept.stdout
        assert [r.run_id for r in runs_in(api, kube["namespace"])] == ["alive-run"]
        refused = run_preflight("k8s", "cleanup", "--namespace", kube["namespace"], "--force", cwd=tmp_path,
                                env=k8s_env(kube["runner"]), timeout=60)
        assert refused.returncode == 2 and "--run" in refused.stderr
        forced = run_preflight("k8s", "cleanup", "--namespace", kube["namespace"], "--run", "alive-run", "--force",
                               cwd=tmp_path, env=k8s_env(kube["runner"]), timeout=60)
        assert forced.returncode == 0 and runs_in(api, kube["namespace"]) == []
    finally:
        record.stop_heartbeat()
        api.delete_collection_namespaced_config_map(kube["namespace"], label_selector="preflight.dev/run=alive-run")


def test_every_run_first_removes_what_runs_that_are_over_left(kube, tmp_path):
    from kubernetes import client, config

    from preflight.integrations.kubernetes.runs import ROLE_LABEL, RUN_ROLE, run_object_labels, runs_in

    api = client.CoreV1Api(config.new_client_from_config(config_file=kube["runner"]))
    ns = kube["namespace"]
    past = int(time.time()) - 5
    for name, extra in (("preflight-run-expired-run", {ROLE_LABEL: RUN_ROLE}), ("preflight-expired-run-n1-in", {})):
        api.create_namespaced_config_map(ns, {"metadata": {"name": name,
                                                           "labels": {**run_object_labels("expired-run", past), **extra}}})
    # Objects of a preflight that wrote no deadline are not a sweep's to judge.
    api.create_namespaced_config_map(ns, {"metadata": {"name": "preflight-legacy-in", "labels": {
        "app.kubernetes.io/managed-by": "preflight", "preflight.dev/run": "legacy-run"}}})
    try:
        with Kubelet(kube["admin"], kube["bed"], ns, CPU_NODES, python=kube["python"]):
            run = run_preflight("run", "--k8s", "--namespace", ns, "--selector", "role=cpu", "--image",
                                "registry.example/team/train:1", "--remote-python", kube["python"], "--checks",
                                "node.environment", "--out", str(tmp_path / "out"), "--no-history", cwd=tmp_path,
                                env=k8s_env(kube["runner"]), timeout=240)
        assert "removed 2 object(s) of run expired-run (its deadline has passed)" in run.stderr, run.stderr[-3000:]
        assert [r.run_id for r in runs_in(api, ns)] == ["legacy-run"]
    finally:
        api.delete_collection_namespaced_config_map(ns, label_selector="preflight.dev/run in (legacy-run,expired-run)")
    assert _ours(kube) == []
