"""The cluster at a glance: nodes, GPUs, software, when; read from the facts the checks recorded.

No check is named here: any check whose facts carry a GPU inventory (`nvml.gpus`, `gpus`, or
`torch.devices`, each a list of objects with a `name`) or a software stack (`stack`) contributes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from preflight.core.levels import level_text
from preflight.core.findings import node_label
from preflight.core.model import CheckResult, RunReport
from preflight.core.nodeset import fold
from preflight.reporters.numbers import duration
from preflight.reporters.origins import thresholds_text


def run_duration(start: str, end: str) -> str:
    try:
        seconds = (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return ""
    if seconds < 0:
        return ""  # clocks that disagree say nothing worth printing
    return duration(seconds)


def when(timestamp: str) -> str:
    """'2026-11-29 10:00:00 UTC' from an ISO 8601 time; the text as it is when it does not parse."""
    try:
        moment = dt.datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return timestamp
    if moment.tzinfo is not None and moment.utcoffset() == dt.timedelta(0):
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.replace(microsecond=0).isoformat(sep=" ")


def gpu_names(result: CheckResult) -> list[str] | None:
    """The GPU models a result's facts list; None when its facts hold no GPU inventory at all."""
    facts = result.facts or {}
    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), dict) else None
    listed = (nvml or {}).get("gpus") or facts.get("gpus")
    torch = facts.get("torch") if isinstance(facts.get("torch"), dict) else {}
    if not listed and isinstance((torch or {}).get("devices"), list):
        listed = torch["devices"]
    if isinstance(listed, list) and listed and all(isinstance(g, dict) and "name" in g for g in listed):
        return [g.get("name") or "unknown GPU" for g in listed]
    return [] if nvml is not None else None


def stack_text(stack: dict[str, Any]) -> tuple[str, str]:
    """(frameworks, other software) from a recorded software stack."""
    frameworks = []
    if stack.get("torch"):
        extras = [f"{label} {stack[key]}" for key, label in (("torch_cuda", "CUDA"), ("cudnn", "cuDNN"),
                                                             ("nccl", "NCCL")) if stack.get(key)]
        frameworks.append(f"torch {stack['torch']}" + (f" ({', '.join(extras)})" if extras else ""))
    if stack.get("tensorflow"):
        built = f" (CUDA {stack['tensorflow_cuda']})" if stack.get("tensorflow_cuda") else ""
        frameworks.append(f"tensorflow {stack['tensorflow']}{built}")
    if stack.get("jax"):
        frameworks.append(f"jax {stack['jax']}")
    software = [f"{label} {stack[key]}" for key, label in (("python", "Python"), ("numpy", "numpy"),
                                                           ("driver", "NVIDIA driver")) if stack.get(key)]
    software += [str(stack[key]) for key in ("os",) if stack.get(key)]
    software += [f"kernel {stack['kernel']}"] if stack.get("kernel") else []
    return ", ".join(frameworks), ", ".join(software)


def _framework_versions(report: RunReport) -> dict[str, str]:
    """Framework versions the checks happened to record, for runs where none recorded a stack."""
    found: dict[str, str] = {}
    for result in report.results:
        facts = result.facts or {}
        named = facts.get("frameworks") if isinstance(facts.get("frameworks"), dict) else {}
        for name in ("torch", "tensorflow"):
            version = facts.get(f"{name}_version") or (named or {}).get(name)
            if isinstance(version, str) and version and name not in found:
                found[name] = version
    return found


def at_a_glance(report: RunReport) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = [_nodes_row(report), *_gpu_rows(report), *_software_rows(report)]
    thresholds = thresholds_text(report)  # the profile, and what was set over it by origin
    if thresholds:
        rows.append(("Thresholds", thresholds))
    rows.append(("Level", level_text(report)))
    took = run_duration(report.started_at, report.finished_at)
    rows.append(("When", when(report.started_at) + (f", took {took}" if took else "")))
    if report.config_path:
        rows.append(("Config", report.config_path))
    changed = (report.judged_with or {}).get("working_directory") or []
    if changed:  # what ./preflight.toml, read by default, changed: code it runs, history, silences, thresholds
        rows.append(("Config changes", "; ".join(str(line) for line in changed)))
    return rows


def _nodes_row(report: RunReport) -> tuple[str, str]:
    """The Nodes row: how many, their names folded, and those unreachable."""
    nodes = report.node_names
    text = f"{len(nodes)}: {fold(nodes)}"
    lost: dict[str, list[str]] = {}
    for n in report.nodes:
        if n.reachable is False:
            lost.setdefault(node_label(n.error), []).append(n.name)
    if lost:
        text += " (" + "; ".join(f"{len(names)} {label}: {fold(names)}" for label, names in lost.items()) + ")"
    return "Nodes", text


def _gpu_rows(report: RunReport) -> list[tuple[str, str]]:
    """The GPUs row: the models and how many per node; none when no result holds a GPU inventory."""
    per_node: dict[str, list[str]] = {}
    for result in report.results:
        names = gpu_names(result)
        if names is not None and (result.node not in per_node or (names and not per_node[result.node])):
            per_node[result.node] = names
    models: dict[str, int] = {}
    for names in per_node.values():
        for name in names:
            models[name] = models.get(name, 0) + 1
    if not models:
        return [("GPUs", "none found")] if per_node else []
    text = ", ".join(f"{n} x {name}" for name, n in sorted(models.items()))
    counts = {len(names) for names in per_node.values()}
    if len(per_node) > 1 and len(counts) == 1:
        text += f" ({counts.pop()} per node)"
    elif len(per_node) > 1:
        by_count: dict[int, list[str]] = {}
        for node, names in per_node.items():
            by_count.setdefault(len(names), []).append(node)
        text += " (" + ", ".join(f"{n} on {fold(on)}" for n, on in sorted(by_count.items(), reverse=True)) + ")"
    return [("GPUs", text)]


def _software_rows(report: RunReport) -> list[tuple[str, str]]:
    """The Frameworks and Software rows, from the first recorded stack, else the versions checks noted."""
    stacks: dict[str, dict[str, Any]] = {}
    for result in report.results:
        if isinstance((result.facts or {}).get("stack"), dict):
            stacks.setdefault(result.node, result.facts["stack"])
    if not stacks:
        found = _framework_versions(report)
        return [("Frameworks", ", ".join(f"{name} {version}" for name, version in found.items()))] if found else []
    rows = []
    texts = {node: stack_text(stack) for node, stack in stacks.items()}
    frameworks, software = next(iter(texts.values()))
    if frameworks:
        differs = len(set(texts.values())) > 1
        rows.append(("Frameworks", frameworks + (" (differs across nodes)" if differs else "")))
    if software:
        rows.append(("Software", software))
    return rows
