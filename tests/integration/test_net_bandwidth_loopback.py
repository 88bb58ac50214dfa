"""net.bandwidth refuses to measure a route that never leaves the machine (no root needed).

Two node names for this very machine, both reached through the local transport at 127.0.0.1: a
figure between them would be memory bandwidth. The check must say ERROR and start no iperf3 at all.
"""

from __future__ import annotations

import shutil

import pytest

from preflight.core.check import Expect
from preflight.engine.context import ClusterContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight.transport import LocalTransport
from preflight_checks.net.bandwidth import NetBandwidth, Params


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed (apt-get install iperf3)")
def test_two_names_for_this_machine_are_error_not_a_figure(tmp_path):
    specs = [LocalTransport("here", "127.0.0.1").to_spec(), LocalTransport("also-here", "127.0.0.1").to_spec()]
    ctx = ClusterContext(nodes=specs, output_dir=tmp_path, scratch_dir=tmp_path, expect=Expect(), timeout_s=60)
    result = execute(NetBandwidth(), ctx, Params(), Expect(), node="cluster")
    assert result.status is Status.ERROR
    assert "here -> also-here: the route is local" in result.summary and "loopback" in result.summary
    assert all(m.value is None and m.ok is False for m in result.measurements)
    assert not any("iperf3 -s" in e.command or "iperf3 -c" in e.command for e in result.evidence)
