"""The training-side half of the communication-latency alarm.

    from preflight.integrations.monitor import instrument_ddp
    ddp = DistributedDataParallel(model)
    monitor = instrument_ddp(ddp)                     # http://127.0.0.1:18400+LOCAL_RANK/metrics (this host only)
    monitor = instrument_ddp(ddp, addr="0.0.0.0")     # every interface, for a remote Prometheus
    monitor = instrument_ddp(ddp, textfile="/var/lib/node_exporter/textfile/allreduce.prom")

Every process on a node serves its own port, `port + LOCAL_RANK` (torchrun sets LOCAL_RANK), so the
8 ranks of an 8-GPU node bind 18400-18407 and never each other's. The default base port, 18400, lies
outside 9100-9999 (Prometheus's exporter range, all allocated: 9400 is dcgm-exporter's), outside
torchrun's 29400/29500 and outside Linux's ephemeral range. A textfile is likewise one per local
rank when the node runs several (`allreduce-rank3.prom`, or `{local_rank}` in the name), each written
atomically: node_exporter reads every `*.prom` in its directory and never a half-written one.

`instrument_ddp` registers a DDP communication hook that does what DDP's default hook does (divide
each gradient bucket by the world size and all-reduce it) and times every bucket's all-reduce: with
CUDA events on GPU buckets, with the wall clock on CPU buckets. Each time lands in the histogram
`preflight_allreduce_latency_seconds`, labelled by rank, which `preflight alerts` turns into the
PreflightCommLatencyHigh alarm.

What the hook itself does per bucket is kept to a few stores into slots made once per bucket index:
a start time (or a CUDA event recorded from a reused pair), and a completion callback made once per
bucket index and reused every step. Nothing is judged, locked or exported there. The slots are
read at the step boundary (the next step's first bucket, on the training thread), where CUDA
events are resolved without blocking (an event not yet complete waits for a later boundary), and
their times are added to per-bucket counts; Prometheus reads those counts when it scrapes, on its
own thread, or the textfile writer does on its own.

`BucketTimer` is the hook alone; with `keep=True` it also keeps every bucket's record, which the
training canary (`preflight.workers.canary`) reads for the latency of every bucket of every step.
torch and prometheus_client are imported inside the functions that need them.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

METRIC = "preflight_allreduce_latency_seconds"
HELP = "Time of one DDP gradient-bucket all-reduce, from the hook to completion"
# From 100 us (a small bucket on NVLink) to 10 s (a collective stuck behind a straggler).
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                     1.0, 2.5, 5.0, 10.0)
TEXTFILE_INTERVAL_S = 15.0
_NO_LOCK = contextlib.nullcontext()
_IDLE = -1.0  # a slot whose all-reduce has not completed (or was already counted)

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


class LatencyCounts:
    """Latencies folded into histogram counts in place: one count per upper bound (+Inf last) and the sum."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Count one latency (callers hold `lock` when another thread may read at the same time)."""
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (le, count) pairs as Prometheus writes them, ending with +Inf, and the sum."""
        from prometheus_client.utils import floatToGoString

        with self.lock:
            counts, total = list(self.counts), self.total
        cumulative, running = [], 0
        for bound, count in zip([*self.bounds, float("inf")], counts):
            running += count
            cumulative.append((floatToGoString(bound), running))
        return cumulative, total


class BucketTimer:
    """A DDP communication hook that all-reduces each bucket (mean) and times it.

    `ddp.register_comm_hook(state=None, hook=timer.hook)` (state: the process group, None for the
    default one). Completed buckets are counted at each step boundary and on `poll()`: into `counts`
    when given, through `on_latency(seconds, nbytes)` when given, and into `records` with `keep=True`.
    Set `step` before each training step to group the records by step.
    """

    def __init__(self, on_latency: Callable[[float, int], None] | None = None, keep: bool = True,
                 counts: LatencyCounts | None = None) -> None:
        self.on_latency = on_latency
        self.keep = keep
        self.counts = counts
        self.records: list[BucketRecord] = []
        self.step = 0
        self._world = 1
        self._cuda = False
        self._all_reduce: Callable[..., Any] | None = None  # torch.distributed.all_reduce, once imported
        self._lock = threading.Lock()  # taken once per step boundary or poll, never per bucket
        # One slot per bucket index, made when the index is first seen and reused every step.
        self._started: list[float] = []
        self._seconds: list[float] = []  # CPU: written by the completion callback; _IDLE until then
        self._nbytes: list[int] = []
        self._steps: list[int] = []
        self._pairs: list[Any] = []  # GPU: the (start, end) CUDA events of the slot's last all-reduce
        self._armed: list[bool] = []  # an all-reduce started in this slot and not counted yet
        self._callbacks: list[Callable[[Any], Any]] = []
        self._late: list[tuple[Any, Any, int, int, float]] = []  # GPU pairs not complete at a boundary
        self._spare: list[tuple[Any, Any]] = []  # resolved pairs, for reuse

    # No annotations: DDP rejects a hook whose annotations are not GradBucket / Future[Tensor].
    def hook(self, state, bucket):  # type: ignore[no-untyped-def]
        index = bucket.index()
        if index == 0:
            self.poll()  # the previous step's buckets have all completed: DDP waited for them
        tensor = bucket.buffer()
        if index >= len(self._started):
            self._add_slots(index, tensor, state)
        if self.keep or self.on_latency is not None:  # only they need each bucket's size
            self._nbytes[index] = tensor.numel() * tensor.element_size()
        self._steps[index] = self.step
        self._armed[index] = True
        if self._cuda:
            pair = self._pairs[index]
            if pair is None:
                pair = self._pairs[index] = self._new_pair()
            pair[0].record()
        self._started[index] = time.perf_counter()
        tensor.div_(self._world)
        return self._all_reduce(tensor, group=state, async_op=True).get_future().then(self._callbacks[index])

    def _add_slots(self, index: int, tensor: Any, group: Any) -> None:
        """Slots up to `index`, each with its callback; on the first call, what every call reuses."""
        if self._all_reduce is None:
            import torch.distributed as dist

            self._all_reduce = dist.all_reduce
            self._world = dist.get_world_size(group)
            self._cuda = bool(tensor.is_cuda)  # a DDP model's buckets all live on one kind of device
        while len(self._started) <= index:
            slot = len(self._started)
            self._started.append(0.0)
            self._seconds.append(_IDLE)
            self._nbytes.append(tensor.numel() * tensor.element_size())
            self._steps.append(0)
            self._pairs.append(None)
            self._armed.append(False)
            self._callbacks.append(self._make_callback(slot))

    def _make_callback(self, slot: int) -> Callable[[Any], Any]:
        started, seconds, pairs, clock = self._started, self._seconds, self._pairs, time.perf_counter

        def done(fut: Any) -> Any:
            pair = pairs[slot]  # set by the hook for GPU buckets only
            if pair is not None:
                # The callback runs on the stream the all-reduce finished on: the event marks its end.
                pair[1].record()
                seconds[slot] = 0.0  # the end is recorded; its time is read back at a boundary
            else:
                seconds[slot] = clock() - started[slot]
            return fut.value()[0]

        return done

    def _new_pair(self) -> tuple[Any, Any]:
        if self._spare:
            return self._spare.pop()
        import torch

        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def poll(self, wait: bool = False) -> None:
        """Count the buckets that have completed; with `wait`, wait for the GPU ones still running."""
        with self._lock, (self.counts.lock if self.counts is not None else _NO_LOCK):
            for slot, armed in enumerate(self._armed):
                if not armed or self._seconds[slot] == _IDLE:
                    continue  # no all-reduce in this slot, or it has not completed
                pair = self._pairs[slot]
                if pair is not None:
                    # Read back below, or at a later boundary without blocking; the slot gets another pair.
                    self._late.append((pair[0], pair[1], self._nbytes[slot], self._steps[slot], self._started[slot]))
                    self._pairs[slot] = None
                else:
                    self._emit(self._steps[slot], self._seconds[slot], self._nbytes[slot], self._started[slot])
                self._seconds[slot] = _IDLE
                self._armed[slot] = False
            if self._late:
                self._resolve_late(wait)

    def _resolve_late(self, wait: bool) -> None:
        left = []
        for start_event, end_event, nbytes, step, started in self._late:
            if wait:
                end_event.synchronize()
            if end_event.query():
                self._emit(step, start_event.elapsed_time(end_event) / 1e3, nbytes, started)
                self._spare.append((start_event, end_event))
            else:
                left.append((start_event, end_event, nbytes, step, started))
        self._late = left

    def _emit(self, step: int, seconds: float, nbytes: int, started: float) -> None:
        if self.counts is not None:
            self.counts.observe(seconds)  # poll() holds its lock
        if self.keep:
            self.records.append(BucketRecord(step, seconds, nbytes, started))
        if self.on_latency is not None:
            self.on_latency(seconds, nbytes)


class LatencyCollector:
    """The histogram as a Prometheus collector: read from the timer's counts when scraped."""

    def __init__(self, timer: BucketTimer, counts: LatencyCounts, rank: int) -> None:
        self.timer, self.counts, self.rank = timer, counts, rank

    def describe(self) -> list[Any]:
        return []  # nothing is read at registration; the family is made on each scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        self.timer.poll()  # the buckets of the step under way that have completed count too
        buckets, total = self.counts.snapshot()
        family = HistogramMetricFamily(METRIC, HELP, labels=["rank"])
        family.add_metric([str(self.rank)], buckets=buckets, sum_value=total)
        yield family


