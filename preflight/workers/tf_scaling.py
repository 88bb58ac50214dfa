"""One weak-scaling point for tensorflow: MirroredStrategy over N local devices, in this one process.

    python -m preflight.workers.tf_scaling --replicas 2 --device cpu

The same reference MLP as preflight.workers.ddp_scaling (--hidden, --layers; Dense + GELU), the same
fixed batch per replica (--batch), built with Keras under `strategy.scope()` and trained by a custom
loop whose optimizer step all-reduces the gradients across the replicas. Devices are the first N GPUs,
or, with --device cpu, N logical CPU devices made with tf.config.set_logical_device_configuration.
The per-replica batches are made once before timing, so no input pipeline is measured.

On CPU the replicas share one process and its thread pools: intra-op threads are set to
N x --threads so that each replica has as many threads as a torch rank does, and inter-op threads to
N so that the replicas' ops can run at the same time.

Prints one JSON line: {"ok": true, ...} with the step times, or {"ok": false, "error": ...}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any

from preflight.workers import wire


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.tf_scaling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=128, help="samples per replica per step")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per replica")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def measure(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    n = args.replicas
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        tf.config.threading.set_intra_op_parallelism_threads(n * max(1, args.threads))
        tf.config.threading.set_inter_op_parallelism_threads(n)
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][:n]
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < n:
            raise RuntimeError(f"{n} replicas asked for, tensorflow sees {len(gpus)} GPUs")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)  # leave memory to the next process
        devices = [d.name for d in tf.config.list_logical_devices("GPU")][:n]
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    keras = tf.keras

    tf.random.set_seed(args.seed)
    with strategy.scope():
        model = keras.Sequential([keras.Input((args.hidden,))]
                                 + [keras.layers.Dense(args.hidden, activation="gelu") for _ in range(args.layers)])
        optimizer = keras.optimizers.SGD(learning_rate=1e-4)

    def batch_for(context: Any) -> Any:
        return tf.random.stateless_normal((args.batch, args.hidden), seed=[args.seed, context.replica_id_in_sync_group])

    inputs = strategy.experimental_distribute_values_from_function(batch_for)

    @tf.function
    def train_step(batch: Any) -> Any:
        def replica_step(x: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces across replicas
            return loss

        losses = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for _ in range(args.warmup):
        train_step(inputs).numpy()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        train_step(inputs).numpy()  # .numpy() waits for the step to finish
        times.append(time.perf_counter() - start)
    step_s = median(times)
    return {
        "framework": "tensorflow",
        "tensorflow_version": tf.__version__,
        "strategy": "MirroredStrategy",
        "cross_device_ops": type(strategy.extended._cross_device_ops).__name__
        if getattr(strategy.extended, "_cross_device_ops", None) is not None else None,
        "device": args.device,
        "devices": devices,
        "replicas": n,
        "threads_per_replica": args.threads,
        "batch_per_device": args.batch,
        "parameters": int(sum(int(tf.size(v)) for v in model.trainable_variables)),
        "steps": args.steps,
        "warmup": args.warmup,
        "step_s": step_s,
        "step_samples_s": times,
        "samples_per_s": n * args.batch / step_s,
    }


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr  # tensorflow's chatter must not mix with the result line
    try:
        payload = {"ok": True, **measure(args)}
        code = 0
    except Exception as exc:  # noqa: BLE001 - reported as the result, traceback on stderr
        traceback.print_exc()
        payload = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
        code = 1
    out.write(wire.dumps(payload) + "\n")
    out.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
