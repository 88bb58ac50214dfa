"""tf.data's half of dataloader.throughput, in its own process.

    python -m preflight.workers.dataloader_tf --files LIST --batch-size 64 --passes 3 --warmup-batches 5 \
        [--decode] [--max-samples N] [--max-seconds S] [--drop-cache] [--seed 0]

LIST holds one file path a line. Each pass picks up to --max-samples of them at random, drops them
from the page cache when asked, and reads them through tf.data (read_file, then the synthetic decode
with --decode, batch, prefetch; parallel calls tuned by AUTOTUNE). Batches after the warm-up are
timed. Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback

from preflight.workers import wire


def measure(paths: list[str], args: argparse.Namespace) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    gpus_hidden = hide_gpus(tf)

    from preflight.workers.dataloader_files import SYNTHETIC_HEADER, drop_cache

    header = SYNTHETIC_HEADER.size

    def decode(content):
        pixels = tf.io.decode_raw(tf.strings.substr(content, header, -1), tf.uint8)
        return (tf.cast(pixels, tf.float32) - 127.5) / 73.9, tf.strings.length(content)

    def raw(content):
        return content, tf.strings.length(content)

    picker = random.Random(args.seed)
    passes = []
    for number in range(args.passes):
        chosen = picker.sample(paths, min(len(paths), args.max_samples))
        cache_dropped = drop_cache(chosen) if args.drop_cache else False
        dataset = (tf.data.Dataset.from_tensor_slices(chosen)
                   .map(tf.io.read_file, num_parallel_calls=tf.data.AUTOTUNE)
                   .map(decode if args.decode else raw, num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(args.batch_size)
                   .prefetch(tf.data.AUTOTUNE))
        batches = -(-len(chosen) // args.batch_size)
        warmup = min(args.warmup_batches, batches // 4)
        samples = data_bytes = 0
        started = time.perf_counter()
        timed_from = started if warmup == 0 else None
        for index, (_, lengths) in enumerate(dataset):
            if timed_from is not None:
                samples += int(lengths.shape[0])
                data_bytes += int(tf.reduce_sum(tf.cast(lengths, tf.int64)))
            if index + 1 == warmup:
                timed_from = time.perf_counter()
            if timed_from is not None and time.perf_counter() - timed_from > args.max_seconds:
                break
        seconds = time.perf_counter() - (timed_from or started)
        passes.append({"pass": number, "samples": samples, "bytes": data_bytes, "seconds": seconds,
                       "warmup_batches": warmup, "cache_dropped": cache_dropped})
    return {"tensorflow": tf.__version__, "passes": passes, "gpus_hidden": gpus_hidden}


def hide_gpus(tf) -> bool:
    """tf.data reads and decodes on the CPU; left alone, tensorflow's first op reserves nearly all
    memory of every GPU on the node. The check also starts this worker with CUDA_VISIBLE_DEVICES
    empty; this covers a caller that did not. True when tensorflow sees no GPU afterwards."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):  # already initialised: at least do not reserve it all
        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except (RuntimeError, ValueError):
                pass
    return not tf.config.get_visible_devices("GPU")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True, help="a file listing one path a line")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warmup-batches", type=int, default=5)
    parser.add_argument("--max-samples", type=int, default=20000)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--decode", action="store_true", help="decode synthetic samples into float tensors")
    parser.add_argument("--drop-cache", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        with open(args.files, encoding="utf-8") as listing:
            paths = [line.rstrip("\n") for line in listing if line.strip()]
        if not paths:
            raise ValueError(f"{args.files} lists no files")
        result = measure(paths, args)
    except Exception as exc:  # noqa: BLE001 - reported to the check as data, traceback on stderr
        traceback.print_exc()
        print(wire.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        sys.exit(1)
    print(wire.dumps(result), flush=True)


if __name__ == "__main__":
    main()
