"""All-reduce among the ranks: correctness, latency and bus bandwidth, as nccl-tests define them.

    python -m preflight.workers.allreduce --backend gloo --sizes 8,1048576,16777216
    torchrun --nproc-per-node 8 -m preflight.workers.allreduce --backend nccl

Correctness, before any timing, at every size and on a separate random tensor:
- known sums: rank r contributes r+1 in every element; every element must come back as n(n+1)/2;
- random data: rank r draws integers in [-1000, 1000] (as float32) from a generator seeded with
  seed + r; every rank regenerates all n inputs and compares the result exactly. Integer values keep
  every partial sum exact in float32, so the comparison does not depend on the reduction order.
Wrong element counts are gathered per rank, so a bad result names the rank that saw it.

Timing, as nccl-tests times it: after `--warmup` untimed operations, `--iters` operations per size run
back to back, in `--samples` groups (iters / samples operations each) so that the spread can be
shown. On GPUs a group is timed between two CUDA events on the stream, with no host synchronisation
between its operations; on CPUs (gloo) on the host clock around the group. A sample's time is the
group's time over its operations, the slowest rank's, since the collective is not done before every
rank is. algbw = bytes / time, busbw = algbw * 2(n-1)/n, in GB/s (1e9 bytes/s).

Per rank, as well: each rank's own median time per operation at each size (`rank_time_s`, indexed
by global rank), gathered to rank 0. A collective ends on every rank at about the same time, so
on a healthy group these are close together; a rank that finishes its part later than the others
(a host too busy to drive its share, a slow path into it) stands out, and the cross-node checks'
straggler search reads them per node.

Prints (rank 0) one JSON line; see preflight.workers.process_group for the protocol and --absent-rank.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from preflight.workers.process_group import (
    DistEnv, add_dist_arguments, finish_group, init_group, join, median, run_worker,
)

RANDOM_VALUE_LIMIT = 1000
DTYPE_BYTES = 4  # float32


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce correction: busbw = algbw * 2(n-1)/n."""
    return 2.0 * (world_size - 1) / world_size


