"""One job step across the allocation: its srun command, the labels of its output, and the node each
of srun's own error lines is about (as Slurm 22.05 writes them)."""

from __future__ import annotations

import pytest

from preflight.transport.local import LocalTransport
from preflight.transport.slurm import SlurmStep, SlurmTransport, split_label, srun_message


def nodes(*names: str, jobid: str = "42", python: str = "python3") -> list[SlurmTransport]:
    return [SlurmTransport(name, jobid=jobid, python=python) for name in names]


def test_the_step_is_one_task_on_each_named_node_labelled_and_robust_to_a_task_ending():
    argv = SlurmStep(nodes("n1", "n2", "n3")).wrap(["python3", "-m", "preflight.engine.agent"])
    srun = argv.index("srun")
    assert argv[srun + 1:srun + 5] == ["--jobid=42", "-w", "n1,n2,n3", "-N3"]
    for option in ("-n3", "--ntasks-per-node=1", "--overlap", "-l", "--kill-on-bad-exit=0", "--wait=0"):
        assert option in argv
    assert "SLURM_EXIT_ERROR=255" in argv and argv[argv.index("-u") + 1] == "SLURM_NTASKS"
    assert argv[argv.index("--") + 1:] == ["python3", "-m", "preflight.engine.agent"]


def test_only_nodes_of_one_job_reached_alike_make_one_step():
    assert SlurmStep.fits(nodes("n1", "n2"))
    assert not SlurmStep.fits(nodes("n1") + nodes("n2", jobid="43"))
    assert not SlurmStep.fits(nodes("n1") + nodes("n2", python="/opt/py/bin/python"))
    assert not SlurmStep.fits(nodes("n1", "n1"))
    assert not SlurmStep.fits([LocalTransport("here")])
    assert not SlurmStep.fits([])
    with pytest.raises(ValueError):
        SlurmStep(nodes("n1") + nodes("n2", jobid="43"))


@pytest.mark.parametrize("line, expected", [
    ("0: PREFLIGHT-HELLO {}", (0, "PREFLIGHT-HELLO {}")),
    ("  7: @@pid 12 13 /tmp/x", (7, "@@pid 12 13 /tmp/x")),
    ("12: ", (12, "")),
    ("srun: error: n1: task 0: Exited with exit code 3", (None, "srun: error: n1: task 0: Exited with exit code 3")),
])
def test_a_labelled_line_gives_its_task_and_its_own_text(line, expected):
    assert split_label(line) == expected


@pytest.mark.parametrize("line, node, kind, task", [
    ("srun: error: Task launch for StepId=1.2 failed on node n3: Communication connection failure", "n3", "launch", None),
    ("srun: error: n1: task 0: Exited with exit code 3", "n1", "ended", 0),
    ("srun: error: gpu07: tasks 3-5: Killed", "gpu07", "ended", None),
    ("srun: error: Node failure on n2", "n2", "node", None),
])
def test_sruns_own_errors_name_their_node(line, node, kind, task):
    said = srun_message(line)
    assert said is not None and (said.node, said.kind, said.text, said.task) == (node, kind, line, task)


@pytest.mark.parametrize("line", [
    "srun: error: Application launch failed: Communication connection failure",
    "srun: error: Unable to create step for job 1: Requested node configuration is not available",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
])
def test_sruns_lines_that_name_no_node_name_none(line):
    assert srun_message(line) is None
