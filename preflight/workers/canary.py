"""The training canary: a short, real data-parallel training run on every rank, watched step by step.

    python -m preflight.workers.canary --backend gloo --steps 30 --warmup 5
    python -m preflight.workers.canary --backend nccl --entry mypkg.train:make_training

Every rank trains under DistributedDataParallel. Each timed step is: wait for the next batch (the
iterator's next() and the copy to the device), then forward, loss, backward (with DDP's gradient
all-reduce), optimizer step, and a device synchronisation. A communication hook
(`preflight.integrations.monitor.BucketTimer`) times every gradient bucket's all-reduce. After the timed steps the
same bucket sizes are all-reduced alone, with no training around them: the idle latency of this very
process group, which the check compares the in-training latency with.
Then a few steps under DDP's `no_sync()` (the same step without the all-reduce), their data wait
left out: the step's compute alone (`compute_s` per rank), beside which the all-reduce the hook
timed says how much of it the backward pass hid.

The team's own model, through `--entry package.module:function`:

    def make_training(device: torch.device, batch_size: int | None):
        return model, optimizer, loss_fn, batches

- model: a torch.nn.Module (moved to `device` here if it is not there yet);
- optimizer: a torch.optim.Optimizer over model.parameters();
- loss_fn(outputs, targets) -> a scalar tensor;
- batches: an iterable of (inputs, targets) pairs, on the CPU or the device; inputs is a tensor or a
  tuple of tensors passed as model(*inputs). It is iterated again from the start when it runs out.
  Yield what your training really yields (a DataLoader over your data) and the data-wait figure
  tells whether the loader keeps up; `batch_size` None means your usual batch size.
The module must be importable by the Python that runs the ranks. See examples/canary_entry.py.

Rank 0 prints one JSON line (see preflight.workers.process_group for the protocol).
"""

from __future__ import annotations

import argparse
import resource
import threading
import time
from typing import Any

from preflight.workers.process_group import (
    DistEnv, add_dist_arguments, finish_group, import_team_module, init_group, join, run_worker,
)

NVML_INTERVAL_S = 0.1
INPUT_FEATURES = 256
POOL_BATCHES = 8
COMPUTE_STEPS = 10  # no_sync steps after the timed ones: the step without its all-reduce


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.canary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--entry", default=None, help="package.module:function of the team's own training")
    parser.add_argument("--hidden", type=int, default=512, help="width of the reference model")
    parser.add_argument("--layers", type=int, default=4, help="depth of the reference model")
    parser.add_argument("--batch", type=int, default=None, help="samples per rank per step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for this rank")
    parser.add_argument("--idle-iters", type=int, default=10, help="all-reduces per bucket size, alone")
    parser.add_argument("--find-max-batch", action="store_true",
                        help="GPU only: after the run, double the batch on rank 0 until it no longer fits")
    parser.add_argument("--max-batch-limit", type=int, default=1 << 16)
    parser.add_argument("--seed", type=int, default=0)
    add_dist_arguments(parser)
    return parser


def reference_training(device: Any, batch_size: int | None, hidden: int = 512, layers: int = 4,
                       seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """The built-in model, in the entry contract's shape: an MLP classifier on synthetic batches.

    Inputs are narrow (INPUT_FEATURES wide, projected up to `hidden`), as a real model's inputs are
    small next to its compute (token ids, image patches), and POOL_BATCHES batches are made up front
    in host memory (pinned on GPU nodes) and cycled: the reference's data wait is then the copy to the
    device, what a loader that keeps up costs. A slow loader shows through an entry of your own.
    """
    import torch
    import torch.nn as nn

    batch = batch_size or 64
    features = min(INPUT_FEATURES, hidden)
    blocks: list[Any] = [nn.Linear(features, hidden), nn.GELU()]
    for _ in range(max(0, layers - 1)):
        blocks += [nn.Linear(hidden, hidden), nn.GELU()]
    model = nn.Sequential(*blocks).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    pin = getattr(device, "type", "cpu") == "cuda"
    pool = []
    for _ in range(POOL_BATCHES):
        pair = (torch.randn(batch, features, generator=generator), torch.randint(0, hidden, (batch,), generator=generator))
        pool.append(tuple(t.pin_memory() for t in pair) if pin else pair)

    def batches() -> Any:
        while True:
            yield from pool

    return model, optimizer, nn.CrossEntropyLoss(), batches()


def load_entry(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"entry {spec!r} is not of the form package.module:function")
    return getattr(import_team_module(module_name), attr)


def make_training(args: argparse.Namespace, device: Any, batch: int | None, seed: int) -> tuple[Any, Any, Any, Any]:
    if args.entry:
        made = load_entry(args.entry)(device, batch)
        if not isinstance(made, tuple) or len(made) != 4:
            raise TypeError(f"{args.entry} returned {type(made).__name__}; expected "
                            "(model, optimizer, loss_fn, batches)")
        return made
    return reference_training(device, batch, args.hidden, args.layers, seed)


class BatchSource:
    """Next batch from an iterable, restarting it when it runs out, moved to the device."""

    def __init__(self, batches: Any, device: Any) -> None:
        self.batches, self.device = batches, device
        self.iterator = iter(batches)

    def next(self) -> tuple[tuple[Any, ...], Any]:
        try:
            inputs, targets = next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.batches)
            inputs, targets = next(self.iterator)
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        inputs = tuple(t.to(self.device, non_blocking=True) for t in inputs)
        return inputs, targets.to(self.device, non_blocking=True)


