"""Kubernetes on the command line: `run --k8s ...`, `preflight k8s manifests` and `preflight k8s judge`."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from preflight.cli.options import Duration, UsageProblem

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
        click.option("--k8s-start-timeout", type=Duration(minimum=0.999, maximum=3600), default=120.0,
                     show_default=True, help="With --k8s: how long a pod may stay Pending before its node is ERROR "
                     "(seconds or a duration: 90s, 2m)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def k8s_request(args: dict[str, Any]) -> Any:
    """The Kubernetes part of a run's request; None without --k8s (whose options then are a usage error)."""
    from preflight.run.request import K8sRequest

    given = [name for name in K8S_FLAGS if name not in ("k8s", "k8s_start_timeout") and args.get(name)]
    if given and not args.get("k8s"):
        raise UsageProblem(f"--{given[0].replace('_', '-')} applies to Kubernetes runs: add --k8s")
    if not args.get("k8s"):
        return None
    return K8sRequest(image=args.get("image"), context=args.get("context"), namespace=args.get("namespace"),
                      selector=args.get("selector"), cordon=bool(args.get("cordon")),
                      uncordon=bool(args.get("uncordon")), start_timeout_s=args.get("k8s_start_timeout") or 120.0)


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


@k8s.command("judge")
@click.argument("node_file", type=click.Path(dir_okay=False))
@click.option("--selector", default=None, metavar="LABELS", help="Only the nodes with these labels (key=value,...).")
def judge(node_file: str, selector: str | None) -> None:
    """Judge a saved `kubectl get nodes -o json` (or -o yaml) offline: which nodes a `run --k8s` would
    check, their GPUs, and what keeps a GPU node from taking a GPU job (not Ready, cordoned, tainted,
    fewer GPUs allocatable than installed). Exit 1 when a GPU node has such a problem."""
    from preflight.integrations.kubernetes.nodes import NodeDocumentError, node_problems, read_node_file
    from preflight.reporters.safe_text import single_line

    try:
        nodes = read_node_file(node_file)
    except NodeDocumentError as exc:
        raise UsageProblem(single_line(exc)) from None
    wanted = dict(part.split("=", 1) for part in (selector or "").split(",") if "=" in part)
    chosen = [n for n in nodes if all(n.labels.get(k) == v for k, v in wanted.items())] if wanted else \
        [n for n in nodes if n.gpu_capacity > 0]
    if not chosen:
        click.echo(single_line(f"no node of {len(nodes)} in {node_file} " + (
            f"matches {selector!r}" if wanted else "has nvidia.com/gpu capacity: a run --k8s would need --selector")))
        raise SystemExit(1)
    blocked = 0
    for node in chosen:
        problems = node_problems(node)
        blocked += bool(problems)
        # every part of the line comes from the file: a node name may hold escape sequences
        click.echo(single_line(f"{'NO ' if problems else 'OK '} {node.name} ({node.address}): {node.gpu_allocatable}/"
                               f"{node.gpu_capacity} GPUs allocatable" + (f"; {'; '.join(problems)}" if problems else "")))
    click.echo(f"{len(chosen) - blocked} of {len(chosen)} node(s) ready for GPU jobs")
    raise SystemExit(1 if blocked else 0)
