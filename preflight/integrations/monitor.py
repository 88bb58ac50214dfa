"""The training-side half of the communication-latency alarm.

    from preflight.integrations.monitor import instrument_ddp
    ddp = DistributedDataParallel(model)
    monitor = instrument_ddp(ddp)                     # http://0.0.0.0:18400+LOCAL_RANK/metrics
    monitor = instrument_ddp(ddp, textfile="/var/lib/node_exporter/textfile/allreduce.prom")

Every process on a node serves its own port, `port + LOCAL_RANK` (torchrun sets LOCAL_RANK), so the
8 ranks of an 8-GPU node bind 18400-18407 and never each other's. The default base port, 18400, lies
outside 9100-9999 (Prometheus's exporter range, all allocated: 9400 is dcgm-exporter's), outside
torchrun's 29400/29500 and outside Linux's ephemeral range. A textfile is likewise one per local
rank when the node runs several (`allreduce-rank3.prom`, or `{local_rank}` in the name), each written
atomically: node_exporter reads every `*.prom` in its directory and never a half-written one.

`instrument_ddp` registers a DDP communication hook that does what DDP's default hook does (divide
each gradient bucket by the world size and all-reduce it) and times every bucket's all-reduce: with
CUDA events on GPU buckets (read back without blocking once they have completed), with the wall
clock on CPU buckets. Each time lands in the histogram `preflight_allreduce_latency_seconds`,
labelled by rank, which `preflight alerts` turns into the PreflightCommLatencyHigh alarm.

`BucketTimer` is the hook alone, without Prometheus; the training canary
(`preflight.workers.canary`) uses it to get the latency of every bucket of every step.
torch and prometheus_client are imported inside the functions that need them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

METRIC = "preflight_allreduce_latency_seconds"
# From 100 us (a small bucket on NVLink) to 10 s (a collective stuck behind a straggler).
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                     1.0, 2.5, 5.0, 10.0)
TEXTFILE_INTERVAL_S = 15.0
DEFAULT_PORT = 18400  # base port: each local rank serves DEFAULT_PORT + LOCAL_RANK (see the module docstring)


def local_rank() -> int:
    """This process's rank on its node: LOCAL_RANK as torchrun (and Slurm through it) sets it, else 0."""
    import os

    try:
        return max(0, int(os.environ.get("LOCAL_RANK", "0")))
    except ValueError:
        return 0


def local_world_size() -> int:
    import os

    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def rank_textfile(path: str, rank: int, ranks_on_node: int) -> str:
    """One file per local rank: `{local_rank}` in the name is filled in; without it, and with several ranks
    on the node, `-rank<N>` goes before the extension (two ranks never write one file)."""
    if "{local_rank}" in path:
        return path.replace("{local_rank}", str(rank))
    if ranks_on_node <= 1:
        return path
    import os

    stem, ext = os.path.splitext(path)
    return f"{stem}-rank{rank}{ext or '.prom'}"


@dataclass
class BucketRecord:
    step: int  # the value of BucketTimer.step when the bucket's all-reduce started
    seconds: float
    nbytes: int
    started: float  # time.perf_counter() when the hook was called


class BucketTimer:
    """A DDP communication hook that all-reduces each bucket (mean) and times it.

    `ddp.register_comm_hook(state=None, hook=timer.hook)`. `on_latency(seconds, nbytes)` is called
    for every completed bucket; `records` keeps them all when `keep=True`. Set `step` before each
    training step to group buckets by step.
    """

    def __init__(self, on_latency: Callable[[float, int], None] | None = None, keep: bool = True) -> None:
        self.on_latency = on_latency
        self.keep = keep
        self.records: list[BucketRecord] = []
        self.step = 0
        self._pending: list[tuple[Any, Any, int, int, float]] = []  # CUDA events not yet read back
        self._lock = threading.Lock()

    def _record(self, step: int, seconds: float, nbytes: int, started: float) -> None:
        with self._lock:
            if self.keep:
                self.records.append(BucketRecord(step, seconds, nbytes, started))
        if self.on_latency is not None:
            self.on_latency(seconds, nbytes)

    # No annotations: DDP rejects a hook whose annotations are not GradBucket / Future[Tensor].
    def hook(self, state, bucket):  # type: ignore[no-untyped-def]
        import torch
        import torch.distributed as dist

        self.poll()
        tensor = bucket.buffer()
        group = state  # the process group passed to register_comm_hook; None: the default group
        world = dist.get_world_size(group)
        nbytes = tensor.numel() * tensor.element_size()
        step, started = self.step, time.perf_counter()
        on_cuda = tensor.is_cuda
        if on_cuda:
            start_event = torch.cuda.Event(enable_timing=True)
            start_event.record()
        tensor.div_(world)
        future = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def done(fut: Any) -> Any:
            if on_cuda:
                # The callback runs on the stream the all-reduce finished on: the event marks its end.
                end_event = torch.cuda.Event(enable_timing=True)
                end_event.record()
                with self._lock:
                    self._pending.append((start_event, end_event, nbytes, step, started))
            else:
                self._record(step, time.perf_counter() - started, nbytes, started)
            return fut.value()[0]

        return future.then(done)

    def poll(self, wait: bool = False) -> None:
        """Read back the CUDA timings that have completed (all of them, synchronising, with wait)."""
        with self._lock:
            pending, self._pending = self._pending, []
        left = []
        for start_event, end_event, nbytes, step, started in pending:
            if wait:
                end_event.synchronize()
            if end_event.query():
                self._record(step, start_event.elapsed_time(end_event) / 1e3, nbytes, started)
            else:
                left.append((start_event, end_event, nbytes, step, started))
        if left:
            with self._lock:
                self._pending = left + self._pending


