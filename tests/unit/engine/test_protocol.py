"""The written seam between coordinator, step driver, agent and check child: every message goes to
a dict and back unchanged, and a message of another version or a malformed one is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from preflight.core.model import Status
from preflight.engine.protocol import (PROTOCOL_VERSION, CheckJob, CheckSpec, NodeJob, NodeLost, NodeReached,
                                       ProtocolError, Result, Started, addressed_node)
from tests.conftest import make_result

CHECK_JOB = CheckJob(check_id="net.bandwidth", node="cluster", output_dir="/tmp/run", timeout_s=120.0,
                     scratch_dir="/tmp/run/.scratch", params={"min_gbps": 10}, expect={"gpus_per_node": 8},
                     nodes=[{"name": "gpu01", "slots": 8}], node_facts={"gpu01": {"gpu.visibility": {"count": 8}}},
                     unreachable=["gpu02"])
NODE_JOB = NodeJob(node="gpu01", checks=[CheckSpec("gpu.visibility", 60.0, {"probe_tensorflow": False})],
                   expect={"gpus_per_node": 8}, output_dir="/tmp/run", scratch_dir="/tmp/run/.s",
                   coordinator_version="1.2.3")
SHARED_JOB = NodeJob(node=None, checks=[CheckSpec("a.one", 5.0)], node_env="SLURMD_NODENAME", max_line=900,
                     nodes={"n1": {}, "n2": {"expect": {"gpus_per_node": 4}}})
MESSAGES = [CHECK_JOB, NODE_JOB, SHARED_JOB, Started("gpu01", "gpu.visibility"), NodeReached("gpu01"),
            NodeLost("gpu02", "cannot reach gpu02 over SSH: no route"),
            Result(make_result("gpu.visibility", "gpu01", Status.FAIL, "3 of 8 GPUs"))]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_goes_through_json_and_back_unchanged(message):
    data = json.loads(json.dumps(message.to_dict()))
    assert data["protocol"] == PROTOCOL_VERSION
    back = type(message).from_dict(data)
    if isinstance(message, Result):
        assert back.result.to_dict() == message.result.to_dict()
    else:
        assert back == message


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_another_protocol_version_is_refused_with_the_version_named(message):
    for version in (PROTOCOL_VERSION + 1, None):
        data = {**message.to_dict(), "protocol": version}
        if version is None:
            del data["protocol"]
        with pytest.raises(ProtocolError, match=f"protocol version {version!r}, this preflight speaks {PROTOCOL_VERSION}"):
            type(message).from_dict(data)


@pytest.mark.parametrize(("kind", "data", "words"), [
    (CheckJob, {k: v for k, v in CHECK_JOB.to_dict().items() if k != "check_id"}, "check job: missing 'check_id'"),
    (CheckJob, {**CHECK_JOB.to_dict(), "timeout_s": "soon"}, "check job: 'timeout_s' should be float, got str"),
    (CheckJob, {**CHECK_JOB.to_dict(), "timeout_s": True}, "'timeout_s' should be float, got bool"),
    (CheckJob, {**CHECK_JOB.to_dict(), "params": [1]}, "check job: 'params' should be dict, got list"),
    (CheckJob, ["not", "an", "object"], "check job: expected a JSON object, got list"),
    (NodeJob, {**NODE_JOB.to_dict(), "checks": [{"id": "a.one"}]}, "node job check: missing 'timeout_s'"),
    (NodeJob, {**NODE_JOB.to_dict(), "checks": ["a.one"]}, "node job: a check should be an object, got str"),
    (NodeJob, {**SHARED_JOB.to_dict(), "nodes": {"n1": 3}}, "node job: node 'n1' should be an object"),
    (NodeJob, {**NODE_JOB.to_dict(), "max_line": "900"}, "node job: 'max_line' should be int, got str"),
    (Started, {**Started("n1", "a.one").to_dict(), "event": "result"}, "started event: 'event' is 'result'"),
    (NodeLost, {"protocol": PROTOCOL_VERSION, "event": "node_lost", "node": "n1"}, "node_lost event: missing 'reason'"),
    (Result, {"protocol": PROTOCOL_VERSION, "event": "result", "result": {"node": "n1"}}, "result event: not a check result"),
])
def test_a_malformed_message_is_refused_naming_what_is_wrong(kind, data, words):
    with pytest.raises(ProtocolError, match=words.replace("(", r"\(").replace(")", r"\)")):
        kind.from_dict(data)


def test_a_task_finds_its_node_even_in_a_job_it_cannot_read():
    data = {**SHARED_JOB.to_dict(), "protocol": 0}
    assert addressed_node(data, {"SLURMD_NODENAME": "n2"}) == "n2"
    assert addressed_node(data, {"SLURMD_NODENAME": "n9"}) is None
    assert addressed_node({"node": "gpu01"}, {}) == "gpu01"
    assert addressed_node({"node": 7}, {}) is None


def test_a_check_child_given_a_malformed_job_exits_2_naming_the_key(tmp_path):
    job = {**CHECK_JOB.to_dict(), "output_dir": str(tmp_path)}
    del job["timeout_s"]
    proc = subprocess.run([sys.executable, "-m", "preflight.engine.check_process"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "preflight check process: check job: missing 'timeout_s'" in proc.stderr
