"""`run --shape`: the largest healthy subset of the run's nodes in the job's shape (preflight.core.shape),
with which blocking findings are a node's own read from preflight.core.blame as drain and cordon read
it; in the report and, for a GO on a subset, written out as a Slurm exclude list, a hosts file and a
Kubernetes node affinity (`apply`, the after-run step "shape" of preflight.run.finish); answered again
when a recorded run is re-judged."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from preflight.core.model import RunReport
from preflight.run.request import RunProblem

# What `apply` writes beside the reports, when the answer is a GO on a subset of the nodes.
EXCLUDE_FILE = "subset-exclude.txt"  # one line, a folded node set: sbatch --exclude=$(cat subset-exclude.txt)
HOSTS_FILE = "subset-hosts.txt"  # one node per line: preflight run --nodes subset-hosts.txt, mpirun --hostfile
K8S_FILE = "subset-k8s-affinity.yaml"  # a pod spec's nodeAffinity keeping the job on these nodes


def answer(report: RunReport, shape: Any, groups: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Set and return report.subset: the largest healthy subset of the run's nodes in `shape`."""
    from preflight.core.blame import own_findings
    from preflight.core.shape import subset_for

    report.subset = subset_for(report, shape, own_findings(report), groups)
    return report.subset


def answer_again(report: RunReport) -> None:
    """After re-judging: the same shape answered from the new results (a stale answer is never kept)."""
    if not isinstance(report.subset, dict):
        return
    from preflight.core.shape import ShapeError, parse

    try:
        shape = parse([str(report.subset.get("shape") or "")])
    except ShapeError:
        shape = None
    if shape is None:
        report.subset = None
        return
    answer(report, shape, report.subset.get("groups") or None)


def groups_of(nodes: list[Any]) -> dict[str, str]:
    """Node -> topology group of the run's NodeTargets (preflight.launch.topology); {} when none is known."""
    from preflight.launch.topology import topology_from_specs

    return topology_from_specs([{"name": n.name, **n.topology} for n in nodes]) or {}


def clear(out: Path | None) -> None:
    """Remove the node lists an earlier run left in `out` (RunProblem, exit 2, when one cannot go)."""
    for name in (EXCLUDE_FILE, HOSTS_FILE, K8S_FILE) if out is not None else ():
        path = Path(out) / name
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
        except OSError as exc:
            raise RunProblem(f"{path}: an earlier run's subset that cannot be removed ({exc.strerror or exc})") \
                from None


def apply(report: RunReport, shape: Any, nodes: list[Any], out: Path | None) -> None:
    """Answer the shape for this run (RunReport.subset) and, for a GO on a subset, write its node lists
    into `out` (RunProblem, exit 2, naming a file that cannot be written). `nodes` are the run's
    NodeTargets: their topology gives the groups. An earlier run's node lists are removed first,
    whatever this one asks: a subset that is not this run's answer is never left beside its reports."""
    clear(out)
    if shape is None:
        return
    from preflight.core.subset import hosts_text, is_partial, kubernetes_text

    answer(report, shape, groups_of(nodes))
    if out is None or not is_partial(report.subset):
        return
    subset = report.subset
    for name, text in ((EXCLUDE_FILE, subset["slurm_exclude"] + "\n"), (HOSTS_FILE, hosts_text(subset)),
                       (K8S_FILE, kubernetes_text(subset))):
        try:
            (Path(out) / name).write_text(text)
        except OSError as exc:
            raise RunProblem(f"{Path(out) / name}: cannot be written ({exc.strerror or exc})") from None


def plan_defaults(config: Any, checks: Mapping[str, Any]) -> dict[str, int]:
    """The shape keys the job's plan gives (Check.shape_defaults: [job] nodes and gpus_per_node), for
    the keys `--shape` leaves out."""
    found: dict[str, int] = {}
    for check in checks.values():
        for key, name in getattr(check, "shape_defaults", {}).items():
            value = (config.params.get(check.id) or {}).get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                found.setdefault(key, value)
    return found


def with_plan(values: tuple[str, ...], shape: Any, config: Any, checks: Mapping[str, Any]) -> Any:
    """`--shape` with the keys it leaves out filled from the job's plan (plan_defaults); RunProblem
    (exit 2, before anything runs) naming the key when a plan's value cannot be a shape's."""
    from preflight.core.shape import ShapeError, parse

    defaults = plan_defaults(config, checks)
    if shape is None or not defaults:
        return shape
    try:
        return parse(values, defaults=defaults)
    except ShapeError as exc:
        raise RunProblem(str(exc)) from None
