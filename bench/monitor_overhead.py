"""What preflight.integrations.monitor.instrument_ddp costs a training step: repetitions, median and spread.

    python bench/monitor_overhead.py [--ranks 2] [--repeats 7] [--steps 50] [--hidden 512] [--layers 4]
                                     [--batch 64] [--reference] [--per-bucket]

Every rank holds two copies of the same model, each in its own DistributedDataParallel: one with
DDP's default all-reduce ("plain"), one with the latency hook and its Prometheus histogram (served
on 127.0.0.1, a free port). One run holds --repeats repetitions of --steps steps of each kind;
inside a repetition the kinds alternate step by step (plain, instrumented, instrumented, plain, ...;
the next repetition starts with the other kind), so drift and a neighbour's load hit both alike.
Every step starts after a barrier and counts as its slowest rank. Prints each repetition's ratio
(median instrumented step over median plain step; 1.00 means no cost), then their median, min and
max. --reference adds a third kind, torch's own Python all-reduce hook
(torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook): what any Python hook
costs before it times anything. --per-bucket measures the hook's own work instead, per bucket, in one
process where nothing waits on another rank. gloo on CPU here; with --backend nccl on GPUs. Not a test.
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

KINDS = ("plain", "instrumented")
REFERENCE = "python-hook"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--repeats", type=int, default=7, help="alternating repetitions (at least 5)")
    p.add_argument("--steps", type=int, default=50, help="timed steps of each kind in each repetition")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reference", action="store_true", help=f"also time torch's Python all-reduce hook ({REFERENCE})")
    p.add_argument("--per-bucket", action="store_true",
                   help="instead: the hook's own work per bucket, in one process (world size 1, ~200 buckets)")
    p.add_argument("--rank-program", action="store_true", help=argparse.SUPPRESS)
    add_dist_arguments(p)
    return p


def rank_body(args: argparse.Namespace, env: DistEnv) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
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
    kinds = KINDS + ((REFERENCE,) if args.reference else ())
    loops, monitors = {}, []
    for kind in kinds:
        torch.manual_seed(0)
        model, optimizer, loss_fn, batches = reference_training(device, args.batch, args.hidden, args.layers)
        ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if cuda else None)
        if kind == "instrumented":
            monitors.append(instrument_ddp(ddp, port=0, addr="127.0.0.1"))
        elif kind == REFERENCE:
            ddp.register_comm_hook(None, allreduce_hook)
        inputs, targets = next(iter(batches))
        loops[kind] = (ddp, optimizer, loss_fn, inputs.to(device), targets.to(device))

    def step(kind: str) -> float:
        ddp, optimizer, loss_fn, inputs, targets = loops[kind]
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(inputs), targets).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for _ in range(args.warmup):
        for kind in kinds:
            step(kind)
    times: dict[str, list[list[float]]] = {kind: [] for kind in kinds}
    for repeat in range(args.repeats):
        blocks: dict[str, list[float]] = {kind: [] for kind in kinds}
        for index in range(args.steps):
            order = kinds if (repeat + index) % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                blocks[kind].append(step(kind))
        for kind in kinds:
            times[kind].append(blocks[kind])
    flat = [t for kind in kinds for block in times[kind] for t in block]
    slowest = torch.tensor(flat, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    values = slowest.cpu().tolist()
    buckets = monitors[0].histogram.counts.snapshot()[0][-1][1] if monitors else 0
    for monitor in monitors:
        monitor.close()
    finish_group()
    if env.rank != 0:
        return None
    per_kind = args.repeats * args.steps
    out: dict[str, Any] = {"kinds": list(kinds), "buckets_timed": buckets}
    for i, kind in enumerate(kinds):
        mine = values[i * per_kind:(i + 1) * per_kind]
        out[kind] = [mine[r * args.steps:(r + 1) * args.steps] for r in range(args.repeats)]
    return out


def per_bucket(args: argparse.Namespace) -> None:
    """The hook's own work, apart from any scheduling: one process, world size 1, a model of ~200
    small buckets, so that what a hook costs per bucket dominates the step; plain, torch's Python
    hook and instrument_ddp alternate step by step."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from preflight.integrations.monitor import instrument_ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    kinds = ("plain", REFERENCE, "instrumented")
    models, monitors = {}, []
    for kind in kinds:
        torch.manual_seed(0)
        ddp = DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(200)]),
                                      bucket_cap_mb=0.01)
        if kind == REFERENCE:
            ddp.register_comm_hook(None, allreduce_hook)
        elif kind == "instrumented":
            monitors.append(instrument_ddp(ddp, port=0, addr="127.0.0.1"))
        models[kind] = ddp
    batch = torch.randn(8, 64)

    def step(kind: str) -> float:
        start = time.perf_counter()
        models[kind](batch).sum().backward()
        return time.perf_counter() - start

    for _ in range(5):
        for kind in kinds:
            step(kind)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for index in range(args.repeats * args.steps):
        for kind in kinds if index % 2 == 0 else tuple(reversed(kinds)):
            times[kind].append(step(kind))
    buckets = monitors[0].histogram.counts.snapshot()[0][-1][1] / (5 + args.repeats * args.steps)
    for monitor in monitors:
        monitor.close()
    dist.destroy_process_group()
    plain = statistics.median(times["plain"])
    print(f"per bucket, 1 process, {buckets:.0f} buckets a step, {args.repeats * args.steps} steps of each kind:")
    for kind in kinds[1:]:
        extra = (statistics.median(times[kind]) - plain) / buckets
        print(f"  {kind:<13} {extra * 1e6:7.1f} us a bucket over DDP's built-in all-reduce")