@dataclass
class Monitor:
    """What instrument_ddp returns: the timer, the histogram, and where it is published."""

    timer: BucketTimer
    registry: Any
    histogram: Any
    rank: int
    port: int | None = None  # the port actually bound (port=0 picks a free one)
    textfile: str | None = None
    _server: Any = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _writer: threading.Thread | None = None

    def write_textfile(self) -> None:
        """Write the histogram in node_exporter's textfile format now (atomically: temp file + rename)."""
        from prometheus_client import write_to_textfile

        self.timer.poll()
        if self.textfile:
            write_to_textfile(self.textfile, self.registry)

    def close(self) -> None:
        """Stop serving, read back the last GPU timings and write the textfile one last time."""
        self._stop.set()
        if self._writer is not None:
            self._writer.join(timeout=5)
        self.timer.poll(wait=True)
        if self.textfile:
            self.write_textfile()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _PollOnScrape:
    def __init__(self, timer: BucketTimer) -> None:
        self.timer = timer

    def collect(self) -> list[Any]:
        self.timer.poll()
        return []


def instrument_ddp(model: Any, port: int | None = None, textfile: str | None = None, *, addr: str = "0.0.0.0",
                   rank: int | None = None, process_group: Any = None,
                   textfile_interval_s: float = TEXTFILE_INTERVAL_S, local: int | None = None) -> Monitor:
    """Time every all-reduce bucket of a DistributedDataParallel `model` and export the histogram.

    port: the base port; this process serves http://addr:(port + local rank)/metrics (port=0 binds a
    free port; Monitor.port says which). Neither port nor textfile given: DEFAULT_PORT.
    textfile: write the node_exporter textfile format there every `textfile_interval_s` and on close(),
    one file per local rank (rank_textfile), atomically. `local`: the local rank (default LOCAL_RANK).
    """
    import torch.distributed as dist
    from prometheus_client import CollectorRegistry, Histogram

    if port is None and textfile is None:
        port = DEFAULT_PORT
    local = local_rank() if local is None else local
    if textfile:
        textfile = rank_textfile(textfile, local, local_world_size())
    if port:
        port += local
    if rank is None:
        rank = dist.get_rank(process_group) if dist.is_initialized() else 0
    registry = CollectorRegistry()
    timer = BucketTimer(keep=False)
    # Registered first, so every scrape reads back the GPU timings that completed since the last hook call.
    registry.register(_PollOnScrape(timer))  # type: ignore[arg-type]
    histogram = Histogram(METRIC, "Time of one DDP gradient-bucket all-reduce, from the hook to completion",
                          ["rank"], registry=registry, buckets=LATENCY_BUCKETS_S)
    child = histogram.labels(rank=str(rank))
    timer.on_latency = lambda seconds, nbytes: child.observe(seconds)
    model.register_comm_hook(process_group, timer.hook)
    monitor = Monitor(timer=timer, registry=registry, histogram=histogram, rank=rank, textfile=textfile)
    if port is not None:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=registry)
        monitor._server = server
        monitor.port = server.server_port
    if textfile:
        def write_periodically() -> None:
            while not monitor._stop.wait(textfile_interval_s):
                monitor.write_textfile()

        monitor._writer = threading.Thread(target=write_periodically, name="preflight-textfile", daemon=True)
        monitor._writer.start()
    return monitor
