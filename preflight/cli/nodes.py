"""Which nodes a run checks: this machine, a hosts file, or the Slurm allocation it runs in."""

from __future__ import annotations

from collections.abc import Mapping

from preflight.integrations.slurm import (
    NodeState, Runner, SlurmError, allocation_from_env, expand_nodelist, outside_allocation_message, show_nodes,
)
from preflight.launch.topology import SWITCH_KEY, slurm_leaf_switches
from preflight.run.runner import NodeTarget
from preflight.transport.process import run_command


def allocation_nodes(python: str, env: Mapping[str, str] | None = None, run: Runner = run_command) -> list:
    """One SlurmTransport per node of the allocation, named as Slurm names it, at its NodeAddr, with its
    leaf switch when Slurm has a topology plugin."""
    from preflight.transport.slurm import SlurmTransport

    allocation = allocation_from_env(env)
    if allocation is None:
        raise SlurmError("not inside a Slurm allocation")
    names = expand_nodelist(allocation.nodelist, run)
    states = show_nodes(names, run)
    switches = slurm_leaf_switches(names, run)
    return [NodeTarget(SlurmTransport(name, states.get(name, NodeState(name)).address or name, python,
                                      jobid=allocation.jobid),
                       topology={SWITCH_KEY: switches[name]} if name in switches else {}) for name in names]


def nodes_for_run(with_hosts_file: bool, slurm: bool, python: str, argv: list[str],
                  env: Mapping[str, str] | None = None, run: Runner = run_command) -> list:
    """The nodes `preflight run --slurm` checks; SlurmError saying what to do instead when it cannot."""
    if not slurm:
        raise SlurmError("--drain and --resume act on the nodes of a Slurm allocation: add --slurm")
    if with_hosts_file:
        raise SlurmError("--nodes and --slurm exclude each other: the allocation says which nodes to check")
    if allocation_from_env(env) is None:
        raise SlurmError(outside_allocation_message(argv))
    return allocation_nodes(python, env, run)


