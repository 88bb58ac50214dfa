"""Kubernetes on the command line: `run --k8s ...` and `preflight k8s manifests`."""

from __future__ import annotations

import sys
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

import click

from preflight.cli.options import FiniteFloat, UsageProblem

# The run records of the runs this process coordinates (their heartbeats stop in `sweep`).
_RECORDS: dict[str, Any] = {}

K8S_FLAGS = ("k8s", "context", "namespace", "selector", "image", "cordon", "uncordon", "k8s_start_timeout")


def k8s_options(f: Callable) -> Callable:
    """The options of `run` for a Kubernetes cluster, defined once."""
    options = [
        click.option("--k8s", is_flag=True, help="Check the nodes of a Kubernetes cluster: one pod per node, "
                     "pinned to it, in the team's own image (--image), through the API server only."),
        click.option("--context", default=None, help="With --k8s: the kubeconfig context (default: the current one)."),
        click.option("--namespace", default=None, help="With --k8s: where preflight's pods and ConfigMaps live "
                     "(default: default)."),
        click.option("--selector", default=None, metavar="LABELS",
                     help="With --k8s: the nodes to check, a label selector (default: nodes with nvidia.com/gpu)."),
        click.option("--image", default=None, help="With --k8s: the training image (with preflight installed) "
                     "the checks run in."),
        click.option("--cordon", is_flag=True, help="With --k8s: taint (NoSchedule) and mark PreflightReady=False "
                     "each node with a blocking finding of its own."),
        click.option("--uncordon", is_flag=True, help="With --k8s: remove preflight's taint from nodes that now pass "
                     "(never an operator's)."),
        click.option("--k8s-start-timeout", type=FiniteFloat(1, 3600), default=120.0, show_default=True,
                     help="With --k8s: how long a pod may stay Pending before its node is ERROR."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def wanted(args: dict[str, Any]) -> bool:
    given = [name for name in K8S_FLAGS if name not in ("k8s", "k8s_start_timeout") and args.get(name)]
    if given and not args.get("k8s"):
        raise UsageProblem(f"--{given[0].replace('_', '-')} applies to Kubernetes runs: add --k8s")
    return bool(args.get("k8s"))


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]


def nodes(args: dict[str, Any], remote_python: str, run_id: str, other_sources: bool,
          budget_s: float = 0.0) -> list[Any]:
    """One K8sTransport per node the API lists (GPU nodes, or --selector), named by its Kubernetes name.

    First the objects of dead runs in the namespace are removed; then this run's record is made, with
    its deadline (`budget_s`, the checks' timeouts, plus the pods' start and a margin), and kept alive
    by a heartbeat until `sweep` (preflight.integrations.kubernetes.runs)."""
    from preflight.integrations.kubernetes.api import KubernetesError, core_api
    from preflight.integrations.kubernetes.nodes import discover
    from preflight.run.runner import NodeTarget
    from preflight.transport.k8s import K8sTransport

    if other_sources:
        raise UsageProblem("--k8s excludes --nodes and --slurm: the API server says which nodes to check")
    if not args.get("image"):
        raise UsageProblem("--k8s needs --image: the training image, with preflight installed, to run the checks in")
    namespace = args.get("namespace") or "default"
    from preflight.integrations.kubernetes.runs import RunRecord, sweep_dead

    start_timeout = args.get("k8s_start_timeout") or 120.0
    try:
        api = core_api(args.get("context"))
        found = discover(api, args.get("selector"))
        for run in sweep_dead(api, namespace):
            click.echo(f"kubernetes: removed {run.count} object(s) of run {run.run_id} ({run.dead})", err=True)
        record = RunRecord.create(api, namespace, run_id, budget_s + start_timeout).start_heartbeat()
    except KubernetesError as exc:
        raise UsageProblem(str(exc)) from None
    _RECORDS[run_id] = record
    return [NodeTarget(K8sTransport(n.name, n.address, remote_python, namespace=namespace, image=args["image"],
                                    run_id=run_id, context=args.get("context"), gpus=n.gpu_allocatable,
                                    start_timeout_s=start_timeout, expires=record.expires, owner_uid=record.uid),
                       slots=n.gpu_allocatable or None, topology=_topology(n.labels))
            for n in found]


def _topology(labels: dict[str, str]) -> dict[str, Any]:
    """The node's network-locality labels, for its spec (preflight.launch.topology)."""
    from preflight.launch.topology import LABELS_KEY, topology_labels

    found = topology_labels(labels)
    return {LABELS_KEY: found} if found else {}


def after_run(report: Any, args: dict[str, Any]) -> None:
    """--cordon / --uncordon, from the report just written."""
    if not (args.get("cordon") or args.get("uncordon")):
        return
    from preflight.integrations.kubernetes import cordon
    from preflight.integrations.kubernetes.api import KubernetesError, core_api

    try:
        api = core_api(args.get("context"))
    except KubernetesError as exc:
        click.echo(f"kubernetes: {exc}", err=True)
        return
    for action in cordon.apply(api, report, bool(args.get("cordon")), bool(args.get("uncordon"))):
        click.echo(f"kubernetes: {action.describe()}", err=bool(action.error))


def sweep(args: dict[str, Any], run_id: str) -> None:
    """Delete whatever this run left in the namespace (the bridges delete their own; this is the net)."""
    from preflight.integrations.kubernetes.api import KubernetesError, core_api
    from preflight.integrations.kubernetes.runs import delete_run

    record = _RECORDS.pop(run_id, None)
    if record is not None:
        record.stop_heartbeat()
    try:
        left = delete_run(core_api(args.get("context")), args.get("namespace") or "default", run_id)
    except KubernetesError as exc:
        click.echo(f"kubernetes: could not clean up run {run_id}: {exc}", err=True)
        return
    if left > (1 if record is not None else 0):  # beyond the run's own record
        click.echo(f"kubernetes: removed {left - (1 if record is not None else 0)} object(s) run {run_id} left "
                   "behind", err=True)


@click.group("k8s")
def k8s() -> None:
    """Kubernetes: what a run there needs, and removing what a dead run left."""


@k8s.command("cleanup")
@click.option("--namespace", default="default", show_default=True, help="Namespace of preflight's pods.")
@click.option("--context", default=None, help="The kubeconfig context (default: the current one).")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="Only this run (also one written by a preflight that set no deadline).")
@click.option("--force", is_flag=True, help="With --run: remove its objects even if the run looks alive.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
def cleanup(namespace: str, context: str | None, run_id: str | None, force: bool, dry_run: bool) -> None:
    """Remove the pods and ConfigMaps of runs that are over: their deadline passed, their coordinator is
    gone (killed, its machine lost), or their heartbeat stopped. Runs still going are listed, untouched."""
    from preflight.integrations.kubernetes.api import KubernetesError, core_api
    from preflight.integrations.kubernetes.runs import runs_in, sweep_dead

    if force and not run_id:
        raise UsageProblem("--force applies to one run: add --run ID")
    try:
        api = core_api(context)
        if dry_run:
            for run in runs_in(api, namespace):
                if run_id is None or run.run_id == run_id:
                    state = f"over: {run.dead}" if run.dead else "running"
                    click.echo(f"run {run.run_id}: {run.count} object(s), {state}"
                               + ("" if run.expires is not None or run.run_id == run_id else " (no deadline: "
                                  "only --run removes it)"))
            return
        removed = sweep_dead(api, namespace, only=run_id, force=force)
        left = [run for run in runs_in(api, namespace) if run_id is None or run.run_id == run_id]
    except KubernetesError as exc:
        raise UsageProblem(str(exc)) from None
    for run in removed:
        click.echo(f"removed run {run.run_id}: {len(run.pods)} pod(s), {len(run.config_maps)} ConfigMap(s) "
                   f"({run.dead or 'forced'})")
    for run in left:
        click.echo(f"kept run {run.run_id}: {run.count} object(s), "
                   + (f"over ({run.dead}) but it set no deadline: --run {run.run_id} removes it" if run.dead
                      else "still running (--run ID --force removes it anyway)"))
    if not removed and not left:
        click.echo(f"nothing of preflight's is left in {namespace}")


@k8s.command("manifests")
@click.option("--namespace", default="default", show_default=True, help="Namespace of preflight's pods.")
@click.option("--user", default=None, help="Bind the coordinator's roles to this user.")
@click.option("--group", default=None, help="Bind the coordinator's roles to this group.")
@click.option("--service-account", default=None, metavar="[NS/]NAME",
              help="Bind the coordinator's roles to this service account (a coordinator inside the cluster).")
@click.option("--image", default="registry.example/team/train:tag", help="The image shown in the pod template.")
@click.option("--no-cordon", is_flag=True, help="Leave out the node verbs --cordon and --uncordon need.")
def manifests(namespace: str, user: str | None, group: str | None, service_account: str | None, image: str,
              no_cordon: bool) -> None:
    """Print the ServiceAccount, the least-privilege Role/ClusterRole and the pod template, as YAML."""
    from preflight.integrations.kubernetes.manifests import render

    sys.stdout.write(render(namespace, user=user, group=group, service_account=service_account,
                            cordon=not no_cordon, image=image))
