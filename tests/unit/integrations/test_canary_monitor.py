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


def test_instrument_ddp_needs_a_port_or_a_textfile():
    pytest.importorskip("torch")
    with pytest.raises(ValueError):
        instrument_ddp(object())


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
