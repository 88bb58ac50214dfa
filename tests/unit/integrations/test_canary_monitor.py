"""preflight.integrations.monitor without a GPU: the read-back of CUDA-event timings, the counts the
hook folds latencies into, and instrument_ddp's contract."""

from __future__ import annotations

import pytest

from preflight.integrations.monitor import LATENCY_BUCKETS_S, METRIC, BucketTimer, LatencyCollector, LatencyCounts, instrument_ddp


class Event:
    """Stands in for a torch.cuda.Event pair's end: done or not, and the elapsed time it reports."""

    def __init__(self, done: bool, ms: float = 0.0) -> None:
        self.done, self.ms = done, ms

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True

    def elapsed_time(self, end: "Event") -> float:
        return end.ms


def test_gpu_timings_are_read_back_once_complete_without_blocking_and_all_of_them_on_wait():
    seen = []
    timer = BucketTimer(on_latency=lambda seconds, nbytes: seen.append((seconds, nbytes)))
    start = Event(True)
    timer._late = [(start, Event(True, 2.5), 1024, 0, 0.0), (start, Event(False, 7.0), 2048, 0, 0.0)]
    timer.poll()
    assert seen == [(0.0025, 1024)] and len(timer._late) == 1
    timer.poll(wait=True)
    assert seen == [(0.0025, 1024), (0.007, 2048)] and not timer._late
    assert [(r.step, r.nbytes) for r in timer.records] == [(0, 1024), (0, 2048)]
    assert len(timer._spare) == 2  # both event pairs go back for reuse


def test_a_gpu_slot_whose_end_is_recorded_hands_its_pair_on_and_takes_a_spare_next_time():
    timer = BucketTimer(keep=True)
    timer._spare = [(Event(True), Event(True))]
    timer._started, timer._seconds, timer._nbytes, timer._steps = [0.0], [0.0], [512], [3]
    pair = (Event(True), Event(True, 1.5))
    timer._pairs, timer._armed = [pair], [True]
    timer.poll()
    assert [(r.step, r.seconds, r.nbytes) for r in timer.records] == [(3, 0.0015, 512)]
    assert timer._pairs == [None] and timer._armed == [False]
    assert timer._new_pair() is not pair  # the spare comes first; the resolved pair waits its turn
    assert len(timer._spare) == 1


def test_a_gpu_slot_whose_all_reduce_is_still_running_is_left_for_a_later_boundary():
    timer = BucketTimer(keep=True)
    pair = (Event(True), Event(False))
    timer._started, timer._seconds, timer._nbytes, timer._steps = [0.0], [-1.0], [512], [0]
    timer._pairs, timer._armed = [pair], [True]
    timer.poll()
    assert timer.records == [] and timer._pairs == [pair] and timer._armed == [True]


def test_counts_match_what_prometheus_clients_own_histogram_exposes():
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    values = [0.00005, 0.0001, 0.0003, 0.02, 0.02, 3.0, 12.0]
    counts = LatencyCounts()
    for value in values:
        counts.observe(value)
    ours = CollectorRegistry()
    ours.register(LatencyCollector(BucketTimer(keep=False, counts=counts), counts, rank=1))  # type: ignore[arg-type]
    theirs = CollectorRegistry()
    child = Histogram(METRIC, "x", ["rank"], registry=theirs, buckets=LATENCY_BUCKETS_S).labels(rank="1")
    for value in values:
        child.observe(value)

    def samples(registry):
        text = generate_latest(registry).decode()
        return sorted(line for line in text.splitlines()
                      if line.startswith(METRIC) and "_created" not in line)

    assert samples(ours) == samples(theirs)


def test_the_metrics_server_listens_on_loopback_unless_an_address_is_given(tmp_path):
    torch = pytest.importorskip("torch")
    import urllib.request

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(torch.nn.Linear(4, 2))
        monitor = instrument_ddp(ddp, port=0)
        try:
            assert monitor.address == "127.0.0.1"
            ddp(torch.randn(3, 4)).sum().backward()  # one bucket all-reduced through the hook
            with urllib.request.urlopen(f"http://127.0.0.1:{monitor.port}/metrics", timeout=5) as response:
                assert b"preflight_allreduce_latency_seconds_count" in response.read()
        finally:
            monitor.close()
    finally:
        dist.destroy_process_group()


def test_each_local_rank_gets_its_own_port_and_textfile(monkeypatch):
    from preflight.integrations import monitor

    assert not 9100 <= monitor.DEFAULT_PORT <= 9999  # Prometheus's exporter range (9400: dcgm-exporter)
    assert monitor.DEFAULT_PORT + 7 < 29400  # below torchrun's rendezvous and master ports
    assert monitor.rank_textfile("/t/allreduce.prom", 3, 8) == "/t/allreduce-rank3.prom"
    assert monitor.rank_textfile("/t/allreduce.prom", 0, 1) == "/t/allreduce.prom"
    assert monitor.rank_textfile("/t/ar-{local_rank}.prom", 2, 8) == "/t/ar-2.prom"
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert monitor.local_rank() == 5
    monkeypatch.setenv("LOCAL_RANK", "x")
    assert monitor.local_rank() == 0
