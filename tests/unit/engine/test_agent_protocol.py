"""The agent's side of a job step shared by several nodes, and the coordinator's reading of one agent:
which node a task is, long lines in pieces, and how an agent's end decides its node's outcome."""

from __future__ import annotations

import io
import json

import preflight
from preflight.core.model import Status
from preflight.engine.agent import DONE, HELLO, MORE, RESULT, START, Agent
from preflight.engine.agent_stream import AgentStream
from preflight.engine.protocol import CheckSpec, NodeJob, NodeReached, Result, Started
from preflight.engine.slurm_step import SINGLE_STEP_FROM, use_single_step
from preflight.transport.local import LocalTransport
from preflight.transport.slurm import SlurmTransport
from tests.conftest import make_result


class Check:
    def __init__(self, check_id: str) -> None:
        self.id = check_id


def test_a_task_takes_its_own_part_of_a_shared_job_by_the_node_its_environment_names():
    job = NodeJob(node=None, node_env="SLURMD_NODENAME", expect={"gpus_per_node": None},
                  nodes={"n1": {}, "n2": {"expect": {"gpus_per_node": 8}}}, checks=[CheckSpec("a.one", 30.0)])
    assert job.own({"SLURMD_NODENAME": "n1"}).node == "n1"
    assert job.own({"SLURMD_NODENAME": "n1"}).expect == {"gpus_per_node": None}
    assert job.own({"SLURMD_NODENAME": "n2"}).expect == {"gpus_per_node": 8}
    assert job.own({"SLURMD_NODENAME": "n2"}).checks == [CheckSpec("a.one", 30.0)]
    assert job.own({"SLURMD_NODENAME": "n9"}).node is None
    assert job.own({}).node is None
    single = NodeJob(node="gpu01", checks=[])
    assert single.own({"SLURMD_NODENAME": "n1"}) is single


def test_long_lines_go_out_in_pieces_that_join_into_the_line():
    out = io.StringIO()
    agent = Agent(NodeJob(node="n1", max_line=100, checks=[]), out)
    payload = {"text": "x" * 450, "more": list(range(40))}
    agent.emit(RESULT, payload)
    agent.emit(DONE)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 100 for line in lines) and len(lines) > 5
    pieces = [line[len(MORE):] for line in lines[:-2]]
    assert all(line.startswith(MORE) for line in lines[:-2])
    assert json.loads(("".join(pieces) + lines[-2])[len(RESULT):]) == payload
    assert lines[-1] == DONE


def test_without_max_line_a_line_is_one_line():
    out = io.StringIO()
    Agent(NodeJob(node="n1", checks=[]), out).emit(RESULT, {"text": "x" * 5000})
    assert len(out.getvalue().splitlines()) == 1


def test_an_agent_stream_names_what_its_node_did_not_finish_and_why():
    events = []
    checks = [Check("a.one"), Check("a.two")]
    stream = AgentStream("gpu01", checks, events.append)  # type: ignore[arg-type]
    hello = HELLO + json.dumps({"version": preflight.__version__, "python": "python3"})
    assert not stream.feed(hello) and not stream.feed(START + "a.one")
    assert not stream.feed(RESULT + make_result("a.one", "somehost", Status.PASS).to_json_line())
    assert not stream.feed(START + "a.two")
    assert [type(e) for e in events] == [NodeReached, Started, Result, Started]
    assert events[0] == NodeReached("gpu01") and events[3] == Started("gpu01", "a.two")
    assert events[2].result.node == "gpu01"  # the name the user wrote, whatever the node calls itself
    assert stream.done == {"a.one"}
    assert stream.loss(137, lambda: "unreachable") == "lost contact with gpu01 while running a.two (exit code 137)"
    assert stream.loss(None, lambda: "unreachable") == "lost contact with gpu01 while running a.two"
    stream.silent(18.0)
    assert stream.loss(None, lambda: "") == "the agent on gpu01 wrote nothing for 18s while running a.two; it was stopped"


def test_an_agent_stream_that_ends_with_done_lost_nothing_and_one_that_never_said_hello_is_unreachable():
    stream = AgentStream("gpu01", [], lambda event: None)  # type: ignore[arg-type]
    assert stream.loss(255, lambda: "cannot reach gpu01: no route") == "cannot reach gpu01: no route"
    stream.feed(HELLO + json.dumps({"version": preflight.__version__}))
    assert stream.feed(DONE) and stream.completed and stream.loss(0, lambda: "") is None
    other = AgentStream("gpu02", [], lambda event: None)  # type: ignore[arg-type]
    assert other.feed(HELLO + json.dumps({"version": "0.0.0-other", "python": "/usr/bin/python3"}))
    assert "gpu02 runs preflight 0.0.0-other" in (other.loss(0, lambda: "") or "")
    garbled = AgentStream("gpu03", [], lambda event: None)  # type: ignore[arg-type]
    assert garbled.feed(RESULT + "{not json")
    assert "the agent on gpu03 sent a line preflight cannot read" in (garbled.loss(0, lambda: "") or "")


def test_the_step_mode_chooses_one_step_for_an_allocation_and_never_for_other_nodes():
    many = [SlurmTransport(f"n{i}", jobid="7") for i in range(SINGLE_STEP_FROM)]
    assert use_single_step("auto", many) and use_single_step("single", many[:1])
    assert not use_single_step("auto", many[:SINGLE_STEP_FROM - 1])
    assert not use_single_step("per-node", many)
    assert not use_single_step("single", [LocalTransport("here")])
