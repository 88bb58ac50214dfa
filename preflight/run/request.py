"""What a run was asked to do, as one frozen value: the command line turns its options into a
RunRequest and hands it to preflight.run.service; nothing below the command line reads an option.

A RunProblem is the user's mistake found while preparing or finishing a run (a file that does not
exist, a flag that contradicts another): the command line prints it and exits 2, nothing ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from preflight.core.shape import Shape

# Where the nodes come from (nodes_for, as the run's kind says: preflight.run.kind): this machine, a
# hosts file or node set, Slurm, Kubernetes.
LOCAL, HOSTS, SLURM, K8S = "local", "hosts", "slurm", "k8s"
# Fleet history: "auto" reads and records unless [history] enabled = false; "on" only records
# (whatever `enabled` says: the healthcheck's --history); "off" leaves it alone.
HISTORY_AUTO, HISTORY_ON, HISTORY_OFF = "auto", "on", "off"


class RunProblem(Exception):
    """Bad input, named (the file, key or flag): exit 2."""


@dataclass(frozen=True)
class K8sRequest:
    """--k8s and its options."""

    image: str | None = None
    context: str | None = None
    namespace: str | None = None
    selector: str | None = None
    cordon: bool = False
    uncordon: bool = False
    start_timeout_s: float = 120.0


@dataclass(frozen=True)
class HookRequest:
    """A scheduler hook's run (`preflight healthcheck`): its kind is preflight.run.kind.Healthcheck,
    its rules are in preflight.run.hook."""

    budget_s: float
    node: str = ""  # the node's name ("": as Slurm names this machine)


@dataclass(frozen=True)
class RunRequest:
    # Which checks, with which thresholds.
    checks: str | None = None  # --checks as given (None: the default selection)
    skip: str | None = None
    tags: tuple[str, ...] = ()
    level: str | None = None
    profile: str | None = None
    config_file: str | None = None
    settings: tuple[str, ...] = ()
    fail_on: str | None = None
    timeout_s: float | None = None
    # Which nodes, and how they are reached.
    nodes_file: str | None = None  # a hosts file or a node set
    slurm: bool = False
    slurm_step: str = "auto"
    k8s: K8sRequest | None = None
    remote_python: str = "python3"
    remote_python_given: bool = False  # --remote-python given (for --slurm: else this interpreter)
    ssh_options: tuple[str, ...] = ()
    ssh_accept_new: bool = False
    ship: bool = False  # --ship: a throwaway preflight on the SSH nodes that lack it (preflight.run.ship)
    fanout: int = 64
    fail_fast: bool = False
    # What comes out.
    out_dir: str | None = None
    formats: tuple[str, ...] = ("html", "md", "json", "junit")
    textfile_dir: str | None = None
    baseline_file: str | None = None
    baseline_tolerance: float = 0.1
    fail_on_regression: bool = False
    shape: Shape | None = None  # --shape: the job's shape, answered after the run (preflight.run.shape)
    shape_values: tuple[str, ...] = ()  # --shape as given: the job's plan fills the keys it leaves out
    # What is done about it.
    drain: bool = False
    blast_radius: float | None = None  # --blast-radius: the share of nodes --drain and --cordon may act on
    resume: bool = False
    history: str = HISTORY_AUTO
    # Who asked.
    argv: tuple[str, ...] = ()  # the command's arguments, for the messages that repeat it
    command: str = ""  # the command line as the reports show it
    hook: HookRequest | None = None  # what a scheduler hook's run was asked (preflight.run.kind.Healthcheck)
