"""What preflight.integrations.monitor.instrument_ddp costs a training step: instrumented next to plain, one run.

    python bench/monitor_overhead.py [--ranks 2] [--steps 40] [--hidden 512] [--layers 4] [--batch 64]

Every rank holds two copies of the same model, each in its own DistributedDataParallel: one with
DDP's default all-reduce, one with the latency hook and its Prometheus histogram (served on
127.0.0.1, a free port). Steps alternate between the two, each after a barrier, so drift hits both
alike; a step's time is the slowest rank's. Prints both medians and their ratio (instrumented over
plain; 1.00 means no cost). gloo on CPU here; with --backend nccl on GPUs. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.workers.process_group import (  # noqa: E402
    DistEnv, add_dist_arguments, finish_group, init_group, join, run_worker,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--steps", type=int, default=40, help="timed steps of each kind")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rank-program", action="store_true", help=argparse.SUPPRESS)
    add_dist_arguments(p)
    return p


def rank_body(args: argparse.Namespace, env: DistEnv) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from preflight.integrations.monitor import instrument_ddp
    from preflight.workers.canary import reference_training

    torch.set_num_threads(1)
    cuda = args.backend == "nccl"
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    store, _ = join(env, args.join_timeout_s, tag="monitor-bench")
    init_group(store, env, args.backend, args.pg_timeout_s, device)
    loops = {}
    for kind in ("plain", "instrumented"):
        torch.manual_seed(0)
        model, optimizer, loss_fn, batches = reference_training(device, args.batch, args.hidden, args.layers)
        ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if cuda else None)
        monitor = instrument_ddp(ddp, port=0, addr="127.0.0.1") if kind == "instrumented" else None
        inputs, targets = next(iter(batches))
        loops[kind] = (ddp, optimizer, loss_fn, inputs.to(device), targets.to(device), monitor)

    def step(kind: str) -> float:
        ddp, optimizer, loss_fn, inputs, targets, _ = loops[kind]
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(inputs), targets).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for _ in range(args.warmup):
        step("plain")
        step("instrumented")
    times: dict[str, list[float]] = {"plain": [], "instrumented": []}
    for index in range(args.steps):
        for kind in (("plain", "instrumented") if index % 2 == 0 else ("instrumented", "plain")):
            times[kind].append(step(kind))
    slowest = torch.tensor(times["plain"] + times["instrumented"], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    values = slowest.cpu().tolist()
    loops["instrumented"][5].close()
    finish_group()
    if env.rank != 0:
        return None
    return {"plain_s": values[:args.steps], "instrumented_s": values[args.steps:]}


def main() -> None:
    args = parser().parse_args()
    if args.rank_program:
        run_worker(rank_body, args)
        return
    from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface

    argv = [sys.executable, __file__, "--rank-program"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
        if k in ("backend", "steps", "warmup", "hidden", "layers", "batch")]
    launch = launch_local(argv, args.ranks, timeout_s=600,
                          env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()})
    outcome = interpret_launch(launch)
    if not outcome["ok"]:
        sys.exit(f"bench failed: {outcome['error']}\n" + "\n".join(r.stderr[-2000:] for r in launch.ranks))
    result = outcome["result"]
    plain, instrumented = statistics.median(result["plain_s"]), statistics.median(result["instrumented_s"])
    print(f"{args.ranks} ranks ({args.backend}), reference MLP {args.layers} x {args.hidden}, batch {args.batch}, "
          f"{args.steps} steps each, alternating")
    print(f"  plain DDP step          median {plain * 1e3:8.2f} ms")
    print(f"  with instrument_ddp     median {instrumented * 1e3:8.2f} ms")
    print(f"  ratio instrumented/plain       {instrumented / plain:8.3f}")


if __name__ == "__main__":
    main()
