"""The TensorFlow side of checkpoint.cluster_resume: Keras model.fit under MultiWorkerMirroredStrategy
across nodes with the BackupAndRestore callback; one worker is lost, every worker is started again
(as a scheduler would), and training resumes from the backup.

    python -m preflight.workers.resume_tf --index I --workers IP:PORT,IP:PORT --backup-dir D \
        --epochs 6 --seed 7 [--kill-index 1 --kill-epoch 2]

Keras 3, which TensorFlow 2.16 and later install as tf.keras, does not run model.fit under
MultiWorkerMirroredStrategy (it stops with "Attempt to convert a value (PerReplica...)"), so this
uses tf_keras (Keras 2, `pip install tf-keras`); without it the worker reports why it cannot run.

Worker `--kill-index` SIGKILLs itself at the end of epoch `--kill-epoch`, once: only when the backup
holds no later epoch. Worker 0 ends by training a fresh model for every epoch without interruption,
on the same workers, and reports both digests (sha256 of the weights).
One JSON object per line on stdout: events start, epoch, kill; worker 0's {"ok": true, ...}; a worker
that cannot run prints {"skip": reason}; a failure {"ok": false, "error": ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import time
import traceback

from preflight.workers import wire

LEGACY = ("Keras 3 (tf.keras in TensorFlow 2.16 and later) does not run model.fit under MultiWorkerMirroredStrategy; "
          "install tf_keras, the Keras 2 of the same TensorFlow version (pip install tf-keras=={version}), for the "
          "Python preflight runs on the nodes")


def emit(**payload: object) -> None:
    sys.stdout.write(wire.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> None:
    os.environ["TF_CONFIG"] = wire.dumps({"cluster": {"worker": args.workers.split(",")},
                                          "task": {"type": "worker", "index": args.index}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        import tensorflow as tf
    except ImportError as exc:
        emit(skip=f"tensorflow is not installed ({exc})")
        return
    try:
        import tf_keras as keras
    except ImportError:
        emit(skip=LEGACY.format(version=tf.__version__), tensorflow=tf.__version__)
        return
    import numpy as np

    def event(name: str, **fields: object) -> None:
        emit(event=name, index=args.index, t=round(time.time(), 3), **fields)

    event("start", tensorflow=tf.__version__)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rows = np.random.RandomState(args.seed)
    x = rows.randn(256, 16).astype("float32")
    y = rows.randint(0, 4, 256)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)

    def model_and_fit(callbacks: list) -> str:
        keras.utils.set_random_seed(args.seed)
        with strategy.scope():
            model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                      keras.layers.Dense(4)])
            model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(data, epochs=args.epochs, verbose=0, callbacks=callbacks)
        return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()

    class Events(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, _logs: object = None) -> None:
            event("epoch-begin", epoch=epoch)

        def on_epoch_end(self, epoch: int, _logs: object = None) -> None:
            event("epoch", epoch=epoch)
            if args.index == args.kill_index and epoch == args.kill_epoch and not args.restarted:
                event("kill", epoch=epoch)
                os.kill(os.getpid(), signal.SIGKILL)  # the worker's node is lost

    began = time.monotonic()
    resumed = model_and_fit([keras.callbacks.BackupAndRestore(args.backup_dir), Events()])
    fit_s = time.monotonic() - began
    reference = model_and_fit([])
    if args.index == 0:
        emit(ok=True, digest=resumed, reference_digest=reference, fit_s=round(fit_s, 3), tensorflow=tf.__version__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--workers", required=True, help="every worker's IP:PORT, in index order")
    parser.add_argument("--backup-dir", required=True)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kill-index", type=int, default=-1)
    parser.add_argument("--kill-epoch", type=int, default=-1)
    parser.add_argument("--restarted", action="store_true", help="the second start: nobody is lost again")
    args = parser.parse_args(argv)
    try:
        run(args)
    except Exception as exc:  # noqa: BLE001 - reported, with the traceback on stderr
        traceback.print_exc()
        emit(ok=False, index=args.index, t=round(time.time(), 3),
             error=f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}")
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    os._exit(0)  # TensorFlow's collective threads can hold the interpreter's exit


if __name__ == "__main__":
    sys.exit(main())
