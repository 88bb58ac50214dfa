"""One weak-scaling point: a real DistributedDataParallel training step on every rank, timed.

    python -m preflight.workers.ddp_scaling --backend gloo --hidden 512 --layers 4 --batch 128
    torchrun --nproc-per-node 8 -m preflight.workers.ddp_scaling --backend nccl

Every rank trains the same model on its own synthetic batch of a fixed size (weak scaling: more
ranks, more samples per step, the same work per rank). The batch is made once before timing, so no
data loading is measured.

Timing: after --warmup steps, --steps pairs of steps, each pair one normal DDP step (forward,
backward with DDP's gradient all-reduce, optimizer step) and one under `no_sync()` (the same step
without the all-reduce), in alternating order so that drift hits both alike. Every timed step starts
after a barrier, and its time is the slowest rank's. The full step's median gives the throughput;
the no_sync median is the compute-only time, and their difference is the communication that the
backward pass did not hide.

Per rank, as well (gathered to rank 0, indexed by global rank): each rank's own median step time
(`rank_step_s`) and its own median no_sync step time (`rank_compute_s`). The no_sync step does
not wait for the other ranks, so a rank whose compute is slower than its peers' (a throttled GPU,
a busy host) shows there, and the cross-node checks' straggler search reads it per node.

The model is a reference MLP built from torch.nn alone (--hidden, --layers), or the team's own:

    --workload package.module:factory

`factory(batch_size: int, device: torch.device)` returns `(model, make_batch)` or
`(model, make_batch, loss_fn)`:
- model: a torch.nn.Module (moved to the device here if it is not there yet);
- make_batch(): the inputs of one step for one rank, on the device: a tensor, or a tuple of tensors
  passed as model(*inputs); it is called once, before timing;
- loss_fn(outputs) -> scalar tensor; default: the mean of the squared outputs (a backward pass costs
  the same whatever the loss).
The module must be importable by the Python that runs the ranks.

Prints (rank 0) one JSON line; see preflight.workers.process_group for the protocol and --absent-rank.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any, Callable

from preflight.workers.process_group import (
    DistEnv, add_dist_arguments, finish_group, import_team_module, init_group, join, median, run_worker,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.ddp_scaling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda for nccl, cpu for gloo")
    parser.add_argument("--hidden", type=int, default=512, help="width of the reference MLP")
    parser.add_argument("--layers", type=int, default=4, help="depth of the reference MLP")
    parser.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    parser.add_argument("--workload", default=None, help="package.module:factory of the team's own model")
    parser.add_argument("--steps", type=int, default=10, help="timed pairs of steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for this rank")
    parser.add_argument("--seed", type=int, default=0)
    add_dist_arguments(parser)
    return parser


def reference_mlp(hidden: int, layers: int) -> Any:
    import torch.nn as nn

    blocks: list[Any] = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, hidden), nn.GELU()]
    return nn.Sequential(*blocks)


def default_loss(outputs: Any) -> Any:
    return outputs.float().square().mean()


def load_workload(spec: str, batch: int, device: Any) -> tuple[Any, Callable[[], Any], Callable[[Any], Any]]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"workload {spec!r} is not of the form package.module:factory")
    factory = getattr(import_team_module(module_name), attr)
    made = factory(batch, device)
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise TypeError(f"{spec} returned {type(made).__name__}; expected (model, make_batch[, loss_fn])")
    model, make_batch = made[0], made[1]
    loss_fn = made[2] if len(made) == 3 else default_loss
    return model, make_batch, loss_fn


def _device(args: argparse.Namespace, env: DistEnv) -> tuple[str, Any]:
    """The rank's device kind ("cuda" or "cpu") and device, made current for CUDA."""
    import torch

    device_kind = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    if device_kind != "cuda":
        return device_kind, torch.device("cpu")
    torch.cuda.set_device(env.local_rank)
    # TF32 matmuls: what fp32 training on Ampere and later uses in practice.
    torch.set_float32_matmul_precision("high")
    return device_kind, torch.device("cuda", env.local_rank)


