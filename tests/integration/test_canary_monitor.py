"""The latency hook in a real 2-rank gloo DDP job: its histogram counts every step, over HTTP and in
the node_exporter textfile, and promtool accepts what it serves; in a 1-rank DDP in this process,
every bucket of every step is counted through callbacks made once per bucket."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[2]
STEPS = 7


def sample(text: str, name: str, rank: int) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels.get("rank") == str(rank):
                return s.value
    raise AssertionError(f"{name} for rank {rank} not in:\n{text}")


def test_histogram_counts_every_step_of_a_two_rank_ddp_job(tmp_path):
    pytest.importorskip("torch")
    argv = [sys.executable, "-m", "tests.integration.ddp_monitor_job", "--steps", str(STEPS),
            "--textfile-dir", str(tmp_path), "--join-timeout-s", "30", "--pg-timeout-s", "30"]
    launch = launch_local(argv, 2, timeout_s=120, cwd=str(ROOT),
                          env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()})
    outcome = interpret_launch(launch)
    assert outcome["ok"], (outcome["error"], [r.stderr[-2000:] for r in launch.ranks])
    ranks = outcome["result"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["port"] > 0
        # one bucket per step (a single Linear layer): one observation per step, every step
        assert sample(r["scraped"], "preflight_allreduce_latency_seconds_count", r["rank"]) == STEPS
        written = Path(r["textfile"]).read_text()
        assert sample(written, "preflight_allreduce_latency_seconds_count", r["rank"]) == STEPS
        assert 0 < sample(written, "preflight_allreduce_latency_seconds_sum", r["rank"]) < 60
        if shutil.which("promtool"):
            check = subprocess.run(["promtool", "check", "metrics"], input=written, capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr


def test_every_bucket_of_every_step_is_counted_through_callbacks_made_once_per_bucket():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from preflight.integrations.monitor import BucketTimer, LatencyCounts

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(6)])
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.005)  # about one bucket per layer
        counts = LatencyCounts()
        timer = BucketTimer(keep=True, counts=counts)
        ddp.register_comm_hook(None, timer.hook)
        callbacks = []
        for step in range(6):
            timer.step = step
            ddp(torch.randn(4, 32)).sum().backward()
            if step == 2:  # DDP settles its buckets after the first step
                callbacks = list(timer._callbacks)
        timer.poll(wait=True)
    finally:
        dist.destroy_process_group()
    per_step = Counter(r.step for r in timer.records)
    assert sorted(per_step) == list(range(6))
    buckets = per_step[5]
    assert buckets > 1 and [per_step[s] for s in range(2, 6)] == [buckets] * 4
    assert counts.snapshot()[0][-1] == ("+Inf", len(timer.records))  # every bucket counted once
    assert all(r.seconds >= 0 and r.nbytes > 0 for r in timer.records)
    # Each bucket's completion callback is made once and reused, not made again on every call.
    assert len(timer._callbacks) == buckets and all(a is b for a, b in zip(timer._callbacks, callbacks))


def test_two_ranks_given_one_port_and_one_textfile_name_each_get_their_own(tmp_path):
    """`instrument_ddp(ddp, port=P, textfile=NAME)` in every rank of a 2-rank job: rank r serves P + r and
    writes NAME-rank<r>.prom; before, both bound P and the second crashed."""
    pytest.importorskip("torch")
    import socket

    with socket.socket() as probe:  # a base port free now, with the next one
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
    argv = [sys.executable, "-m", "tests.integration.ddp_monitor_job", "--steps", str(STEPS), "--base-port", str(base),
            "--textfile-dir", str(tmp_path), "--join-timeout-s", "30", "--pg-timeout-s", "30"]
    launch = launch_local(argv, 2, timeout_s=120, cwd=str(ROOT),
                          env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()})
    outcome = interpret_launch(launch)
    assert outcome["ok"], (outcome["error"], [r.stderr[-2000:] for r in launch.ranks])
    ranks = outcome["result"]["ranks"]
    assert [r["port"] for r in ranks] == [base, base + 1]
    assert sorted(Path(r["textfile"]).name for r in ranks) == ["allreduce-rank0.prom", "allreduce-rank1.prom"]
    for r in ranks:
        assert sample(Path(r["textfile"]).read_text(), "preflight_allreduce_latency_seconds_count", r["rank"]) == STEPS