class UtilisationSampler:
    """GPU utilisation of every GPU this rank sees, sampled with NVML in a thread."""

    def __init__(self, device_count: int) -> None:
        self.samples: dict[int, list[int]] = {i: [] for i in range(device_count)}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def __enter__(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = {i: nvml_handle(pynvml, i) for i in self.samples}
            while not self._stop.is_set():
                for index, handle in handles.items():
                    self.samples[index].append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                self._stop.wait(NVML_INTERVAL_S)
            pynvml.nvmlShutdown()
        except Exception as exc:  # noqa: BLE001 - becomes "not measured" with the reason
            self.error = f"{type(exc).__name__}: {exc}"


def nvml_handle(pynvml: Any, torch_index: int) -> Any:
    """NVML's handle for torch's device index, honouring CUDA_VISIBLE_DEVICES (indices or UUIDs)."""
    import os

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if torch_index < len(visible):
        name = visible[torch_index]
        if name.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(name))
        return pynvml.nvmlDeviceGetHandleByUUID(name)
    return pynvml.nvmlDeviceGetHandleByIndex(torch_index)


class _Training:
    """This rank's model under DistributedDataParallel, every gradient bucket's all-reduce timed."""

    def __init__(self, args: argparse.Namespace, env: DistEnv, device: Any, cuda: bool) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from preflight.integrations.monitor import BucketTimer

        self.torch, self.device, self.cuda = torch, device, cuda
        model, self.optimizer, self.loss_fn, batches = make_training(args, device, args.batch, args.seed + 1 + env.rank)
        self.model = model.to(device)
        self.ddp = DistributedDataParallel(self.model, device_ids=[env.local_rank] if cuda else None)
        self.timer = BucketTimer()
        self.ddp.register_comm_hook(None, self.timer.hook)
        self.source = BatchSource(batches, device)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def step(self) -> tuple[float, float, float]:
        """(seconds of the whole step, seconds of it waiting for the batch, the loss)."""
        start = time.perf_counter()
        inputs, targets = self.source.next()
        self.sync()
        waited = time.perf_counter() - start
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(*inputs), targets)
        loss.backward()
        self.optimizer.step()
        value = float(loss.detach())  # also synchronises the device
        self.sync()
        return time.perf_counter() - start, waited, value

    def compute_step(self) -> float:
        """Seconds of one step under DDP's no_sync() (no gradient all-reduce), its data wait left out:
        what the step costs without communication, beside which the hook's all-reduce time tells how
        much of it the backward pass hid."""
        inputs, targets = self.source.next()
        self.sync()
        start = time.perf_counter()
        with self.ddp.no_sync():
            self.optimizer.zero_grad(set_to_none=True)
            self.loss_fn(self.ddp(*inputs), targets).backward()
        self.optimizer.step()
        self.sync()
        return time.perf_counter() - start

    def release(self) -> None:
        """Let go of DDP and the optimizer, so that their memory is free for what comes next."""
        self.ddp = self.optimizer = None


def _timed_steps(training: _Training, steps: int,
                 sampler: UtilisationSampler | None) -> tuple[list[float], list[float], list[float]]:
    """Step times, data waits and losses of the timed steps, GPU utilisation sampled meanwhile."""
    step_s, wait_s, losses = [], [], []
    if sampler:
        sampler.__enter__()
    try:
        for index in range(steps):
            training.timer.step = index
            took, waited, value = training.step()
            step_s.append(took)
            wait_s.append(waited)
            losses.append(value)
    finally:
        if sampler:
            sampler.__exit__()
    return step_s, wait_s, losses


