"""Which nodes a run checks (nodes_for): this machine, a hosts file or node set, the Slurm
allocation it runs in, or the nodes of a Kubernetes cluster. Each becomes a NodeTarget: its
transport, the GPUs it should have, and where it sits in the network (preflight.integrations.topology)."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from preflight.integrations.slurm import (
    NodeState, Runner, SlurmError, allocation_from_env, expand_nodelist, outside_allocation_message, show_nodes,
    state_text, unavailable,
)
from preflight.integrations.topology import LABELS_KEY, SWITCH_KEY, slurm_leaf_switches, topology_labels
from preflight.run.kind import kind_of
from preflight.run.request import HOSTS, K8S, SLURM, RunProblem, RunRequest
from preflight.engine.runner import NodeTarget
from preflight.transport.process import run_command


def nodes_for(request: RunRequest, run_id: str = "", env: Mapping[str, str] | None = None,
              run: Runner = run_command, budget_s: float | Callable[[int], float] = 0.0,
              notes: list[str] | None = None) -> list[NodeTarget]:
    """The nodes the request names; RunProblem (exit 2) saying what to do when it cannot name them.
    `budget_s` (the checks' timeouts, or they on a count of nodes) sets a Kubernetes run's deadline;
    `notes` gets what was said."""
    kind = kind_of(request)
    source = kind.node_source(request)
    if source == K8S:
        return k8s_nodes(request, run_id, budget_s, notes if notes is not None else [])
    if source == SLURM:
        python = request.remote_python if request.remote_python_given else sys.executable
        try:
            return nodes_for_run(bool(request.nodes_file), request.slurm, python, list(request.argv), env, run,
                                 notes if notes is not None else [])
        except (SlurmError, ValueError) as exc:
            raise RunProblem(str(exc)) from None
    if source == HOSTS:
        return hosts_nodes(str(request.nodes_file), request.remote_python, list(request.ssh_options),
                           request.ssh_accept_new, notes if notes is not None else [])
    from preflight.transport import LocalTransport

    name = kind.local_name()
    return [NodeTarget(LocalTransport(name=name) if name else LocalTransport())]


def new_run_id() -> str:
    """A run's own name among the objects it leaves in a Kubernetes namespace."""
    return datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]


# -- a hosts file or node set ---------------------------------------------------------------------


def hosts_nodes(path: str, remote_python: str, ssh_options: list[str], accept_new: bool,
                notes: list[str] | None = None) -> list[NodeTarget]:
    from preflight.run.hosts import HostsFileError, nodes_from_arg
    from preflight.transport.ssh import SshTransport

    try:
        hosts = without_ports(nodes_from_arg(path))
        if notes is not None:
            notes += sinfo_notes(path)
        return [NodeTarget(SshTransport.from_host(host, python=remote_python, options=ssh_options,
                                                  accept_new=accept_new), slots=host.slots,
                           topology={"group": host.group} if host.group else {}) for host in hosts]
    except HostsFileError as exc:
        raise RunProblem(str(exc)) from None
    except ValueError as exc:  # an --ssh-option that is not Key=Value
        raise RunProblem(str(exc)) from None


def sinfo_notes(path: str) -> list[str]:
    """For a saved `sinfo` table given as --nodes: each node it shows drained, down or failed, with the
    reason when the table has one (`sinfo -R`, `sinfo -N -o "%N %T %E"`)."""
    from preflight.run.hosts import saved_sinfo

    file = Path(path).expanduser()
    states = saved_sinfo(file.read_text(encoding="utf-8", errors="replace")) if file.is_file() else None
    return [f"slurm: {name} is {state_text(state)}, as the --nodes file shows it"
            for name, state in (states or {}).items() if unavailable(state)]


def without_ports(hosts: list[Any]) -> list[Any]:
    """Hosts named by their address alone (`gpu01`, not `gpu01:2222`) in every report, unless two of
    them share an address: then the port tells them apart."""
    shared = {h.hostname for h in hosts if sum(1 for o in hosts if o.hostname == h.hostname) > 1}
    return [h if h.hostname in shared or h.port is None else dataclasses.replace(h, name=h.hostname) for h in hosts]


# -- Slurm ----------------------------------------------------------------------------------------


