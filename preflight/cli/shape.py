"""`run --shape`: the largest healthy subset of the run's nodes in the job's shape (preflight.core.shape),
in the report and written out as a Slurm exclude list, a hosts file and a Kubernetes node affinity."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from preflight.cli.options import UsageProblem

# What `apply` writes beside the reports, when the answer is a GO on a subset of the nodes.
EXCLUDE_FILE = "subset-exclude.txt"  # one line, a folded node set: sbatch --exclude=$(cat subset-exclude.txt)
HOSTS_FILE = "subset-hosts.txt"  # one node per line: preflight run --nodes subset-hosts.txt, mpirun --hostfile
K8S_FILE = "subset-k8s-affinity.yaml"  # a pod spec's nodeAffinity keeping the job on these nodes


def shape_option(f: Callable) -> Callable:
    return click.option(
        "--shape", "shape", multiple=True, metavar="KEY=VALUE",
        help="The job's shape: nodes-multiple-of=N, within=group (one topology group), gpus-per-node=N "
             "(comma-separated or repeatable). When not every node is ready, the reports name the largest healthy "
             "subset that fits it and the nodes to exclude, and the exit code is 4 (never 0).")(f)


def parse(values: tuple[str, ...] | list[str] | None) -> Any:
    """The Shape of `--shape` values, None without one; exit 2 naming --shape and the key."""
    from preflight.core.shape import ShapeError, parse as parse_shape

    try:
        return parse_shape(values or ())
    except ShapeError as exc:
        raise UsageProblem(str(exc)) from None


def groups_of(nodes: list[Any]) -> dict[str, str]:
    """node -> topology group of the run's NodeTargets (preflight.launch.topology); {} when none is known."""
    from preflight.launch.topology import topology_from_specs

    return topology_from_specs([{"name": n.name, **n.topology} for n in nodes]) or {}


def apply(report: Any, shape: Any, nodes: list[Any], out: Path | None) -> None:
    """Answer the shape for this run (RunReport.subset) and, for a GO on a subset, write its node lists
    into `out`. `nodes` are the run's NodeTargets: their topology gives the groups."""
    if shape is None:
        return
    from preflight.core.shape import hosts_text, is_partial, kubernetes_text
    from preflight.run.shape import answer

    answer(report, shape, groups_of(nodes))
    if out is None or not is_partial(report.subset):
        return
    subset = report.subset
    for name, text in ((EXCLUDE_FILE, subset["slurm_exclude"] + "\n"), (HOSTS_FILE, hosts_text(subset)),
                       (K8S_FILE, kubernetes_text(subset))):
        try:
            (Path(out) / name).write_text(text)
        except OSError as exc:
            raise UsageProblem(f"{Path(out) / name}: cannot be written ({exc.strerror or exc})") from None


def step(shape: Any, nodes: list[Any]) -> Callable[[Any, Any], None]:
    """The after-run step (preflight.run.finish) that answers the shape before the reports are written."""
    def answer_shape(report: Any, run: Any) -> None:
        apply(report, shape, nodes, run.out)

    return answer_shape