def summary(ratios: list[float]) -> str:
    return f"median {statistics.median(ratios):.3f}  min {min(ratios):.3f}  max {max(ratios):.3f}"


def main() -> None:
    args = parser().parse_args()
    if args.rank_program:
        run_worker(rank_body, args)
        return
    if args.repeats < 5:
        sys.exit("--repeats: at least 5, so that the spread means something")
    if args.per_bucket:
        per_bucket(args)
        return
    from preflight.launch.ranks import interpret_launch, launch_local, loopback_interface

    argv = [sys.executable, __file__, "--rank-program"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
        if k in ("backend", "repeats", "steps", "warmup", "hidden", "layers", "batch")]
    argv += ["--reference"] if args.reference else []
    launch = launch_local(argv, args.ranks, timeout_s=900,
                          env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()})
    outcome = interpret_launch(launch)
    if not outcome["ok"]:
        sys.exit(f"bench failed: {outcome['error']}\n" + "\n".join(r.stderr[-2000:] for r in launch.ranks))
    result = outcome["result"]
    kinds = result["kinds"]
    medians = {kind: [statistics.median(block) for block in result[kind]] for kind in kinds}
    print(f"{args.ranks} ranks ({args.backend}), reference MLP {args.layers} x {args.hidden}, batch {args.batch}; "
          f"{args.repeats} alternating repetitions of {args.steps} steps of each kind "
          f"({result['buckets_timed']} bucket all-reduces timed on rank 0)")
    print(f"{'repetition':>10} " + " ".join(f"{kind + ' ms':>16}" for kind in kinds)
          + f" {'instrumented/plain':>19}" + (f" {REFERENCE + '/plain':>17}" if REFERENCE in kinds else ""))
    for r in range(args.repeats):
        row = f"{r + 1:>10} " + " ".join(f"{medians[kind][r] * 1e3:>16.2f}" for kind in kinds)
        row += f" {medians['instrumented'][r] / medians['plain'][r]:>19.3f}"
        if REFERENCE in kinds:
            row += f" {medians[REFERENCE][r] / medians['plain'][r]:>17.3f}"
        print(row)
    ratios = [i / p for i, p in zip(medians["instrumented"], medians["plain"])]
    print(f"\ninstrument_ddp / plain over {args.repeats} repetitions: {summary(ratios)}")
    if REFERENCE in kinds:
        print(f"{REFERENCE} / plain over {args.repeats} repetitions: "
              f"{summary([h / p for h, p in zip(medians[REFERENCE], medians['plain'])])}")
        print(f"instrument_ddp / {REFERENCE}: "
              f"{summary([i / h for i, h in zip(medians['instrumented'], medians[REFERENCE])])}")


if __name__ == "__main__":
    main()
