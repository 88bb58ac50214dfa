"""preflight.integrations.monitor without a GPU: the read-back of CUDA-event timings, and instrument_ddp's contract."""

from __future__ import annotations

import pytest

from preflight.integrations.monitor import BucketTimer, instrument_ddp


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
    timer._pending = [(start, Event(True, 2.5), 1024, 0, 0.0), (start, Event(False, 7.0), 2048, 0, 0.0)]
    timer.poll()
    assert seen == [(0.0025, 1024)] and len(timer._pending) == 1
    timer.poll(wait=True)
    assert seen == [(0.0025, 1024), (0.007, 2048)] and not timer._pending
    assert [(r.step, r.nbytes) for r in timer.records] == [(0, 1024), (0, 2048)]


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
