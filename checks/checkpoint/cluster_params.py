"""What checkpoint.cluster_resume accepts and what it advises: its parameters and each finding's fix."""

from __future__ import annotations

from dataclasses import dataclass

from preflight.core.check import TOO_FEW_NODES_FIXES, param


@dataclass
class Params:
    # The shared directory the training job checkpoints to; [checkpoint] dir sets it for every
    # checkpoint check. Unset: SKIP, since no scratch directory is known to be shared by the nodes.
    dir: str | None = param(None, kind="path", help="shared checkpoint directory every node writes to and resumes from")
    steps: int = param(30, kind="count", minimum=2, help="training steps of the run (count)")
    save_every: int = param(10, kind="count", minimum=1, help="steps between checkpoints (count)")
    # Between two checkpoints, so that work is lost and redone.
    kill_at_step: int = param(15, kind="count", minimum=1, help="step after which the node is lost (step number)")
    kill_node: str = param("last", kind="text",
                           help='node lost: "first" (rank 0\'s), "last", or a node name from the hosts file')
    kill_phase: str = param("train", kind="choice", choices=("train", "save"),
                            help='"train": lost between checkpoints; "save": lost while the checkpoint of '
                                 'kill_at_step is being written')
    # torchrun --max-restarts: a restart of the whole group after a failure (elastic).
    max_restarts: int = param(1, kind="count", help="torchrun --max-restarts for the run (count)")
    ranks_per_node: int = param(1, kind="count", minimum=1, help="processes per node with gloo (count)")
    backend: str | None = param(None, kind="choice", choices=("nccl", "gloo"),
                                help='"nccl" or "gloo"; unset: NCCL when every node has GPUs, gloo otherwise')
    payload_mb: float = param(16.0, kind="size", help="checkpoint size, split over the ranks (MB)")
    seed: int = param(1234, kind="count", help="random seed of the run (integer)")
    max_resume_s: float = param(180.0, kind="threshold",
                                help="longest time from the failure until every rank has loaded the checkpoint (seconds)")
    rdzv_timeout_s: float = param(60.0, kind="duration", help="how long torchrun waits for every node to join (seconds)")
    pg_timeout_s: float = param(60.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")
    rdzv_port: int | None = param(None, kind="count", minimum=1,
                                  help="rendezvous port on the first node (TCP port); unset: one that was free there")
    socket_ifname: str | None = param(None, kind="text",
                                      help="interface for gloo and NCCL sockets (GLOO/NCCL_SOCKET_IFNAME); unset: found")
    env: dict[str, str] = param(kind="table", factory=dict, help="extra environment variables for torchrun on every node")
    # TensorFlow: MultiWorkerMirroredStrategy with BackupAndRestore, one worker lost after tf_kill_epoch.
    tensorflow: bool = param(True, kind="flag",
                             help="also lose a TensorFlow worker where TensorFlow and tf_keras are installed (true/false)")
    tf_epochs: int = param(6, kind="count", minimum=2, help="epochs of the TensorFlow run (count)")
    tf_kill_epoch: int = param(2, kind="count", help="epoch after which a TensorFlow worker is lost (epoch number)")
    # How often to checkpoint: the planned job, and the failure rate ([job] nodes and days in preflight.toml).
    job_nodes: int | None = param(None, kind="count", minimum=1,
                                  help="nodes of the planned training job (count); unset: this run's nodes")
    job_days: float = param(30.0, kind="duration", help="length of the planned training job (days)")
    job_checkpoint_gb: float | None = param(None, kind="size",
                                            help="size of the job's full checkpoint (GB); unset: the one saved here")
    failures_per_node_day: float | None = param(None, kind="threshold",
                                                help="interruptions per node per day (rate); unset: Llama 3's published")


FIX_RESTART = ("Run torchrun with --max-restarts of 1 or more and a c10d (or etcd) rendezvous (--rdzv-backend=c10d "
               "--rdzv-endpoint=<host>:<port>), or let the scheduler requeue the job (sbatch --requeue, a Kubernetes "
               "Job's backoffLimit), with the training script resuming from the newest checkpoint at start.")
FIX_NOTICE = ("Bound every collective: init_process_group(timeout=...) of minutes, not the default 10 (NCCL) or 30 "
              "min; with NCCL keep TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (or 1) so the watchdog aborts a stuck "
              "collective, and TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC so a hung watchdog ends the process; with gloo set "
              "the timeout, since gloo has no watchdog.")
FIX_ATOMIC = ("Publish checkpoints atomically: save into a temporary directory, and once every rank has written (and "
              "DCP's .metadata exists) rename it to its final name on rank 0 and fsync the parent; resume only from "
              "directories with the final name.")
FIX_SHARED = ("Point the checkpoint directory at a filesystem mounted on every node (NFS, Lustre, GPFS, a shared "
              "volume), the same path everywhere; storage.shared checks it.")
REMEDIATION = (FIX_RESTART, FIX_NOTICE, FIX_ATOMIC, FIX_SHARED)
FIXES = {
    **TOO_FEW_NODES_FIXES,
    "no-dir": ("Set the shared checkpoint directory: [checkpoint] dir = \"/shared/checkpoints\" in preflight.toml, or "
               "--set checkpoint.cluster_resume.dir=/shared/checkpoints."),
    "too-few-usable": "Install torch for the Python preflight runs on at least two nodes.",
    "no-backend": 'Run with backend = "gloo", or give every node GPUs and a torch built with NCCL.',
    "unknown-node": 'Set kill_node to "first", "last" or a node name of the hosts file.',
    "kill-not-reached": ("Read the torchrun output in the evidence: the run failed before the failure was simulated "
                         "(rendezvous, storage, torch on a node)."),
    "never-noticed": FIX_NOTICE,
    "no-restart": FIX_RESTART,
    "resume-step-differs": ("Every rank must resume from the same checkpoint: read it from one shared directory, and "
                            "let rank 0 choose the newest complete one and broadcast its step."),
    "torn-checkpoint": FIX_ATOMIC,
    "from-zero": ("Resume from the newest complete checkpoint at start (a restarted job must look for it), from the "
                  "same directory it saves to."),
    "not-shared": FIX_SHARED,
    "resume-failed": "Read the ranks' errors in the details and the torchrun output in the evidence.",
    "weights-differ": ("Save and restore everything training depends on: model, optimizer, step, the data order and "
                       "random-number states; load with the same world size and sharding."),
    "tensorflow-failed": "Read the TensorFlow workers' output in the evidence (TF_CONFIG addresses, ports, tf_keras).",
    "tensorflow-never-noticed": ("Let the coordination service notice lost workers: keep its heartbeats on (the "
                                 "default) and bound collectives (tf.distribute.experimental.CommunicationOptions("
                                 "timeout_seconds=...))."),
    "tensorflow-from-zero": ("Give model.fit the BackupAndRestore callback with a backup_dir on shared storage, the "
                             "same path for every worker, and restart every worker after a failure."),
    "tensorflow-weights-differ": ("Seed everything (keras.utils.set_random_seed) and keep the data order per epoch "
                                  "fixed, so that a resumed epoch sees the data an uninterrupted one sees."),
    "slow-resume": ("Faster restarts: keep the training image and data cached on the nodes, load checkpoints in "
                    "parallel from every rank (torch.distributed.checkpoint), and shorten rendezvous timeouts."),
}
