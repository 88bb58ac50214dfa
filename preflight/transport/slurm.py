"""A node of the caller's Slurm allocation, reached with `srun` as a job step.

    env -u SLURM_NTASKS ... SLURM_EXIT_ERROR=255 srun --jobid=J -w NODE -N1 -n1 --overlap --quiet
        --quit-on-interrupt -J preflight -- <argv>

One step per command, on exactly that node, overlapping every other step of the job (the agents,
iperf3 servers and torchrun of the cross-node checks run side by side). srun forwards stdin to the
task and closes it when its own stdin closes, and streams the task's stdout line by line, so the
agent's protocol works unchanged. SIGTERM to srun cancels the step (the runner's kill_tree sends
SIGTERM before SIGKILL); a SIGKILLed srun would leave its step running, as a dropped ssh master
would leave a remote command.

Settings an sbatch script or salloc exported for the whole job (SLURM_NTASKS_PER_NODE,
SLURM_CPUS_PER_TASK, SLURM_MEM_PER_CPU, ...) are removed for the step, so that `-N1 -n1` means
one task on one node with all of the job's resources there.

Exit codes: srun returns the command's own code. Its own failures are told apart as far as srun
allows: SLURM_EXIT_ERROR=255 makes a step that cannot be created (unknown node, node not in the
allocation, job gone) exit 255, as ssh does; a step that cannot be launched (slurmd down,
unreachable) exits with Slurm's communication errno modulo 256 (1001-1008: 233-240).

`SlurmStep` is the other way to reach the nodes: one job step across all of them, one task per node,

    srun --jobid=J -w n1,...,nN -N N -n N --ntasks-per-node=1 --overlap --quiet -l
        --kill-on-bad-exit=0 --wait=0 --quit-on-interrupt -J preflight -- <argv>

one srun on the coordinator instead of one per node, and one step to create instead of N. srun
sends its stdin to every task and labels every line of their output with the task's number (`-l`,
"12: line"); which task runs on which node is Slurm's choice, so a task says its node itself
(SLURMD_NODENAME). Slurm names the node of each failure in its own words, which `srun_message`
reads: a launch that failed there, a task that ended badly, a node that failed. A task that ends,
or fails to start, leaves the other tasks running (--kill-on-bad-exit=0, --wait=0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from preflight.transport.base import Transport

SRUN_ERROR_EXIT = 255
# SLURM_COMMUNICATIONS_CONNECTION_ERROR (1001) .. SLURM_PROTOCOL_INSUFFICIENT_SPACE (1008), & 0xff.
SRUN_LAUNCH_FAILURE_EXITS = frozenset(range(1001 & 0xFF, (1008 & 0xFF) + 1))
# Job-wide settings srun would otherwise apply to a one-task step.
JOB_WIDE_VARIABLES = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK", "SLURM_DISTRIBUTION", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE",
    "SLURM_MEM_PER_GPU", "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_NTASKS_PER_GPU",
    "SLURM_CPU_BIND", "SLURM_EXCLUSIVE",
)
STEP_NAME = "preflight"


class _Srun:
    """A command run through srun: `srun_argv()` before it; srun's own failures told from the command's."""

    def srun_argv(self) -> list[str]:
        raise NotImplementedError

    def wrap(self, argv: list[str]) -> list[str]:
        if not argv:
            raise ValueError("empty command")
        return [*self.srun_argv(), *argv]

    def is_transport_failure(self, returncode: int) -> bool:
        return returncode == SRUN_ERROR_EXIT or returncode in SRUN_LAUNCH_FAILURE_EXITS


class SlurmTransport(_Srun, Transport):
    kind = "slurm"
    client = "srun"

    def __init__(self, name: str, address: str | None = None, python: str = "python3", *, jobid: str,
                 srun: str = "srun", connect_timeout: float = 30.0) -> None:
        if not name or name.startswith("-") or "," in name:
            raise ValueError(f"invalid Slurm node name {name!r}")
        if not str(jobid).replace("_", "").isdigit():
            raise ValueError(f"invalid Slurm job id {jobid!r}")
        super().__init__(name, address or name, python)
        self.jobid = str(jobid)
        self.srun = srun
        self.connect_timeout = connect_timeout

    def srun_argv(self) -> list[str]:
        """Everything before the command: the step on this node of this job."""
        unset = [arg for variable in JOB_WIDE_VARIABLES for arg in ("-u", variable)]
        return ["env", *unset, f"SLURM_EXIT_ERROR={SRUN_ERROR_EXIT}", self.srun, f"--jobid={self.jobid}",
                "-w", self.name, "-N1", "-n1", "--overlap", "--quiet", "--quit-on-interrupt", "-J", STEP_NAME, "--"]

    def connect(self, timeout: float | None = None) -> None:
        """Run a trivial step on the node; TransportError with srun's own words if it fails."""
        limit = timeout if timeout is not None else self.connect_timeout
        self._connect_with_true(limit, client="Slurm", binary=self.srun,
                                no_answer=f"a job step on {self.name} did not start",
                                failed=f"cannot start a job step on {self.name}", last_line=True)

    def to_spec(self) -> dict[str, Any]:
        return {**super().to_spec(), "jobid": self.jobid, "srun": self.srun, "connect_timeout": self.connect_timeout}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> SlurmTransport:
        return cls(spec["name"], spec.get("address"), spec.get("python") or "python3", jobid=spec["jobid"],
                   srun=spec.get("srun") or "srun", connect_timeout=float(spec.get("connect_timeout", 30.0)))

    def __repr__(self) -> str:
        return f"SlurmTransport({self.name!r}, job {self.jobid})"