def allocation_nodes(python: str, env: Mapping[str, str] | None = None, run: Runner = run_command,
                     notes: list[str] | None = None) -> list:
    """One SlurmTransport per node of the allocation, named as Slurm names it, at its NodeAddr, with its
    leaf switch when Slurm has a topology plugin. A node Slurm has drained, or marked down, is said in
    `notes` with its reason (a finding there may already be known to its operator)."""
    from preflight.transport.slurm import SlurmTransport

    allocation = allocation_from_env(env)
    if allocation is None:
        raise SlurmError("not inside a Slurm allocation")
    names = expand_nodelist(allocation.nodelist, run)
    states = show_nodes(names, run)
    if notes is not None:
        notes += [f"slurm: {name} is {state_text(states[name])}" for name in names
                  if name in states and unavailable(states[name])]
    switches = slurm_leaf_switches(names, run)
    return [NodeTarget(SlurmTransport(name, states.get(name, NodeState(name)).address or name, python,
                                      jobid=allocation.jobid),
                       topology={SWITCH_KEY: switches[name]} if name in switches else {}) for name in names]


def nodes_for_run(with_hosts_file: bool, slurm: bool, python: str, argv: list[str],
                  env: Mapping[str, str] | None = None, run: Runner = run_command,
                  notes: list[str] | None = None) -> list:
    """The nodes `preflight run --slurm` checks; SlurmError saying what to do instead when it cannot."""
    if not slurm:
        raise SlurmError("--drain and --resume act on the nodes of a Slurm allocation: add --slurm")
    if with_hosts_file:
        raise SlurmError("--nodes and --slurm exclude each other: the allocation says which nodes to check")
    if allocation_from_env(env) is None:
        raise SlurmError(outside_allocation_message(argv))
    return allocation_nodes(python, env, run, notes)


# -- Kubernetes -----------------------------------------------------------------------------------


# The run records of the Kubernetes runs this process coordinates: their heartbeats stop when the run's
# objects are swept (release_k8s_run).
_RECORDS: dict[str, Any] = {}


def k8s_nodes(request: RunRequest, run_id: str, budget_s: float | Callable[[int], float] = 0.0,
              notes: list[str] | None = None) -> list[NodeTarget]:
    """One K8sTransport per node the API lists (GPU nodes, or --selector), named by its Kubernetes name.

    First the objects of dead runs in the namespace are removed; then this run's record is made, with
    its deadline (`budget_s`, the checks' timeouts on the nodes found, plus the pods' start and a
    margin: a cluster check's isolation pass is given more time on more nodes), and kept alive
    by a heartbeat until the run's objects are swept (preflight.integrations.kubernetes.runs)."""
    from preflight.integrations.kubernetes.api import KubernetesError, core_api
    from preflight.integrations.kubernetes.nodes import discover
    from preflight.integrations.kubernetes.runs import RunRecord, sweep_dead
    from preflight.transport.k8s import K8sTransport

    k8s = request.k8s
    assert k8s is not None
    if request.nodes_file or request.slurm or request.drain or request.resume:
        raise RunProblem("--k8s excludes --nodes and --slurm: the API server says which nodes to check")
    if not k8s.image:
        raise RunProblem("--k8s needs --image: the training image, with preflight installed, to run the checks in")
    namespace = k8s.namespace or "default"
    try:
        api = core_api(k8s.context)
        found = discover(api, k8s.selector)
        for dead in sweep_dead(api, namespace):
            (notes if notes is not None else []).append(
                f"kubernetes: removed {dead.count} object(s) of run {dead.run_id} ({dead.dead})")
        budget = budget_s(len(found)) if callable(budget_s) else budget_s
        record = RunRecord.create(api, namespace, run_id, budget + k8s.start_timeout_s).start_heartbeat()
    except KubernetesError as exc:
        raise RunProblem(str(exc)) from None
    _RECORDS[run_id] = record
    return [NodeTarget(K8sTransport(n.name, n.address, request.remote_python, namespace=namespace, image=k8s.image,
                                    run_id=run_id, context=k8s.context, gpus=n.gpu_allocatable,
                                    start_timeout_s=k8s.start_timeout_s, expires=record.expires,
                                    owner_uid=record.uid),
                       slots=n.gpu_allocatable or None, topology=k8s_topology(n.labels))
            for n in found]


def k8s_run_record(run_id: str) -> Any:
    """This process's record of the Kubernetes run `run_id`, taken off the list (None when there is none)."""
    return _RECORDS.pop(run_id, None)


def k8s_topology(labels: dict[str, str]) -> dict[str, Any]:
    """The node's network-locality labels, for its spec (preflight.launch.topology reads them)."""
    found = topology_labels(labels)
    return {LABELS_KEY: found} if found else {}
