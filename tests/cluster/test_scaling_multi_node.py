"""scaling.multi_node over ssh between namespace nodes: a DDP step under torchrun on one node and on
three. The three nodes share this machine's two cores, so three ranks cannot be three times one:
the test checks that the check measures, computes E from what it measured, judges E against the
thresholds it is given, says the nodes share one machine, and leaves nothing behind.
"""

from __future__ import annotations

import time

import pytest

from preflight.engine.execute import execute
from preflight.core.model import Status

pytestmark = [pytest.mark.root, pytest.mark.torch]
pytest.importorskip("torch")

# isolation off: on two shared cores E is low by construction, with no node or link to blame.
QUICK = {"steps": 4, "warmup": 1, "hidden_size": 256, "layers": 2, "batch_per_device": 64, "isolation": "off"}


def test_three_nodes_against_one(testbed3, cluster_context):
    from preflight_checks.scaling.multi_node import ScalingMultiNode

    check = ScalingMultiNode()
    ctx = cluster_context(testbed3, timeout_s=120)
    start = time.monotonic()
    result = execute(check, ctx, check.params_from(QUICK), ctx.expect, node="cluster")
    elapsed = time.monotonic() - start
    facts = result.facts
    assert facts["one_node"]["ok"] and facts["all_nodes"]["ok"], result.summary
    assert facts["one_node"]["nodes"] == ["n1"] and facts["all_nodes"]["nodes"] == ["n1", "n2", "n3"]
    one, everyone = facts["one_node"]["result"], facts["all_nodes"]["result"]
    assert everyone["world_size"] == 3 and one["world_size"] == 1
    e = everyone["samples_per_s"] / (3 * one["samples_per_s"])
    assert [m.value for m in result.measurements if m.name == "efficiency on 3 nodes"] == [pytest.approx(e, abs=1e-3)]
    want = Status.PASS if e >= 0.9 else Status.WARN if e >= 0.75 else Status.FAIL
    assert result.status is want
    assert any("share its CPUs" in d for d in result.details)
    assert any("resolves only to 127.0.0.1" in d for d in result.details)
    assert elapsed < 120  # within the check's budget
    assert all([c for _, c in testbed3.processes(n) if not c.startswith("sshd")] == [] for n in testbed3.nodes)
