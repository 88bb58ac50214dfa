"""The training canary under tensorflow: MirroredStrategy over the local devices, fed by tf.data.

    python -m preflight.workers.canary_tf --device cpu --replicas 2 --steps 30 --warmup 5

A reference MLP classifier (Dense + GELU, --hidden, --layers, on 256-wide inputs) trained by a
custom loop whose optimizer step all-reduces the gradients across replicas. The batches come through
a tf.data pipeline (a pool of random batches made up front, repeated and prefetched), distributed with
strategy.experimental_distribute_dataset, so each step first waits for its batch: that wait, the
step time and the loss are recorded per step. Devices: every GPU tensorflow sees, or with
--device cpu, --replicas logical CPU devices.

Prints one JSON line: {"ok": true, ...} or {"ok": false, "error": ...}; tensorflow's output goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any

from preflight.workers import wire

INPUT_FEATURES = 256
POOL_BATCHES = 8


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.canary_tf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--replicas", type=int, default=2, help="logical CPU devices (CPU only)")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64, help="samples per replica per step")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per replica")
    return parser


def devices_for(tf: Any, args: argparse.Namespace) -> list[str]:
    if args.device == "gpu":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            raise RuntimeError("tensorflow sees no GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        return [d.name for d in tf.config.list_logical_devices("GPU")]
    tf.config.set_visible_devices([], "GPU")
    tf.config.threading.set_intra_op_parallelism_threads(args.replicas * max(1, args.threads))
    tf.config.threading.set_inter_op_parallelism_threads(args.replicas)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
    return [d.name for d in tf.config.list_logical_devices("CPU")][:args.replicas]


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    devices = devices_for(tf, args)
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    keras = tf.keras
    tf.random.set_seed(0)
    features = min(INPUT_FEATURES, args.hidden)
    with strategy.scope():
        model = keras.Sequential([keras.Input((features,))]
                                 + [keras.layers.Dense(args.hidden, activation="gelu") for _ in range(args.layers)])
        optimizer = keras.optimizers.SGD(learning_rate=1e-3)
    global_batch = args.batch * strategy.num_replicas_in_sync
    # As the torch reference: narrow inputs, a pool of batches made up front and cycled, prefetched.
    pool_x = tf.random.stateless_normal((POOL_BATCHES, global_batch, features), seed=[0, 1])
    pool_y = tf.random.stateless_uniform((POOL_BATCHES, global_batch), seed=[0, 2], maxval=args.hidden, dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((pool_x, pool_y)).repeat().prefetch(2)
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(features: Any, labels: Any) -> Any:
        def replica_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                per_sample = keras.losses.sparse_categorical_crossentropy(y, model(x, training=True), from_logits=True)
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces across replicas
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(features, labels)), axis=None)

    def step() -> tuple[float, float, float]:
        start = time.perf_counter()
        features, labels = next(batches)
        waited = time.perf_counter() - start
        loss = float(train_step(features, labels).numpy())  # .numpy() waits for the step to finish
        return time.perf_counter() - start, waited, loss

    for _ in range(args.warmup):
        step()
    step_s, wait_s, losses = [], [], []
    for _ in range(args.steps):
        took, waited, loss = step()
        step_s.append(took)
        wait_s.append(waited)
        losses.append(loss)
    return {"framework": "tensorflow", "tensorflow_version": tf.__version__, "strategy": "MirroredStrategy",
            "devices": devices, "replicas": strategy.num_replicas_in_sync, "batch_per_replica": args.batch,
            "steps": args.steps, "warmup": args.warmup, "step_s": step_s, "wait_s": wait_s, "losses": losses}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr  # tensorflow's chatter must not mix with the result line
    try:
        payload, code = {"ok": True, **run(args)}, 0
    except Exception as exc:  # noqa: BLE001 - reported as the result, traceback on stderr
        traceback.print_exc()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        payload, code = {"ok": False, "error": f"{type(exc).__name__}: {text}"}, 1
    out.write(wire.dumps(payload) + "\n")
    out.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
