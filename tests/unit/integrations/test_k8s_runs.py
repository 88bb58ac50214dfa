"""A Kubernetes run's objects carry their deadline and owner; which runs are over (pure parts)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from preflight.integrations.kubernetes import runs
from preflight.integrations.kubernetes.bridge import pod_manifest, parse
from preflight.transport.k8s import K8sTransport


def _record(**annotations):
    return SimpleNamespace(metadata=SimpleNamespace(annotations=annotations))


def _me(**extra):
    pid = os.getpid()
    return {runs.BOOT_ID: runs._boot_id(), runs.PID: str(pid), runs.PID_START: runs._start_ticks(pid),
            runs.HEARTBEAT: str(int(time.time())), **extra}


def test_a_run_with_a_live_coordinator_and_a_fresh_heartbeat_is_running():
    assert runs.dead_reason(_record(**_me()), int(time.time()) + 60, time.time()) == ""


def test_a_run_past_its_deadline_is_over_whatever_else():
    assert "deadline" in runs.dead_reason(_record(**_me()), int(time.time()) - 1, time.time())


def test_a_run_without_its_record_is_over():
    assert "record is gone" in runs.dead_reason(None, int(time.time()) + 60, time.time())


def test_a_run_whose_heartbeat_stopped_is_over():
    now = time.time()
    stale = _me(**{runs.HEARTBEAT: str(int(now - runs.STALE_S - 5)), runs.BOOT_ID: "another-machine"})
    assert "no heartbeat" in runs.dead_reason(_record(**stale), int(now) + 600, now)


def test_a_run_whose_coordinator_process_is_gone_on_this_machine_is_over():
    gone = _me(**{runs.PID_START: "1"})  # this pid, but another process start: the pid was reused
    assert "coordinator" in runs.dead_reason(_record(**gone), int(time.time()) + 600, time.time())
    elsewhere = _me(**{runs.BOOT_ID: "another-machine", runs.PID_START: "1"})
    assert runs.dead_reason(_record(**elsewhere), int(time.time()) + 600, time.time()) == ""


def test_pods_carry_the_deadline_and_the_owner():
    owner = runs.owner_reference("r1", "uid-1")
    pod = pod_manifest("p", "n1", "img", "python3", "preflight", 0, {"a": "b"}, "p-in", "p-out", ["true"],
                       deadline_s=90, owner=owner)
    assert pod["spec"]["activeDeadlineSeconds"] == 90
    assert pod["metadata"]["ownerReferences"] == [owner] and owner["name"] == runs.record_name("r1")
    assert "activeDeadlineSeconds" not in pod_manifest("p", "n1", "img", "python3", "sa", 0, {}, "i", "o",
                                                       ["true"])["spec"]


def test_the_transport_passes_deadline_and_owner_to_the_bridge_and_keeps_them_in_its_spec():
    transport = K8sTransport("n1", namespace="ns", image="img", run_id="r1", expires=1234, owner_uid="uid-1")
    argv = transport.wrap(["true"])
    args = parse(argv[argv.index("--node"):])
    assert args.expires == 1234 and args.owner_uid == "uid-1"
    again = K8sTransport.from_spec(transport.to_spec())
    assert (again.expires, again.owner_uid) == (1234, "uid-1")


def test_labels_of_a_run_object_carry_the_deadline():
    labels = runs.run_object_labels("run 1", 1700000000, "gpu01")
    assert labels[runs.EXPIRES_LABEL] == "1700000000" and labels["preflight.dev/node"] == "gpu01"


class _Channel:
    def __init__(self, input_data):
        self.input, self.written = input_data, []

    def read_input(self):
        return self.input

    def write_output(self, index, data, create):
        self.written.append((index, dict(data), create))


class _Proc:
    def __init__(self):
        self.raw_lines, self.stderr_lines, self.closed = [], [], False

    def write(self, text):
        pass

    def close_stdin(self):
        self.closed = True


def test_a_pod_whose_input_is_gone_writes_no_new_output_object():
    from preflight.integrations.kubernetes.pod import Pump

    pump = Pump(_Channel(None), _Proc())
    pump.feed()  # the input ConfigMap was deleted: the run was cleaned up or its bridge is gone
    assert pump.orphaned and pump.proc.closed
    pump.flush(exit_code=0)
    assert pump.channel.written == []  # nothing that no one would delete
    live = Pump(_Channel({"stdin": "", "closed": "1"}), _Proc())
    live.proc.raw_lines.append("hello")
    live.feed()
    live.flush()
    live.channel.input = None
    live.feed()
    live.flush(exit_code=0)  # its output object exists: the exit is still written into it
    assert [(i, create) for i, _, create in live.channel.written] == [(0, True), (0, False)]
