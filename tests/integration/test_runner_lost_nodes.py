"""The runner never loses a node silently: an agent that sends garbage, one that stops writing, and a
bug in the thread that reads it all end as ERROR for that node's unfinished checks, within the
check's timeout plus a small grace, while the other nodes' results arrive as usual.

The agents here are stand-ins: a transport whose wrap() runs a small script instead of the real
agent, so each failure is exact and quick. Everything else (the runner, the process layer) is real.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

import preflight
import preflight.engine.runner as runner_module
from preflight.engine.agent import DONE, HELLO, RESULT, START
from preflight.core.check import Check, Outcome
from preflight.core.config import Config
from preflight.engine.execute import result_from_outcome
from preflight.core.model import Status
from preflight.engine.runner import NodeTarget, Runner, RunPlan
from preflight.transport.local import LocalTransport
from tests.conftest import pids_alive


class First(Check):
    id = "test.first"
    title = "first"


class Second(Check):
    id = "test.second"
    title = "second"


def line(prefix: str, payload: object = None) -> str:
    return prefix + (json.dumps(payload) if payload is not None else "")


def passed(check: type[Check]) -> dict:
    return result_from_outcome(check, Outcome(Status.PASS, "fine"), node="x").to_dict()


HELLO_LINE = line(HELLO, {"version": preflight.__version__, "python": sys.executable, "hostname": "h", "pid": 1})


class ScriptTransport(LocalTransport):
    """A node whose 'agent' prints the given lines, then sleeps `then_sleep` seconds (pid to a file)."""

    def __init__(self, name: str, lines: list[str], then_sleep: float = 0.0, pid_file: str | None = None) -> None:
        super().__init__(name=name)
        self.lines, self.then_sleep, self.pid_file = lines, then_sleep, pid_file

    def wrap(self, argv: list[str]) -> list[str]:
        script = ("import json, os, sys, time\n"
                  "sys.stdin.readline()\n"
                  "if sys.argv[3]:\n    open(sys.argv[3], 'w').write(str(os.getpid()))\n"
                  "for text in json.loads(sys.argv[1]):\n    print(text, flush=True)\n"
                  "time.sleep(float(sys.argv[2]))\n")
        return [sys.executable, "-c", script, json.dumps(self.lines), str(self.then_sleep), self.pid_file or ""]


def run(tmp_path, transports: list[LocalTransport], timeout_s: float = 3.0):
    config = Config(timeouts={First.id: timeout_s, Second.id: timeout_s})
    plan = RunPlan(checks=[First, Second], config=config, output_dir=tmp_path / "out",
                   nodes=[NodeTarget(t) for t in transports])
    start = time.monotonic()
    report = Runner(plan).run()
    return {(r.node, r.check_id): r for r in report.results}, time.monotonic() - start, report


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(runner_module, "AGENT_GRACE_S", 2.0)


def healthy(name: str) -> ScriptTransport:
    return ScriptTransport(name, [HELLO_LINE, line(START + First.id), line(RESULT, passed(First)),
                                  line(START + Second.id), line(RESULT, passed(Second)), DONE])


def test_a_malformed_line_is_error_for_the_unfinished_checks_and_the_run_goes_on(tmp_path):
    broken = ScriptTransport("broken", [HELLO_LINE, line(START + First.id), line(RESULT, passed(First)),
                                        line(START + Second.id), RESULT + "{not json"], then_sleep=60)
    results, elapsed, _ = run(tmp_path, [broken, healthy("fine")])
    assert results[("broken", First.id)].status is Status.PASS
    second = results[("broken", Second.id)]
    assert second.status is Status.ERROR and "cannot read" in second.summary
    assert results[("fine", First.id)].status is Status.PASS and results[("fine", Second.id)].status is Status.PASS
    assert elapsed < 30


def test_an_agent_that_stops_writing_is_error_within_the_timeout_and_grace(tmp_path):
    pid_file = tmp_path / "pid"
    stuck = ScriptTransport("stuck", [HELLO_LINE], then_sleep=600, pid_file=str(pid_file))  # stuck importing a plugin
    results, elapsed, report = run(tmp_path, [stuck, healthy("fine")], timeout_s=3.0)
    for check in (First, Second):
        result = results[("stuck", check.id)]
        assert result.status is Status.ERROR and "wrote nothing for 5s" in result.summary
    assert results[("fine", First.id)].status is Status.PASS
    # 3 s timeout + 2 s grace, plus starting and stopping the stand-in agent.
    assert elapsed < 3.0 + 2.0 + 15
    assert pids_alive([int(pid_file.read_text())]) == []
    assert next(n for n in report.nodes if n.name == "stuck").reachable is False


def test_an_exception_while_reading_an_agent_is_error_not_a_lost_node(tmp_path, monkeypatch):
    original = runner_module.CheckResult.from_dict

    def explode(data):
        if data.get("check_id") == Second.id:
            raise RuntimeError("reader bug")
        return original(data)

    monkeypatch.setattr(runner_module.CheckResult, "from_dict", staticmethod(explode))
    results, elapsed, _ = run(tmp_path, [healthy("one")])
    assert results[("one", First.id)].status is Status.PASS
    second = results[("one", Second.id)]
    assert second.status is Status.ERROR and "RuntimeError: reader bug" in second.summary
    assert elapsed < 30
