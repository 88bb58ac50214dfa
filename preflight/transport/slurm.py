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
"""

from __future__ import annotations

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


class SlurmTransport(Transport):
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

    def wrap(self, argv: list[str]) -> list[str]:
        if not argv:
            raise ValueError("empty command")
        return [*self.srun_argv(), *argv]

    def is_transport_failure(self, returncode: int) -> bool:
        return returncode == SRUN_ERROR_EXIT or returncode in SRUN_LAUNCH_FAILURE_EXITS

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