def _workload(args: argparse.Namespace, env: DistEnv, device: Any) -> tuple[Any, Callable[[], Any], Callable[[Any], Any], str]:
    """The model, its batch maker, its loss and its description: the team's --workload or the reference MLP."""
    import torch

    torch.manual_seed(args.seed)  # the same initial weights everywhere, as DDP would broadcast anyway
    if args.workload:
        model, make_batch, loss_fn = load_workload(args.workload, args.batch, device)
        return model, make_batch, loss_fn, args.workload
    model = reference_mlp(args.hidden, args.layers)
    generator = torch.Generator().manual_seed(args.seed + 1 + env.rank)
    batch = torch.randn(args.batch, args.hidden, generator=generator).to(device)
    return (model, lambda: batch, default_loss,
            f"reference MLP: {args.layers} x Linear({args.hidden}, {args.hidden}) + GELU")


def _time_pairs(step: Callable[[bool], None], sync: Callable[[], None], steps: int,
                warmup: int) -> tuple[list[float], list[float]]:
    """After the warm-up, this rank's seconds of `steps` full steps and as many no_sync steps, in alternating order."""
    import torch.distributed as dist

    def timed(all_reduce: bool) -> float:
        dist.barrier()
        sync()
        start = time.perf_counter()
        step(all_reduce)
        sync()
        return time.perf_counter() - start

    for _ in range(warmup):
        step(True)
    step(False)
    sync()
    full: list[float] = []
    compute: list[float] = []
    for index in range(steps):
        order = (True, False) if index % 2 == 0 else (False, True)
        for all_reduce in order:
            (full if all_reduce else compute).append(timed(all_reduce))
    return full, compute


def _across_ranks(full: list[float], compute: list[float], env: DistEnv, device: Any) -> tuple[Any, list[float]]:
    """Each rank's own medians (a 2 x world_size tensor) and, per timed step, the slowest rank's seconds."""
    import torch
    import torch.distributed as dist

    own = torch.zeros(2, env.world_size, dtype=torch.float64, device=device)
    own[0, env.rank], own[1, env.rank] = median(full), median(compute)
    dist.all_reduce(own)  # every rank filled its own column
    slowest = torch.tensor(full + compute, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return own, slowest.cpu().tolist()


def measure_scaling(args: argparse.Namespace, env: DistEnv) -> dict[str, Any]:
    """One weak-scaling point on this rank; rank 0 returns the figures of every rank."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(max(1, args.threads))
    device_kind, device = _device(args, env)
    store, members = join(env, args.join_timeout_s, tag="ddp_scaling")
    init_group(store, env, args.backend, args.pg_timeout_s, device)

    model, make_batch, loss_fn, description = _workload(args, env, device)
    model = model.to(device)
    ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if device_kind == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    inputs = make_batch()
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)

    def sync() -> None:
        if device_kind == "cuda":
            torch.cuda.synchronize(device)

    def step(all_reduce: bool) -> None:
        optimizer.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if all_reduce else ddp.no_sync():
            loss = loss_fn(ddp(*inputs))
            loss.backward()
        optimizer.step()

    own, times = _across_ranks(*_time_pairs(step, sync, args.steps, args.warmup), env, device)
    full, compute = times[:args.steps], times[args.steps:]
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    finish_group()
    if env.rank != 0:
        return {}
    step_s = median(full)
    return {
        "backend": args.backend,
        "device": device_kind,
        "world_size": env.world_size,
        "threads_per_rank": args.threads,
        "batch_per_device": args.batch,
        "model": description,
        "parameters": parameters,
        "gradient_bytes": gradient_bytes,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_s": step_s,
        "step_samples_s": full,
        "compute_s": median(compute),
        "compute_samples_s": compute,
        "rank_step_s": own[0].cpu().tolist(),
        "rank_compute_s": own[1].cpu().tolist(),
        "samples_per_s": env.world_size * args.batch / step_s,
        "torch_version": torch.__version__,
        "members": {str(r): m for r, m in members.items()},
    }


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_worker(measure_scaling, args)


if __name__ == "__main__":
    main()
