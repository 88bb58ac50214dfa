"""A short training run that checkpoints, can be killed, and resumes: the resume test of checkpoint.roundtrip.

    python -m preflight.workers.checkpoint_train --dir D --steps 40 --save-every 10 --seed 7 \
        --final final.pt [--resume] [--hold-at-step 25] [--drop-rng-state] [--device cpu|cuda]

The run is deterministic, and its randomness matters on purpose: dropout draws from the torch (or
CUDA) generator, the batch indices from the torch generator, input noise from numpy and a random
sign flip from Python's `random`. A resume that restores the weights and the optimizer but not every
random-number state therefore ends with different weights, which is what the check must notice.

Checkpoints are written atomically (temporary file, fsync, rename, fsync of the directory), so a
SIGKILL at any moment leaves only complete checkpoints behind. `--resume` continues from the newest.

`--hold-at-step N` makes the run stop after step N and wait to be killed: the check uses it to kill
the run at a known point between two checkpoints. `--drop-rng-state` is a fault-injection switch
for tests: checkpoints leave the random-number states out, as a careless training script does.

Lines on stdout, one per event: `saved step=S path=P`, `resumed step=S`, `holding step=S`,
`finished step=S`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

CHECKPOINT_PREFIX = "ckpt-"
CHECKPOINT_SUFFIX = ".pt"
# How long a held run waits before leaving on its own, so that a caller that dies never leaves it behind.
HOLD_LIMIT_S = 300.0

FEATURES, HIDDEN, CLASSES, DATASET_SIZE, BATCH = 32, 64, 10, 256, 16


def _say(text: str) -> None:
    print(text, flush=True)


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"{CHECKPOINT_PREFIX}{step:08d}{CHECKPOINT_SUFFIX}"


def latest_checkpoint(directory: Path) -> Path | None:
    # Temporary files end in .tmp, so a checkpoint cut short by a kill is never picked up.
    found = sorted(p for p in directory.glob(f"{CHECKPOINT_PREFIX}*{CHECKPOINT_SUFFIX}") if p.is_file())
    return found[-1] if found else None


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomically(obj: object, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def rng_states(device: str) -> dict:
    """Every random-number state, as bytes and plain numbers rather than tensors.

    `torch.load(map_location=device)` moves every tensor of a checkpoint to that device, and
    torch.set_rng_state / torch.cuda.set_rng_state_all accept only CPU ByteTensors (numpy wants a
    CPU array): RNG states kept as tensors make a resume with map_location="cuda" fail on every GPU
    node. Bytes are never mapped, whatever map_location says.
    """
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states = {
        "torch": _state_bytes(torch.get_rng_state()),
        "numpy": {"kind": kind, "keys": [int(k) for k in keys.astype(np.int64)], "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": random.getstate(),
    }
    if device.startswith("cuda"):
        states["cuda"] = [_state_bytes(s) for s in torch.cuda.get_rng_state_all()]
    return states


def _state_bytes(state) -> bytes:
    return bytes(state.cpu().numpy().tobytes())


def _byte_tensor(state):
    """A CPU ByteTensor from saved bytes, or from a tensor wherever map_location put it."""
    import torch

    if isinstance(state, (bytes, bytearray)):
        return torch.frombuffer(bytearray(state), dtype=torch.uint8)
    return state.to("cpu")


def restore_rng_states(states: dict, device: str) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(_byte_tensor(states["torch"]))
    numpy_state = states["numpy"]
    keys = numpy_state["keys"]
    keys = keys.to("cpu").numpy() if hasattr(keys, "numpy") else np.asarray(keys, dtype=np.int64)
    np.random.set_state((numpy_state["kind"], keys.astype(np.uint32), numpy_state["pos"],
                         numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    random.setstate(states["python"])
    if device.startswith("cuda") and "cuda" in states:
        torch.cuda.set_rng_state_all([_byte_tensor(s) for s in states["cuda"]])


def make_deterministic(seed: int) -> None:
    import numpy as np
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    # One thread: CPU reductions then add in one order, whatever the machine's core count.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def build(seed: int, device: str):
    import torch

    # The data set comes from its own generator so that it is the same in every process.
    data_gen = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(DATASET_SIZE, FEATURES, generator=data_gen)
    labels = torch.randint(0, CLASSES, (DATASET_SIZE,), generator=data_gen)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(p=0.3),
        torch.nn.Linear(HIDDEN, CLASSES),
    ).to(device)
    # Momentum makes the optimizer state part of what a resume must restore.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, optimizer, inputs.to(device), labels.to(device)


def train_step(model, optimizer, inputs, labels, device: str) -> None:
    import numpy as np
    import torch

    index = torch.randint(0, DATASET_SIZE, (BATCH,))  # random data order, from the torch generator
    batch = inputs[index.to(device)]
    noise = torch.from_numpy(np.random.normal(0.0, 0.1, size=(BATCH, FEATURES)).astype(np.float32)).to(device)
    sign = -1.0 if random.random() < 0.5 else 1.0
    batch = sign * batch + noise
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(batch), labels[index.to(device)])
    loss.backward()
    optimizer.step()


def run(args: argparse.Namespace) -> int:
    if args.device.startswith("cuda"):
        # cuBLAS needs a fixed workspace to be deterministic; it must be set before CUDA starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    make_deterministic(args.seed)
    model, optimizer, inputs, labels = build(args.seed, args.device)
    model.train()

    step = 0
    if args.resume:
        latest = latest_checkpoint(directory)
        if latest is not None:
            state = torch.load(latest, map_location=args.device, weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if "rng" in state:
                restore_rng_states(state["rng"], args.device)
            step = int(state["step"])
        _say(f"resumed step={step}")

    while step < args.steps:
        train_step(model, optimizer, inputs, labels, args.device)
        step += 1
        if step % args.save_every == 0 and step < args.steps:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            if not args.drop_rng_state:
                state["rng"] = rng_states(args.device)
            path = checkpoint_path(directory, step)
            save_atomically(state, path)
            _say(f"saved step={step} path={path}")
        if args.hold_at_step is not None and step == args.hold_at_step:
            _say(f"holding step={step}")
            deadline = time.monotonic() + HOLD_LIMIT_S
            while time.monotonic() < deadline:
                time.sleep(0.2)
            _say("hold expired without being killed")
            return 3

    if args.final:
        save_atomically({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                        Path(args.final))
    _say(f"finished step={step}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="where checkpoints are written and resumed from")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--final", default="", help="write the final model and optimizer state here")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --dir")
    parser.add_argument("--hold-at-step", type=int, default=None, help="stop after this step and wait to be killed")
    parser.add_argument("--drop-rng-state", action="store_true",
                        help="fault injection for tests: leave random-number states out of checkpoints")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.save_every < 1:
        parser.error("--steps and --save-every must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(parse(argv)))


if __name__ == "__main__":
    main()
