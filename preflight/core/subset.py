"""The answer a run gives for a job's shape (RunReport.subset, from preflight.core.shape): whether it
offers a GO on some nodes, the sentence every output says it in, and the files it is written to
(a hosts file, a Kubernetes node affinity). Pure; the verdict reads it for its exit code."""

from __future__ import annotations

from preflight.core.nodeset import fold


def is_offered(subset: object) -> bool:
    """True when a run's `subset` offers a GO on some of its nodes (a dict from largest())."""
    return isinstance(subset, dict) and subset.get("offered") is True and bool(subset.get("nodes"))


def is_partial(subset: object) -> bool:
    """A subset that leaves at least one node out (a GO on every node in the shape is a plain GO)."""
    return is_offered(subset) and bool(subset.get("exclude"))  # type: ignore[union-attr]


def sentence(subset: dict) -> str:
    """'GO on 1,016 of 1,024 nodes (shape nodes-multiple-of=4): exclude gpu[0007,0100-0106]', or why
    no subset fits."""
    if not is_offered(subset):
        return f"no GO on a subset in the shape {subset.get('shape', '')}: {subset.get('why_not', '')}"
    kept, total, exclude = len(subset["nodes"]), int(subset.get("total") or 0), subset.get("exclude") or []
    where = f" in group {subset['group']}" if subset.get("group") else ""
    text = f"GO on {kept:,} of {total:,} nodes{where} (shape {subset.get('shape', '')})"
    if exclude:
        text += f": exclude {'this' if len(exclude) == 1 else f'these {len(exclude):,}'}: {fold(exclude)}"
    return text


def hosts_text(subset: dict) -> str:
    """A hosts file of the subset's nodes, one per line."""
    return "".join(f"{name}\n" for name in subset.get("nodes") or [])


def kubernetes_text(subset: dict) -> str:
    """A pod spec's node affinity that keeps the job on the subset's nodes (kubernetes.io/hostname)."""
    import json

    names = subset.get("nodes") or []
    lines = ["affinity:", "  nodeAffinity:", "    requiredDuringSchedulingIgnoredDuringExecution:",
             "      nodeSelectorTerms:", "      - matchExpressions:", "        - key: kubernetes.io/hostname",
             "          operator: In", "          values:"]
    lines += [f"          - {json.dumps(name, allow_nan=False)}" for name in names]
    return "\n".join(lines) + "\n"