# "  7: text": a task's line as `srun -l` labels it.
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.S)
_LAUNCH_FAILED = re.compile(r"^srun: error: Task launch for \S+ failed on node ([^\s:]+): (.*)$")
_TASKS_ENDED = re.compile(r"^srun: error: ([^\s:]+): tasks? ([0-9,\-]+): (.*)$")
_NODE_FAILED = re.compile(r"^srun: error: Node failure on ([^\s:]+)")


def split_label(line: str) -> tuple[int | None, str]:
    """(task number, the task's own text) of a line `srun -l` wrote; (None, line) for srun's own. Pure."""
    match = _LABEL.match(line)
    if match is None:
        return None, line
    return int(match.group(1)), match.group(2)


@dataclass
class SrunMessage:
    node: str
    kind: str  # "launch" (its task never started), "ended" (its task ended badly), "node" (the node failed)
    text: str  # srun's line, as it wrote it
    task: int | None = None  # the one task it names ("task 3"), when it names one


def srun_message(line: str) -> SrunMessage | None:
    """The node a line of srun's own stderr is about, and what happened there; None when it names none. Pure."""
    line = line.strip()
    match = _LAUNCH_FAILED.match(line)
    if match:
        return SrunMessage(match.group(1), "launch", line)
    match = _TASKS_ENDED.match(line)
    if match:
        task = int(match.group(2)) if match.group(2).isdigit() else None
        return SrunMessage(match.group(1), "ended", line, task)
    match = _NODE_FAILED.match(line)
    if match:
        return SrunMessage(match.group(1), "node", line)
    return None


class SlurmStep(_Srun):
    """One job step across the allocation, one task per node: what RemoteProcess needs of a
    transport (wrap, python, remote, is_transport_failure) for the step's single srun."""

    remote = True
    kind = "slurm-step"
    client = "srun"

    def __init__(self, nodes: list[SlurmTransport]) -> None:
        if not nodes or len({(n.jobid, n.srun, n.python) for n in nodes}) != 1:
            raise ValueError("one job step needs nodes of one job, one srun and one interpreter")
        if len({n.name for n in nodes}) != len(nodes):
            raise ValueError("a node appears twice")
        self.nodes = list(nodes)
        self.jobid, self.srun, self.python = nodes[0].jobid, nodes[0].srun, nodes[0].python

    @staticmethod
    def fits(transports: list[Any]) -> bool:
        """True when these nodes can be one step: all reached through srun in one job, alike."""
        return (bool(transports) and all(isinstance(t, SlurmTransport) for t in transports)
                and len({(t.jobid, t.srun, t.python) for t in transports}) == 1
                and len({t.name for t in transports}) == len(transports))

    def srun_argv(self) -> list[str]:
        unset = [arg for variable in JOB_WIDE_VARIABLES for arg in ("-u", variable)]
        count = len(self.nodes)
        return ["env", *unset, f"SLURM_EXIT_ERROR={SRUN_ERROR_EXIT}", self.srun, f"--jobid={self.jobid}",
                "-w", ",".join(n.name for n in self.nodes), f"-N{count}", f"-n{count}", "--ntasks-per-node=1",
                "--overlap", "--quiet", "-l", "--kill-on-bad-exit=0", "--wait=0", "--quit-on-interrupt",
                "-J", STEP_NAME, "--"]

    def __repr__(self) -> str:
        return f"SlurmStep({len(self.nodes)} nodes, job {self.jobid})"