@dataclass
class Monitor:
    """What instrument_ddp returns: the timer, the histogram, and where it is published."""

    timer: BucketTimer
    registry: Any
    histogram: LatencyCollector
    rank: int
    port: int | None = None  # the port actually bound (port=0 picks a free one)
    address: str | None = None  # the address it is bound to (127.0.0.1 unless addr= says otherwise)
    textfile: str | None = None
    _server: Any = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _writer: threading.Thread | None = None

    def write_textfile(self) -> None:
        """Write the histogram in node_exporter's textfile format now (atomically: temp file + rename)."""
        from prometheus_client import write_to_textfile

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


def instrument_ddp(model: Any, port: int | None = None, textfile: str | None = None, *, addr: str = "127.0.0.1",
                   rank: int | None = None, process_group: Any = None,
                   textfile_interval_s: float = TEXTFILE_INTERVAL_S, local: int | None = None) -> Monitor:
    """Time every all-reduce bucket of a DistributedDataParallel `model` and export the histogram.

    port: the base port; this process serves http://addr:(port + local rank)/metrics (port=0 binds a
    free port; Monitor.port says which). Neither port nor textfile given: DEFAULT_PORT. addr is
    127.0.0.1 unless given: the histogram names ranks and timings, and a training job opens no port to
    the network unless asked to (addr="0.0.0.0", or the node's address on the monitoring network).
    textfile: write the node_exporter textfile format there every `textfile_interval_s` and on close(),
    one file per local rank (rank_textfile), atomically. `local`: the local rank (default LOCAL_RANK).
    """
    import torch.distributed as dist
    from prometheus_client import CollectorRegistry

    if port is None and textfile is None:
        port = DEFAULT_PORT
    local = local_rank() if local is None else local
    if textfile:
        textfile = rank_textfile(textfile, local, local_world_size())
    if port:
        port += local
    if rank is None:
        rank = dist.get_rank(process_group) if dist.is_initialized() else 0
    counts = LatencyCounts()
    timer = BucketTimer(keep=False, counts=counts)
    registry = CollectorRegistry()
    collector = LatencyCollector(timer, counts, rank)
    registry.register(collector)  # type: ignore[arg-type]
    model.register_comm_hook(process_group, timer.hook)
    monitor = Monitor(timer=timer, registry=registry, histogram=collector, rank=rank, textfile=textfile)
    if port is not None:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=registry)
        monitor._server = server
        monitor.port = server.server_port
        monitor.address = server.server_address[0]
    if textfile:
        def write_periodically() -> None:
            while not monitor._stop.wait(textfile_interval_s):
                monitor.write_textfile()

        monitor._writer = threading.Thread(target=write_periodically, name="preflight-textfile", daemon=True)
        monitor._writer.start()
    return monitor
