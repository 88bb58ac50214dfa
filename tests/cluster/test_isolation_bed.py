"""The adaptive isolation pass on a four-node namespace bed: real sshd, torchrun and gloo per group.

One bed is shared by the module's tests; each test puts its own fault in (a node's link slowed with
tc, a pair of nodes that cannot reach each other) and takes it out again, passed or failed. One
process per node and small sizes: the nodes share this machine's cores. The tests assert on
what was named; the rounds and wall time of each pass (and once of the pairwise round-robin on the
same faulted bed) are printed, and written as JSON to $PREFLIGHT_BED_RECORD when it is set, so the
figures can be compared (bench/results/isolation_bed.json holds a recorded set, from
`PREFLIGHT_ISOLATION_BED_NODES=8 PREFLIGHT_BED_RECORD=bench/results/isolation_bed.json pytest
tests/cluster/test_isolation_bed.py -k NAME`,
one test at a time). The tests that only record figures of what is shown elsewhere are `comparison`
tests: they run with PREFLIGHT_BENCH_RESULTS set (any directory), not in the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator

import pytest

from preflight.core.model import Status
from preflight.engine.execute import execute
from tests.cluster.testbed import TestBed, module_bed

pytestmark = [pytest.mark.root, pytest.mark.torch]
pytest.importorskip("torch")

# Four nodes in CI: halves of two, so the pass searches groups and across them, not pair by pair;
# PREFLIGHT_ISOLATION_BED_NODES=8 gives the bed the recorded figures (bench/results/isolation_bed.json) came from.
COUNT = int(os.environ.get("PREFLIGHT_ISOLATION_BED_NODES", "4"))
SLOW_RATE = "200mbit"  # 0.025 GB/s: far below what unshaped veth pairs reach here
# For DDP steps a slower link: on two shared cores a healthy group of seven spends up to ~85% of its
# step in gloo's all-reduce already (compute / step down to ~0.13), so the slowed node must cost more.
SLOWER_RATE = "20mbit"
ALLREDUCE = {"iters": 5, "warmup": 2, "check_elements": 4096, "sizes_bytes": [8, 1 << 20], "pairwise_iters": 4,
             "pg_timeout_s": 30.0, "join_timeout_s": 25.0, "rdzv_timeout_s": 30.0, "pairwise_timeout_s": 900.0}
DDP = {"steps": 4, "warmup": 1, "hidden_size": 512, "layers": 2, "batch_per_device": 32, "isolation_timeout_s": 900.0,
       "pg_timeout_s": 45.0, "join_timeout_s": 45.0, "rdzv_timeout_s": 45.0}
TIMEOUT_S = 1100
RECORD: dict[str, dict] = {}


@pytest.fixture(scope="module")
def bed() -> Iterator[TestBed]:
    try:
        yield from module_bed(COUNT)
    finally:
        if RECORD:
            print("\nisolation on the bed: " + json.dumps(RECORD, indent=1))
            path = os.environ.get("PREFLIGHT_BED_RECORD")
            if path:  # merged into what earlier runs (one test at a time) recorded there
                kept = json.loads(open(path, encoding="utf-8").read()) if os.path.exists(path) else {}
                kept.update(nodes=COUNT, runs={**kept.get("runs", {}), **RECORD})
                with open(path, "w", encoding="utf-8") as out:
                    json.dump(kept, out, indent=1, allow_nan=False)
                    out.write("\n")


@contextlib.contextmanager
def slowed_node(bed, rate: str) -> Iterator[str]:
    """The link of the first node of the second half shaped to `rate` while it lasts."""
    node = bed.node(COUNT // 2 + 1)
    bed.shape(node, rate)
    try:
        yield node.name
    finally:
        bed.unshape(node)


@pytest.fixture
def slowed(bed):
    with slowed_node(bed, SLOW_RATE) as name:
        yield name


@pytest.fixture
def slower(bed):
    with slowed_node(bed, SLOWER_RATE) as name:
        yield name


@pytest.fixture
def broken(bed):
    """No traffic between the second node of each half for the test; each reaches every other node."""
    a, b = bed.node(2), bed.node(COUNT // 2 + 2)
    bed.break_link(a, b)
    try:
        yield a.name, b.name
    finally:
        bed.mend_link(a, b)


def run(check, ctx, overrides: dict):
    start = time.monotonic()
    result = execute(check, ctx, check.params_from(overrides), ctx.expect, node="cluster")
    return result, time.monotonic() - start


def collectives(ctx, **overrides):
    from preflight_checks.collectives.cluster import CollectivesCluster

    return run(CollectivesCluster(), ctx, {**ALLREDUCE, **overrides})


def record(name: str, result, elapsed: float) -> None:
    facts = result.facts
    entry: dict = {"check_s": round(elapsed, 1), "status": result.status.value}
    if facts.get("isolation"):
        iso = facts["isolation"]
        entry.update(method="adaptive", rounds=iso["isolation"]["round_count"], wall_s=iso.get("wall_s"),
                     launches=len(iso.get("launches", [])),
                     named=[[a["kind"], a["members"]] for a in iso["isolation"]["attributions"]],
                     groups=[[r["round"], [[g["members"], g["ok"], g["figure"]] for g in r["groups"]]]
                             for r in iso["isolation"]["rounds"]])
    if facts.get("pairwise"):
        pw = facts["pairwise"]
        entry.update(method="pairs", rounds=pw.get("rounds_run"), wall_s=pw.get("wall_s"),
                     launches=len(pw.get("pairs", [])),
                     failed_pairs=[p["nodes"] for p in pw.get("pairs", []) if not p.get("ok")],
                     findings=[f.id for f in result.findings])
    RECORD[name] = entry


def named(result) -> list[tuple[str, list[str]]]:
    iso = result.facts["isolation"]["isolation"]
    return [(a["kind"], a["members"]) for a in iso["attributions"] if not a["ambiguous"]]


def leftovers(bed) -> list[str]:
    return [c for n in bed.nodes for _, c in bed.processes(n) if not c.startswith("sshd")]


@pytest.mark.comparison
def test_collectives_adaptive_names_a_slowed_node(bed, slowed, cluster_context):
    # The figures of the pass on the bed, for bench/results. That the adaptive pass names a slowed node
    # on real links is shown on three (tests/cluster/test_collectives_cluster.py), and at every size by the
    # simulator (tests/unit/launch/test_isolation.py); what only this bed shows, the failure path of a pair
    # that cannot connect, and the DDP steps' pass, run in CI.
    # The slowed link carries 0.025 GB/s; the floor sits at twice that, well below unshaped groups.
    result, elapsed = collectives(cluster_context(bed, timeout_s=TIMEOUT_S), min_busbw_gbps=0.05)
    record("collectives.cluster, one node slowed", result, elapsed)
    assert result.status is Status.FAIL, result.summary
    assert named(result) == [("node", [slowed])], "\n".join(result.details)
    assert "collectives.cluster.isolated-node" in [f.id for f in result.findings]
    assert leftovers(bed) == []


def test_collectives_adaptive_names_a_broken_pair_as_a_link(bed, broken, cluster_context):
    result, elapsed = collectives(cluster_context(bed, timeout_s=TIMEOUT_S), min_busbw_gbps=0.01)
    record("collectives.cluster, one pair broken", result, elapsed)
    main = result.facts["run"]
    assert main["ok"] is False, result.summary  # gloo connects every pair: the all-node run fails
    assert "isolation" in result.facts, (main["phase"], main["fault_nodes"], main["error"])
    assert named(result) == [("link", sorted(broken))], "\n".join(result.details)
    ids = [f.id for f in result.findings]
    assert "collectives.cluster.isolated-link" in ids and "collectives.cluster.isolated-node" not in ids
    assert leftovers(bed) == []


@pytest.mark.comparison
def test_collectives_pairs_on_the_broken_pair_for_comparison(bed, broken, cluster_context):
    result, elapsed = collectives(cluster_context(bed, timeout_s=TIMEOUT_S), min_busbw_gbps=0.01, isolation="pairs")
    record("collectives.cluster, one pair broken, pairwise round-robin", result, elapsed)
    ids = [f.id for f in result.findings]
    assert "collectives.cluster.pairwise-pair" in ids, (ids, RECORD)
    failed = [sorted(p["nodes"]) for p in result.facts["pairwise"]["pairs"] if not p.get("ok")]
    assert failed == [sorted(broken)], failed
    assert leftovers(bed) == []


def test_scaling_adaptive_names_a_slowed_node(bed, slower, cluster_context):
    from preflight_checks.scaling.multi_node import ScalingMultiNode

    slowed = slower
    # 2 x 512 x 512 weights are 2 MiB of gradients a step: over a second over the slowed link
    # against tens of milliseconds of compute, so a group with it computes a few percent of its step.
    result, elapsed = run(ScalingMultiNode(), cluster_context(bed, timeout_s=TIMEOUT_S),
                          {**DDP, "isolation_min_step_efficiency": 0.06})
    record("scaling.multi_node, one node slowed", result, elapsed)
    assert result.facts["all_nodes"]["ok"], result.summary
    assert named(result) == [("node", [slowed])], "\n".join(result.details)
    assert "scaling.multi_node.isolated-node" in [f.id for f in result.findings]
    assert leftovers(bed) == []
