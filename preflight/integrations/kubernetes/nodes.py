"""Which nodes a Kubernetes run checks: Node objects from the API, with their GPUs, labels and taints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preflight.integrations.kubernetes.api import GPU_RESOURCE, KubernetesError, api_error


@dataclass
class KubeNode:
    name: str
    address: str
    gpu_capacity: int = 0
    gpu_allocatable: int = 0
    ready: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


def _quantity(value: Any) -> int:
    try:
        return int(str(value or 0))
    except ValueError:
        return 0


def from_node(node: Any) -> KubeNode:
    status = node.status
    addresses = {a.type: a.address for a in (status.addresses or [])} if status else {}
    ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or [])) if status else False
    taints = [{"key": t.key, "value": t.value or "", "effect": t.effect} for t in (node.spec.taints or [])]
    return KubeNode(
        name=node.metadata.name,
        address=addresses.get("InternalIP") or addresses.get("Hostname") or node.metadata.name,
        gpu_capacity=_quantity((status.capacity or {}).get(GPU_RESOURCE)) if status else 0,
        gpu_allocatable=_quantity((status.allocatable or {}).get(GPU_RESOURCE)) if status else 0,
        ready=ready, labels=dict(node.metadata.labels or {}), taints=taints)


def discover(api: Any, selector: str | None = None) -> list[KubeNode]:
    """The nodes to check: those matching `selector`, else every node with nvidia.com/gpu capacity.

    A node that is not Ready is kept: its pod will not start, and the run says so for that node
    rather than leaving it out of the verdict.
    """
    try:
        items = api.list_node(label_selector=selector or "").items
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "listing nodes") from None
    nodes = sorted((from_node(n) for n in items), key=lambda n: n.name)
    if selector:
        if not nodes:
            raise KubernetesError(f"no node matches --selector {selector!r}")
        return nodes
    gpu_nodes = [n for n in nodes if n.gpu_capacity > 0]
    if not gpu_nodes:
        raise KubernetesError(f"no node has {GPU_RESOURCE} capacity ({len(nodes)} nodes listed); "
                              "choose the nodes to check with --selector (e.g. --selector node-role=train)")
    return gpu_nodes
