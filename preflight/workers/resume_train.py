"""A short DDP training run across nodes that checkpoints with torch.distributed.checkpoint, loses a
node, and resumes: the worker of checkpoint.cluster_resume, started by torchrun on every node.

    torchrun ... --max-restarts=1 -m preflight.workers.resume_train --dir SHARED/RUN --steps 30 \
        --save-every 10 --seed 7 --backend gloo --device cpu [--kill-node n2 --kill-at-step 15]
        [--kill-phase train|save] [--no-atomic]
    python -m preflight.workers.resume_train --cleanup DIR

The run is deterministic: the model starts from the seed, the batch of rank r at step s is drawn
from a generator seeded by (seed, s, r), so a run that resumes at step s sees the data an
uninterrupted run sees, and gradients are averaged in rank order (`ordered_mean`), so the sums do
not depend on which node holds which rank after a restart. Its final weights and optimizer state are hashed (sha256); the check
compares the digest with that of a run that was never interrupted.

Checkpoints: every `--save-every` steps each rank saves its part (the model and optimizer, which DCP
writes once, and a payload of its own, `--payload-mb` in all) with torch.distributed.checkpoint into
`step-NNNNNNNN.tmp-<attempt>`; once every rank has written and rank 0 has written the metadata, rank 0
renames it to `step-NNNNNNNN` (the publication: a rename is atomic) and fsyncs the directory. A restart
loads the newest `step-*` without `.tmp`. `--no-atomic` (fault injection) saves straight into
`step-NNNNNNNN` and loads the newest such directory whatever state it is in, as a careless script does.

The node named by `--kill-node` (environment PREFLIGHT_NODE, set per node by the check) is lost once,
in the first attempt on that node: after step `--kill-at-step` (phase "train", between two
checkpoints), or inside the save of that step once its own shards are written (phase "save", a save
cut short), its local rank 0 SIGKILLs every training process of the node at once
(preflight.transport.process.kill_children). torchrun must notice and restart the group.

One JSON object per line on stdout, each with "event", "node", "rank", "attempt" and "t" (wall
clock, seconds): start, visible (which nodes' tokens this node sees in the directory), resume
(the checkpoint chosen and whether it was complete), resumed (its load time), saved (save time, bytes),
kill, final (the digest); rank 0 ends with {"ok": true, ...}; a failure prints {"ok": false, ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from preflight.workers import wire
from preflight.workers.checkpoint_train import fsync_directory

STEP_PREFIX = "step-"
TMP_MARK = ".tmp-"
TOKENS = "nodes-seen"
FEATURES, HIDDEN, CLASSES, BATCH = 64, 128, 10, 32


def emit(**payload: Any) -> None:
    sys.stdout.write(wire.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


class Ident:
    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.node = os.environ.get("PREFLIGHT_NODE") or os.uname().nodename

    def event(self, name: str, **fields: Any) -> None:
        emit(event=name, node=self.node, rank=self.rank, attempt=self.attempt, t=round(time.time(), 3), **fields)


def step_dir(root: Path, step: int) -> Path:
    return root / f"{STEP_PREFIX}{step:08d}"


def newest_checkpoint(root: Path, atomic: bool) -> Path | None:
    """The newest published checkpoint; without `atomic`, the newest directory of any state."""
    found = sorted(p for p in root.glob(f"{STEP_PREFIX}*") if p.is_dir() and TMP_MARK not in p.name)
    return found[-1] if found else None


def complete(path: Path) -> bool:
    """A DCP checkpoint is complete when its metadata is written (rank 0 writes it last)."""
    return (path / ".metadata").is_file()


def build(seed: int, payload_elems: int, rank: int, device: str):
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, CLASSES)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # This rank's own part of the checkpoint (as a sharded model's shard is): saved and loaded by it alone.
    payload = torch.randn(payload_elems, generator=torch.Generator().manual_seed(seed * 7919 + rank)).to(device)
    return model, optimizer, payload


def batch(seed: int, step: int, rank: int, device: str):
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    inputs = torch.randn(BATCH, FEATURES, generator=gen)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=gen)
    return inputs.to(device), labels.to(device)


def ordered_mean(_state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects other annotations
    """DDP communication hook: gradients averaged in rank order. The batch of rank r is the same
    wherever rank r runs, so the sum no longer depends on which node holds which rank after a restart
    (a ring all-reduce adds in an order set by the ranks' places in the ring)."""
    import torch
    import torch.distributed as dist

    tensor = bucket.buffer()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    future: Any = torch.futures.Future()
    future.set_result(total / len(parts))
    return future


def digest(state: dict[str, Any]) -> str:
    """sha256 over every tensor of a (nested) state dict, in key order."""
    import torch

    h = hashlib.sha256()

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(f"{prefix}.{key}", value[key])
        elif isinstance(value, torch.Tensor):
            h.update(prefix.encode())
            h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(f"{prefix}.{i}", item)
        else:
            h.update(f"{prefix}={value!r}".encode())

    walk("", state)
    return h.hexdigest()


def lose_this_node(me: Ident, step: int, phase: str) -> None:
    """Local rank 0 SIGKILLs every training process of its node (itself included) at once."""
    from preflight.transport.process import kill_children

    if me.local_rank != 0:
        time.sleep(3600)  # local rank 0 kills this process with the others
    me.event("kill", step=step, phase=phase)
    kill_children(os.getppid())
    time.sleep(3600)


def make_writer(path: Path, me: Ident, args: argparse.Namespace, step: int):
    from torch.distributed.checkpoint import FileSystemWriter

    kill_here = args.kill_phase == "save" and me.node == args.kill_node and me.attempt == 0 \
        and step == args.kill_at_step

    class Writer(FileSystemWriter):
        def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
            future = super().write_data(plan, planner)
            if kill_here:
                future.wait()  # this rank's shard is on disk; the metadata is not
                lose_this_node(me, step, "save")
            return future

    return Writer(str(path), sync_files=True)


class _Trainer:
    """This rank's DDP model, optimizer and payload: trained a step at a time, its state saved and loaded."""

    def __init__(self, args: argparse.Namespace, me: Ident, payload_elems: int) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.args, self.me = args, me
        model, self.optimizer, self.payload = build(args.seed, payload_elems, me.rank, args.device)
        self.ddp = DistributedDataParallel(model)
        self.ddp.register_comm_hook(None, ordered_mean)

    def step(self, step: int) -> None:
        """One training step on this rank's batch of `step`."""
        import torch

        inputs, labels = batch(self.args.seed, step, self.me.rank, self.args.device)
        self.optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(self.ddp(inputs), labels).backward()
        self.optimizer.step()

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds: the model, the optimizer and this rank's payload."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.ddp, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, f"payload_rank{self.me.rank}": self.payload}

    def digest(self) -> str:
        """The digest of the model's and the optimizer's state."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.ddp, self.optimizer)
        return digest({"model": model_sd, "optim": optim_sd})


def _join(args: argparse.Namespace, me: Ident) -> None:
    """Rendezvous through torchrun's store and start the process group, on keys of this start's own."""
    import datetime as dt

    import torch.distributed as dist

    timeout = dt.timedelta(seconds=args.pg_timeout_s)
    store, _, _ = next(dist.rendezvous("env://", timeout=timeout))
    # torchrun's store outlives a restart, with the addresses the dead group published in it: each
    # attempt of the group takes keys of its own (every rank counts itself in once per start).
    generation = (store.add("preflight-resume/starts", 1) - 1) // me.world
    dist.init_process_group(args.backend, store=dist.PrefixStore(f"preflight-resume/{generation}", store),
                            rank=me.rank, world_size=me.world, timeout=timeout)


def _announce_visible(root: Path, me: Ident) -> None:
    """Each node leaves a token in the run directory; the nodes whose tokens this node sees tell if it is shared."""
    import torch.distributed as dist

    tokens = root / TOKENS
    tokens.mkdir(exist_ok=True)
    if me.local_rank == 0:
        (tokens / me.node).write_text(str(me.rank))
    dist.barrier()
    if me.local_rank == 0:
        me.event("visible", nodes=sorted(p.name for p in tokens.iterdir()))


def _resume(trainer: _Trainer, root: Path, atomic: bool) -> int:
    """Load the newest checkpoint every rank agrees on, if any; the step training goes on from."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    me = trainer.me
    latest = newest_checkpoint(root, atomic)
    chosen = int(latest.name[len(STEP_PREFIX):]) if latest else 0
    me.event("resume", step=chosen, complete=bool(latest and complete(latest)), path=str(latest or ""))
    steps = [None] * me.world
    dist.all_gather_object(steps, chosen)
    if len(set(steps)) > 1:
        raise RuntimeError(f"ranks chose different checkpoints: steps {steps}")
    if latest is None:
        me.event("resumed", step=0, load_s=0.0)
        return 0
    began = time.monotonic()
    loaded = trainer.state()
    loaded["step"] = torch.zeros((), dtype=torch.int64)
    dcp.load(loaded, checkpoint_id=str(latest))
    set_state_dict(trainer.ddp, trainer.optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
    trainer.payload.copy_(loaded[f"payload_rank{me.rank}"])
    start = int(loaded["step"])
    dist.barrier()
    me.event("resumed", step=start, load_s=round(time.monotonic() - began, 4))
    return start


def _save(trainer: _Trainer, root: Path, atomic: bool, step: int) -> None:
    """Save the step's checkpoint, published by rank 0's rename once complete when `atomic`."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    me = trainer.me
    began = time.monotonic()
    target = step_dir(root, step)
    # One name every rank agrees on; what a save cut short left there is cleared first.
    path = root / f"{target.name}{TMP_MARK}save" if atomic else target
    if atomic and me.rank == 0 and path.exists():
        shutil.rmtree(path)
    dist.barrier()
    to_save = trainer.state()
    to_save["step"] = torch.tensor(step, dtype=torch.int64)
    dcp.save(to_save, storage_writer=make_writer(path, me, trainer.args, step))
    if atomic:
        dist.barrier()
        if me.rank == 0:
            os.replace(path, target)
            fsync_directory(root)
        dist.barrier()
    written = sum(f.stat().st_size for f in target.glob(f"__{me.rank}_*")) if target.is_dir() else 0
    me.event("saved", step=step, save_s=round(time.monotonic() - began, 4), bytes=written)


def train(args: argparse.Namespace) -> None:
    """Train, save, lose a node, resume; rank 0 prints whether the end equals a run never interrupted."""
    import torch
    import torch.distributed as dist

    me = Ident()
    me.event("start")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(me.local_rank)
    _join(args, me)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    _announce_visible(root, me)

    trainer = _Trainer(args, me, max(1, int(args.payload_mb * 1e6 / 4 / me.world)))
    atomic = not args.no_atomic
    start = _resume(trainer, root, atomic)
    for step in range(start + 1, args.steps + 1):
        trainer.step(step)
        if args.kill_phase == "train" and step == args.kill_at_step and me.node == args.kill_node \
                and me.attempt == 0:
            lose_this_node(me, step, "train")
        if step % args.save_every == 0 and step < args.steps:
            _save(trainer, root, atomic, step)

    mine = trainer.digest()
    me.event("final", step=args.steps, digest=mine)
    digests = [None] * me.world
    dist.all_gather_object(digests, mine)
    # The run that was never interrupted: the same steps from the seed, on the same ranks and group.
    began = time.monotonic()
    fresh = _Trainer(args, me, 1)
    for step in range(1, args.steps + 1):
        fresh.step(step)
    reference = fresh.digest()
    if me.rank == 0:
        emit(ok=True, digest=mine, reference_digest=reference, ranks_agree=len(set(digests)) == 1,
             steps=args.steps, world_size=me.world, attempt=me.attempt,
             reference_s=round(time.monotonic() - began, 3))
    dist.barrier()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanup", default=None, help="remove this run directory and exit")
    parser.add_argument("--dir")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--payload-mb", type=float, default=8.0)
    parser.add_argument("--pg-timeout-s", type=float, default=60.0)
    parser.add_argument("--kill-node", default=None)
    parser.add_argument("--kill-at-step", type=int, default=-1)
    parser.add_argument("--kill-phase", choices=("train", "save"), default="train")
    parser.add_argument("--no-atomic", action="store_true", help="fault injection: publish checkpoints in place")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.cleanup:
        name = os.path.basename(os.path.normpath(args.cleanup))
        if name.startswith("preflight-resume-"):
            shutil.rmtree(args.cleanup, ignore_errors=True)
        emit(ok=True, removed=not os.path.exists(args.cleanup))
        return 0
    from preflight.workers.process_group import die_with_parent, record_error_file

    die_with_parent()
    try:
        train(args)
    except Exception as exc:  # noqa: BLE001 - reported, with the traceback on stderr
        traceback.print_exc()
        emit(ok=False, event="error", rank=int(os.environ.get("RANK", "0")), node=os.environ.get("PREFLIGHT_NODE"),
             attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), t=round(time.time(), 3),
             error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        record_error_file(exc)
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    os._exit(0)  # skip teardown: destroying a gloo DDP group can abort the exit (see process_group)


if __name__ == "__main__":
    sys.exit(main())
