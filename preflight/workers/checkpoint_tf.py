"""tensorflow's half of checkpoint.roundtrip, in its own process.

    python -m preflight.workers.checkpoint_tf --dir D --size-mb 16 --seed 0

tensorflow takes seconds to import and can abort the process on a bad install, so it runs here and
not in the check. Saves variables through `tf.train.Checkpoint` and a `CheckpointManager` (twice, so
"latest" has to mean the second one), fsyncs, restores into fresh variables holding other values with
`restore(...).assert_consumed()`, and compares every variable byte for byte. Prints one JSON object
as its last line; exit status 0 when it could run the round trip (exact or not), 1 when it could not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from preflight.machine.pagecache import drop_page_cache, files_under
from preflight.workers import wire


def _fsync_tree(directory: Path, prefix: str) -> int:
    """fsync every file and the directory; return the bytes of the files whose name starts with prefix."""
    total = 0
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            if path.name.startswith(prefix + "."):
                total += path.stat().st_size
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return total


def _variables(tf, seed: int, size_mb: float) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    floats = max(1, int(size_mb * 1e6 / 4 / 3))
    # Bit patterns equality must survive: two NaN payloads, signed zeros, infinities, a denormal.
    edge = np.array([0x7FC00001, 0x7FA00000, 0x80000000, 0, 0x7F800000, 0xFF800000, 1, 0x40400000],
                    dtype=np.uint32).view(np.float32)
    with tf.device("/CPU:0"):
        return {
            "kernel": tf.Variable(rng.standard_normal(floats, dtype=np.float32)),
            "slot_m": tf.Variable(rng.standard_normal(floats, dtype=np.float32)),
            "slot_v": tf.Variable(rng.standard_normal(floats, dtype=np.float32)),
            "edge": tf.Variable(edge),
            "half": tf.Variable(tf.cast(rng.standard_normal(64, dtype=np.float32), tf.bfloat16)),
            "counts": tf.Variable(rng.integers(-(2**62), 2**62, size=32, dtype=np.int64)),
            "step": tf.Variable(0, dtype=tf.int64),
        }


def _bytes(variable) -> bytes:
    value = variable.numpy()
    return value.tobytes()


def roundtrip(directory: Path, size_mb: float, seed: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    import tensorflow as tf

    saved = _variables(tf, seed, size_mb)
    checkpoint = tf.train.Checkpoint(**saved)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)
    manager.save()
    # Change every variable before the second save: a restore of the older checkpoint must show.
    for name, variable in saved.items():
        if variable.dtype.is_floating and name != "edge":
            variable.assign(variable * 2)
    saved["step"].assign_add(1)

    start = time.perf_counter()
    latest = manager.save()
    written = _fsync_tree(directory, Path(latest).name)
    write_s = time.perf_counter() - start

    fresh = _variables(tf, seed + 1, size_mb)
    for variable in fresh.values():
        if variable.dtype.is_floating:
            variable.assign(tf.zeros_like(variable))
    cache_dropped = drop_page_cache(files_under(directory))
    start = time.perf_counter()
    status = tf.train.Checkpoint(**fresh).restore(manager.latest_checkpoint)
    status.assert_consumed()
    read_s = time.perf_counter() - start

    mismatches = []
    for name, variable in saved.items():
        other = fresh[name]
        if variable.dtype != other.dtype or variable.shape != other.shape:
            mismatches.append(f"{name}: {variable.dtype.name}{list(variable.shape)} restored as "
                              f"{other.dtype.name}{list(other.shape)}")
        elif _bytes(variable) != _bytes(other):
            mismatches.append(f"{name}: values differ")
    state_bytes = sum(v.numpy().nbytes for v in saved.values())
    return {
        "tensorflow": tf.__version__,
        "variables": len(saved),
        "state_bytes": state_bytes,
        "latest_checkpoint": Path(latest).name,
        "manager_latest": Path(manager.latest_checkpoint).name if manager.latest_checkpoint else None,
        "checkpoints_kept": [Path(p).name for p in manager.checkpoints],
        "bytes_written": written,
        "write_s": write_s,
        "read_s": read_s,
        "cache_dropped": cache_dropped,
        "mismatches": mismatches,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--size-mb", type=float, default=16.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    directory = Path(args.dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        result = roundtrip(directory, args.size_mb, args.seed)
    except Exception as exc:  # noqa: BLE001 - reported to the check as data, with the traceback on stderr
        traceback.print_exc()
        print(wire.dumps({"error": f"{type(exc).__name__}: {exc}",
                          "errno": getattr(exc, "errno", None)}), flush=True)
        sys.exit(1)
    print(wire.dumps(result), flush=True)


if __name__ == "__main__":
    main()