def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] < DTYPE_BYTES:
        raise argparse.ArgumentTypeError(f"sizes must be at least {DTYPE_BYTES} bytes: {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.allreduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="where the tensors live (default: cuda for nccl, cpu for gloo)")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("8,1048576,16777216"),
                        help="message sizes in bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=20, help="timed operations per size (nccl-tests -n)")
    parser.add_argument("--samples", type=int, default=5, help="groups the timed operations are split into")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--check-elements", type=int, default=1 << 20,
                        help="elements of the random-data correctness tensor")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for this rank")
    # Tests only (preflight.engine.faults): rank 0 sleeps this long before each timed operation, a real
    # slowdown of this launch alone (a transient: the next launch is not slowed).
    parser.add_argument("--stall-s", type=float, default=0.0, help=argparse.SUPPRESS)
    add_dist_arguments(parser)
    return parser


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def samples_and_ops(iters: int, samples: int) -> tuple[int, int]:
    """(groups, operations per group): `iters` operations in at most `samples` equal groups."""
    groups = max(1, min(samples, iters))
    return groups, max(1, iters // groups)


def timed_group(operation: Any, ops: int, device: Any) -> float:
    """Seconds per operation of `ops` back-to-back operations, started together on every rank.

    CUDA: between two events on the current stream, as nccl-tests does; the host only waits at the
    end. CPU: the host clock around the group (gloo's operations are synchronous anyway).
    """
    import torch
    import torch.distributed as dist

    _sync(device)
    dist.barrier()
    if device.type == "cuda":
        _sync(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ops):
            operation()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / ops
    began = time.perf_counter()
    for _ in range(ops):
        operation()
    return (time.perf_counter() - began) / ops


def _random_input(rank: int, seed: int, elements: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed(seed + rank)
    return torch.randint(-RANDOM_VALUE_LIMIT, RANDOM_VALUE_LIMIT + 1, (elements,), generator=generator,
                         dtype=torch.int32).to(torch.float32)


def measure_allreduce(args: argparse.Namespace, env: DistEnv) -> dict[str, Any]:
    import torch

    torch.set_num_threads(max(1, args.threads))
    device_kind = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    if device_kind == "cuda":
        torch.cuda.set_device(env.local_rank)
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")

    join_start = time.monotonic()
    store, members = join(env, args.join_timeout_s, tag="allreduce")
    joined_s = time.monotonic() - join_start
    init_start = time.monotonic()
    init_group(store, env, args.backend, args.pg_timeout_s, device)
    torch.distributed.barrier()
    init_s = time.monotonic() - init_start

    wrong, buffers, max_abs_error = _check_sums(args, env, device)  # a fast wrong answer is not a result
    per_size, own, samples = _time_sizes(args, env, device, buffers)
    torch.distributed.all_reduce(wrong)  # every rank filled its own column
    torch.distributed.all_reduce(own)
    wrong_rows = wrong.cpu().tolist()
    own_rows = own.cpu().tolist()
    finish_group()
    if env.rank != 0:
        return {}
    return {
        "backend": args.backend,
        "device": device_kind,
        "world_size": env.world_size,
        "torch_version": torch.__version__,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None,
        "members": {str(r): m for r, m in members.items()},
        "join_s": joined_s,
        "init_s": init_s,
        "pg_timeout_s": args.pg_timeout_s,
        "iters": args.iters,
        "samples": samples,
        "timing": "cuda_events" if device_kind == "cuda" else "host",
        "warmup": args.warmup,
        "sizes": _size_rows(per_size, env.world_size, wrong_rows, own_rows),
        "random_check": {
            "elements": args.check_elements,
            "seed": args.seed,
            "wrong_by_rank": wrong_rows[-1],
            "max_abs_error": max_abs_error,
        },
    }


def _check_sums(args: argparse.Namespace, env: DistEnv, device: Any) -> tuple[Any, dict[int, Any], float]:
    """Known sums at every size and the random-data check: (wrong elements per size and rank, this rank's
    column filled; the buffers per size, reused for timing; the largest absolute error of the random data)."""
    import torch
    import torch.distributed as dist

    n = env.world_size
    wrong = torch.zeros(len(args.sizes) + 1, n, dtype=torch.int64, device=device)
    buffers = {}
    expected_known = n * (n + 1) / 2
    for index, size in enumerate(args.sizes):
        elements = max(1, size // DTYPE_BYTES)
        buf = torch.full((elements,), float(env.rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        wrong[index, env.rank] = (buf != expected_known).sum()
        buffers[size] = buf

    data = _random_input(env.rank, args.seed, args.check_elements).to(device)
    dist.all_reduce(data)
    reference = torch.zeros(args.check_elements, dtype=torch.float64)
    for rank in range(n):
        reference += _random_input(rank, args.seed, args.check_elements).to(torch.float64)
    result = data.cpu().to(torch.float64)
    wrong[-1, env.rank] = int((result != reference).sum())
    return wrong, buffers, float((result - reference).abs().max())


def _time_sizes(args: argparse.Namespace, env: DistEnv, device: Any,
                buffers: dict[int, Any]) -> tuple[list[tuple[int, int, int, list[float]]], Any, int]:
    """Every size timed: ([(requested size, bytes, operations per sample, the slowest rank's sample times)],
    each rank's own median time per size, this rank's column filled; the samples per size)."""
    import torch
    import torch.distributed as dist

    per_size = []
    own = torch.zeros(len(args.sizes), env.world_size, dtype=torch.float64, device=device)
    samples, ops = samples_and_ops(args.iters, args.samples)
    stall_s = args.stall_s if env.rank == 0 else 0.0
    for index, size in enumerate(args.sizes):
        buf = buffers[size].zero_()
        for _ in range(args.warmup):
            dist.all_reduce(buf)

        def operation(buf: Any = buf) -> None:
            if stall_s:
                time.sleep(stall_s)
            dist.all_reduce(buf)

        times = [timed_group(operation, ops, device) for _ in range(samples)]
        own[index, env.rank] = median(times)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        per_size.append((size, buf.numel() * DTYPE_BYTES, ops, slowest.cpu().tolist()))
        buffers[size] = None  # free the large buffer before the next size
        del buf
    return per_size, own, samples


def _size_rows(per_size: list[tuple[int, int, int, list[float]]], n: int, wrong_rows: list[list[int]],
               own_rows: list[list[float]]) -> list[dict[str, Any]]:
    """The report's row per size: times, algbw and busbw (median and samples), wrong elements, rank times."""
    rows = []
    for index, (size, nbytes, ops, times) in enumerate(per_size):
        algbw = [nbytes / t / 1e9 for t in times]
        t_med = median(times)
        rows.append({
            "bytes": nbytes,
            "requested_bytes": size,
            "ops_per_sample": ops,
            "time_s": t_med,
            "time_samples_s": times,
            "algbw_gbps": nbytes / t_med / 1e9,
            "busbw_gbps": nbytes / t_med / 1e9 * bus_factor(n),
            "algbw_samples_gbps": algbw,
            "busbw_samples_gbps": [a * bus_factor(n) for a in algbw],
            "known_sum_wrong_by_rank": wrong_rows[index],
            "rank_time_s": own_rows[index],
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_worker(measure_allreduce, args)


if __name__ == "__main__":
    main()
