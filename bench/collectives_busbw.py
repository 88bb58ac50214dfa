"""All-reduce bus bandwidth: collectives.local's figure next to a plain torch.distributed loop.

    python bench/collectives_busbw.py [--ranks 2] [--size-mib 16] [--iters 20] [--rounds 3]

Each round runs, in alternating order, collectives.local's own collect() (its launcher, roll call,
correctness passes and timing) restricted to one message size, and a plain program: N processes that
call init_process_group("gloo") with env://, all-reduce the same float32 tensor `--warmup` times, then
time `--iters` back-to-back all_reduce calls and report bytes / mean time x 2(n-1)/n. Both use the
same ranks, message size and backend (gloo on CPU; NCCL across GPUs when there are at least two).
Prints the medians of the rounds and their ratio (aim: within 15%, a ratio between 0.85 and 1.15).
Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.launch.ranks import free_port, loopback_interface
from preflight.transport.process import kill_tree
from preflight_checks.collectives.local import CollectivesLocal, Params

MIB = 1 << 20


def plain_rank(args: argparse.Namespace) -> None:
    """What a person would write to time all_reduce: no roll call, no checks, one timed loop."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    backend = args.backend
    dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    tensor = torch.zeros(args.size_mib * MIB // 4, dtype=torch.float32, device=device)
    for _ in range(args.warmup):
        dist.all_reduce(tensor)
    if backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(tensor)
    if backend == "nccl":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.iters
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        nbytes = tensor.numel() * 4
        busbw = nbytes / slowest.item() / 1e9 * 2 * (n - 1) / n
        print(json.dumps({"busbw_gbps": busbw}), flush=True)
    dist.destroy_process_group()


def plain_busbw(args: argparse.Namespace) -> float:
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(args.ranks),
           "GLOO_SOCKET_IFNAME": loopback_interface(), "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        for rank in range(args.ranks):
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--plain-rank", "--backend", args.backend,
                 "--size-mib", str(args.size_mib), "--iters", str(args.iters), "--warmup", str(args.warmup)],
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, stdout=subprocess.PIPE, text=True))
        out, _ = procs[0].communicate(timeout=300)
        for proc in procs[1:]:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc.pid, hard=True)
                proc.wait()
    return json.loads(out.strip().splitlines()[-1])["busbw_gbps"]


def check_busbw(args: argparse.Namespace) -> float:
    check = CollectivesLocal()
    size = args.size_mib * MIB
    params = Params(sizes_bytes=[size], fallback_sizes_bytes=[size], iters=args.iters, warmup=args.warmup,
                    gloo_ranks=args.ranks, check_gloo_on_gpu_nodes=False)
    with tempfile.TemporaryDirectory(prefix="bench-collectives-") as tmp:
        ctx = NodeContext(node="bench", output_dir=Path(tmp), scratch_dir=Path(tmp), expect=Expect(),
                          timeout_s=check.timeout_s)
        facts = check.collect(ctx, params)
    run = facts["runs"][0]
    if not run["ok"]:
        raise SystemExit(f"collectives.local failed: {run['error']}")
    entry = max(run["result"]["sizes"], key=lambda s: s["bytes"])
    return entry["busbw_gbps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--plain-rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_rank:
        plain_rank(args)
        return

    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    args.backend = "nccl" if gpus >= 2 and torch.distributed.is_nccl_available() else "gloo"
    if args.backend == "nccl":
        args.ranks = gpus
    ours, plain = [], []
    for round_number in range(args.rounds):
        order = (check_busbw, plain_busbw) if round_number % 2 == 0 else (plain_busbw, check_busbw)
        for measure in order:
            (ours if measure is check_busbw else plain).append(measure(args))
        print(f"round {round_number + 1}: collectives.local {ours[-1]:.3f} GB/s, plain loop {plain[-1]:.3f} GB/s",
              flush=True)
    ours_median, plain_median = statistics.median(ours), statistics.median(plain)
    ratio = ours_median / plain_median
    print(f"{args.backend}, {args.ranks} ranks, {args.size_mib} MiB, {args.iters} iterations, {args.rounds} rounds")
    print(f"{'collectives.local busbw':<26}{ours_median:>10.3f} GB/s")
    print(f"{'plain all_reduce loop':<26}{plain_median:>10.3f} GB/s")
    print(f"{'ratio (check / plain)':<26}{ratio:>10.3f}  {'within' if abs(ratio - 1) <= 0.15 else 'outside'} 15%")


if __name__ == "__main__":
    main()