def run_canary(args: argparse.Namespace, env: DistEnv) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, args.threads))
    cuda = args.backend == "nccl"
    if cuda:
        torch.cuda.set_device(env.local_rank)
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")
    store, members = join(env, args.join_timeout_s, tag="canary")
    init_group(store, env, args.backend, args.pg_timeout_s, device)

    torch.manual_seed(args.seed)
    training = _Training(args, env, device, cuda)
    for index in range(args.warmup):
        training.timer.step = -1 - index
        training.step()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    dist.barrier()
    sampler = UtilisationSampler(torch.cuda.device_count()) if cuda and env.local_rank == 0 else None
    step_s, wait_s, losses = _timed_steps(training, args.steps, sampler)
    training.timer.poll(wait=True)
    buckets = [(r.step, r.seconds, r.nbytes) for r in training.timer.records if r.step >= 0]
    compute_s = [training.compute_step() for _ in range(min(args.steps, COMPUTE_STEPS))]
    memory = device_memory(torch, device) if cuda else host_memory()
    idle = idle_allreduce(torch, dist, sorted({b[2] for b in buckets}), args.idle_iters, device)

    mine = {"rank": env.rank, "step_s": step_s, "wait_s": wait_s, "losses": losses, "buckets": buckets,
            "memory": memory, "compute_s": compute_s}
    gathered: list[Any] = [None] * env.world_size
    dist.all_gather_object(gathered, mine)
    parameters = sum(p.numel() for p in training.model.parameters() if p.requires_grad)
    finish_group()
    if env.rank != 0:
        return None
    result: dict[str, Any] = {
        "backend": args.backend, "device": "cuda" if cuda else "cpu", "world_size": env.world_size,
        "threads_per_rank": args.threads, "entry": args.entry,
        "model": args.entry or f"reference MLP: {args.layers} x Linear(.., {args.hidden}) + GELU",
        "parameters": parameters, "batch_per_rank": args.batch, "steps": args.steps, "warmup": args.warmup,
        "ranks": gathered, "idle_allreduce": idle, "torch_version": torch.__version__,
        "members": {str(r): m for r, m in members.items()},
    }
    if sampler:
        result["gpu_utilization"] = {"samples": {str(k): v for k, v in sampler.samples.items()},
                                     "error": sampler.error, "interval_s": NVML_INTERVAL_S}
    if cuda and args.find_max_batch:
        training.release()
        result["max_batch"] = find_max_batch(torch, args, device)
    return result


def device_memory(torch: Any, device: Any) -> dict[str, Any]:
    return {"kind": "cuda", "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "capacity_bytes": int(torch.cuda.get_device_properties(device).total_memory)}


def host_memory() -> dict[str, Any]:
    # ru_maxrss is in KiB on Linux: the peak resident memory of this rank.
    return {"kind": "host", "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def idle_allreduce(torch: Any, dist: Any, sizes: list[int], iters: int, device: Any) -> list[dict[str, Any]]:
    """Median time of an all-reduce of each bucket size with nothing else running: the reference."""
    out = []
    for nbytes in sizes:
        tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        times = []
        for _ in range(iters + 2):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        times = sorted(times[2:])
        out.append({"bytes": nbytes, "time_s": times[len(times) // 2], "samples_s": times})
    return out


def find_max_batch(torch: Any, args: argparse.Namespace, device: Any) -> dict[str, Any]:
    """Double the batch on this GPU (one full training step each, no DDP) until it runs out of memory."""
    batch = args.batch or 64
    largest, failed, error = None, None, None
    while batch <= args.max_batch_limit:
        try:
            model, optimizer, loss_fn, batches = make_training(args, device, batch, args.seed)
            inputs, targets = BatchSource(batches, device).next()
            loss = loss_fn(model.to(device)(*inputs), targets)
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize(device)
            largest = batch
        except torch.cuda.OutOfMemoryError as exc:
            failed, error = batch, str(exc).splitlines()[0]
            break
        finally:
            model = optimizer = loss_fn = batches = inputs = targets = loss = None
            torch.cuda.empty_cache()
        batch *= 2
    return {"largest_fitting": largest, "first_failing": failed, "limit": args.max_batch_limit, "error": error}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_worker(run_canary, args)


if __name__ == "__main__":
    main()
