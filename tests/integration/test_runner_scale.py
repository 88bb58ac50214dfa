"""The coordinator over many nodes whose agents answer at once (`cat` of a recorded agent stream, as
bench/slurm_simulated.py drives 1,000): every result lands, each finished agent is let go of as it
finishes, and the reports are written whole, with the collector as it was."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import preflight
from preflight.cli.options import finish
from preflight.core.config import Config
from preflight.core.model import Status
from preflight.core.registry import discover
from preflight.engine.agent import DONE, HELLO, RESULT, START
from preflight.engine.runner import NodeTarget, RunPlan, Runner
from preflight.transport.base import Transport
from tests.conftest import make_result

NODES = 40


class Recorded(Transport):
    """A node whose agent is `cat` of a recorded stream: a real process that answers at once."""

    kind = "recorded"

    def __init__(self, name: str, stream: Path) -> None:
        super().__init__(name, "127.0.0.1")
        self.stream = stream

    def wrap(self, argv: list[str]) -> list[str]:
        return ["cat", str(self.stream)]


def test_many_nodes_all_land_each_agent_is_let_go_of_and_the_reports_are_written_whole(tmp_path):
    registry = discover()
    checks = registry.ordered(["node.environment", "versions.pinned"])
    stream = tmp_path / "stream.txt"
    lines = [HELLO + json.dumps({"version": preflight.__version__, "python": "python3", "hostname": "sim"})]
    for check in checks:
        result = make_result(check.id, "sim", Status.PASS, "fine", facts={"seen": list(range(50))})
        lines += [START + check.id, RESULT + result.to_json_line()]
    stream.write_text("\n".join(lines + [DONE]) + "\n")
    nodes = [NodeTarget(Recorded(f"n{i:03d}", stream)) for i in range(NODES)]
    out = tmp_path / "out"
    runner = Runner(RunPlan(checks=checks, config=Config(), output_dir=out, nodes=nodes, fanout=8))
    report = runner.run()
    assert sorted(r.node for r in report.results) == sorted([n.name for n in nodes] * len(checks))
    assert {r.status for r in report.results} == {Status.PASS}
    assert runner.agents == {}  # nothing of a finished agent is held for the rest of the run
    assert len((out / "results.jsonl").read_text().splitlines()) == 1 + NODES * len(checks)

    finish(report, out, ["json", "md", "junit"], announce=False)
    assert gc.get_freeze_count() == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no partial file left
    data = json.loads((out / "results.json").read_text())
    assert len(data["results"]) == NODES * len(checks) and data["verdict"]["verdict"] == "GO"


def test_a_cluster_check_is_given_the_time_its_isolation_pass_takes_at_the_runs_size(tmp_path, monkeypatch):
    """net.bandwidth's pass is given more rounds on more nodes (pass_rounds); the runner hands the check
    the timeout for the nodes it reached, not the 300 s that cut a 64-node search short at 13 rounds."""
    from preflight.core.model import Scope
    from preflight.engine import runner as runner_mod

    registry = discover()
    checks = registry.ordered(["net.bandwidth"])
    bandwidth = checks[0]
    stream = tmp_path / "stream.txt"
    stream.write_text("\n".join([HELLO + json.dumps({"version": preflight.__version__, "python": "python3",
                                                     "hostname": "sim"}), DONE]) + "\n")
    given: dict[int, float] = {}

    def measured(check, job, on_start=None):  # what the cluster check's process would be started with
        given[len(job.nodes)] = job.timeout_s
        return make_result(check.id, "cluster", Status.SKIP, "not measured here", scope=Scope.CLUSTER)

    monkeypatch.setattr(runner_mod, "run_check", measured)
    for count in (2, 8, 64):
        nodes = [NodeTarget(Recorded(f"n{i:03d}", stream)) for i in range(count)]
        Runner(RunPlan(checks=checks, config=Config(), output_dir=tmp_path / f"out{count}", nodes=nodes,
                       fanout=8)).run()
    assert given[2] == bandwidth.timeout_s  # two nodes: no pass to search with
    assert bandwidth.timeout_s < given[8] < given[64]
    assert given[64] == bandwidth.timeout_at(64, bandwidth.Params())
