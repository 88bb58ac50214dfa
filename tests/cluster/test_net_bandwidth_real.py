"""net.bandwidth on real iperf3 between namespace nodes, one of them shaped with tbf.

Loads are bounded: 2-second measurements, two iperf3 processes per link, one or two repeats.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from preflight.core.check import Expect
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight_checks.net.bandwidth import NetBandwidth, Params

pytestmark = pytest.mark.root

SHAPED = "2gbit"
# Twice the shaped rate: the shaped links sit near 1.9 Gbit/s, unshaped veth links here run at
# several times this even on a loaded two-core machine.
MIN_GBPS = 4.0


def quick(**overrides) -> Params:
    values = dict(min_gbps=MIN_GBPS, streams=2, duration_s=2, omit_s=0, repeats=1)
    values.update(overrides)
    return Params(**values)


def leftovers(bed, node) -> list[str]:
    """What a run left on a node: anything but sshd itself."""
    return [cmd for _, cmd in bed.processes(node) if not cmd.startswith("sshd")]


def run_check(ctx, params):
    return execute(NetBandwidth(), ctx, params, ctx.expect, node="cluster")


def test_one_shaped_node_fails_naming_its_links_and_no_other(make_testbed, cluster_context):
    bed = make_testbed(3, rates={2: SHAPED})
    # The isolation pass spreads a blame's readings over eight rounds among three nodes: room for them on
    # a loaded machine (a pass cut short leaves the node a suspect), not its default 120 s.
    result = run_check(cluster_context(bed, timeout_s=600), quick(repeats=2, isolation_timeout_s=480))
    assert result.status is Status.FAIL, result.summary
    failing = {m.node for m in result.measurements if m.ok is False}
    passing = {m.node for m in result.measurements if m.ok is True}
    assert failing == {"n1 -> n2", "n2 -> n3"}
    assert passing == {"n3 -> n1"}
    assert "n3 -> n1" not in result.summary and "n2" in result.summary
    for m in result.measurements:
        assert len(m.samples) == 2 and m.value is not None
    assert {m.node: m.value for m in result.measurements}["n1 -> n2"] <= 2.0  # never above the shaper
    matrix = result.facts["matrix_gbps"]
    assert matrix["n1"]["n2"] is not None and matrix["n1"]["n3"] is None  # ring: successors only
    # The isolation pass (three nodes: their three pairs) names the shaped node, and no other.
    attributions = result.facts["isolation"]["isolation"]["attributions"]
    assert [(a["kind"], a["members"]) for a in attributions if not a["ambiguous"]] == [("node", ["n2"])]
    assert "net.bandwidth.isolated-node" in {f.id for f in result.findings}
    assert all(leftovers(bed, node) == [] for node in bed.nodes)


def test_all_fast_links_pass_and_full_measures_every_ordered_pair(testbed3, cluster_context):
    result = run_check(cluster_context(testbed3), quick(pattern="full"))
    assert result.status is Status.PASS, result.summary + "\n" + "\n".join(result.details)
    assert {m.node for m in result.measurements} == {
        f"{a} -> {b}" for a, b in itertools.permutations(["n1", "n2", "n3"], 2)}
    assert all(m.value >= MIN_GBPS for m in result.measurements)
    assert "slowest" in result.summary
    # Every command that ran is evidence, with the ssh command line that reproduces it.
    assert any("iperf3" in e.command and e.command.startswith("ssh ") for e in result.evidence)


def test_a_route_local_to_the_sender_is_error_and_sends_nothing(testbed3, cluster_context, tmp_path):
    node = testbed3.node(1)
    ctx = cluster_context(testbed3, indexes=[1])
    # A second name for the same machine: its address is the sender's own.
    ctx.nodes.append(testbed3.transport(1, name="n1-again").to_spec())
    result = run_check(ctx, quick())
    assert result.status is Status.ERROR
    assert "route is local" in result.summary and "n1 -> n1-again" in result.summary
    assert all(m.value is None for m in result.measurements)
    # Neither an iperf3 server nor a client was started: only the probe ran.
    assert not any("iperf3 -s" in e.command or "iperf3 -c" in e.command for e in result.evidence)
    assert result.evidence and all("PROBE" not in e.command for e in result.evidence)
    assert leftovers(testbed3, node) == []


def test_unreachable_nodes_are_noted_and_the_rest_measured(testbed3, cluster_context):
    result = run_check(cluster_context(testbed3, indexes=[1, 2], unreachable=["n3"]), quick())
    assert result.status is Status.PASS, result.summary
    assert {m.node for m in result.measurements} == {"n1 -> n2", "n2 -> n1"}
    assert any("unreachable: n3" in d for d in result.details)


def test_a_node_whose_sshd_is_gone_is_error_and_the_others_are_measured(testbed3, cluster_context):
    testbed3.stop_sshd(testbed3.node(3))
    result = run_check(cluster_context(testbed3), quick())
    assert result.status is Status.ERROR
    assert "n3" in result.summary and "could not be reached" in result.summary
    assert {m.node for m in result.measurements} == {"n1 -> n2", "n2 -> n1"}
    assert all(m.ok for m in result.measurements)
    assert leftovers(testbed3, testbed3.node(1)) == [] and leftovers(testbed3, testbed3.node(2)) == []


def test_a_node_lost_mid_measurement_leaves_nothing_running_on_the_others(testbed3, cluster_context):
    ctx = cluster_context(testbed3)
    params = quick(duration_s=4)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("result", run_check(ctx, params)))
    worker.start()
    # Wait until iperf3 runs on node 2, then take its sshd and every session down.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(c.startswith("iperf3 ") for c in leftovers(testbed3, testbed3.node(2))):
        time.sleep(0.1)
    testbed3.stop_sshd(testbed3.node(2))
    worker.join(timeout=120)
    assert not worker.is_alive()
    result = outcome["result"]
    assert result.status is Status.ERROR, result.summary
    assert "n2" in result.summary
    assert leftovers(testbed3, testbed3.node(1)) == [] and leftovers(testbed3, testbed3.node(3)) == []


def test_one_node_is_skipped_with_the_reason(testbed3, cluster_context):
    result = run_check(cluster_context(testbed3, indexes=[1]), quick())
    assert result.status is Status.SKIP and "one node" in result.summary
    expected = cluster_context(testbed3, indexes=[1], expect=Expect(nodes=3))
    assert run_check(expected, quick()).status is Status.ERROR


def test_servers_whose_client_never_comes_end_by_themselves(testbed3, cluster_context):
    """If the coordinator dies between starting servers and clients, `timeout` still ends the servers."""
    node = testbed3.node(2)
    job = cluster_context(testbed3).transport("n2").spawn(
        [testbed3.python, "-m", "preflight.workers.iperf", "servers", "--life", "2", "--forceflush", "5201", "5202"])
    try:
        assert job.wait_until(lambda: sum("Server listening" in line for line in job.lines) == 2, 10)
        assert len([c for c in leftovers(testbed3, node) if c.startswith("iperf3 -s")]) == 2
        start = time.monotonic()
        assert job.wait_until(lambda: "@@done" in job.lines, 15)
        assert time.monotonic() - start < 10
    finally:
        job.stop()
    assert leftovers(testbed3, node) == []
