"""Which nodes a Kubernetes run checks: Node objects from the API (or a saved `kubectl get nodes -o
json|yaml`), with their GPUs, labels and taints, and what keeps a GPU node from taking a GPU job."""

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
    unschedulable: bool = False  # cordoned (`kubectl cordon`, spec.unschedulable)


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
        ready=ready, labels=dict(node.metadata.labels or {}), taints=taints,
        unschedulable=bool(getattr(node.spec, "unschedulable", False)))


class NodeDocumentError(ValueError):
    """A saved node listing that cannot be read; the message names the file and what is wrong."""


MAX_NODE_FILE_BYTES = 1024 * 1024 * 1024  # `kubectl get nodes -o json` of 20,000 nodes is about 300 MiB
MAX_NODE_YAML_CHARS = 256 * 1024 * 1024  # YAML costs ten times JSON's memory and time: -o json beyond this


def _node_dicts(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        return []
    if doc.get("kind") == "Node":
        return [doc]
    if isinstance(doc.get("items"), list):  # kubectl's List; the API's NodeList, whose items carry no kind
        found: list[dict[str, Any]] = []
        for item in doc["items"]:
            if isinstance(item, dict) and "kind" not in item and "metadata" in item:
                found.append(item)
            else:
                found += _node_dicts(item)  # as deep as the reader allows (preflight.core.bounded.MAX_DEPTH)
        return found
    return []


class _Typed:
    """Fields of one Node document, each of the type the API gives it; NodeDocumentError naming the
    node and the field otherwise (a wrongly typed taint list must not read as no taints)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def get(self, body: dict[str, Any], key: str, kind: type, path: str) -> Any:
        value = body.get(key)
        if value is None:
            return kind()
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise NodeDocumentError(f"{self.where}: {path}{key} is {type(value).__name__}, not {kind.__name__}")
        return value

    def items(self, body: dict[str, Any], key: str, path: str) -> list[dict[str, Any]]:
        values = self.get(body, key, list, path)
        if not all(isinstance(v, dict) for v in values):
            raise NodeDocumentError(f"{self.where}: {path}{key} holds an item that is not a mapping")
        return values


def from_node_document(doc: dict[str, Any], where: str = "node") -> KubeNode:
    """One Node as `kubectl get node -o json|yaml` writes it (the API's JSON form of the object);
    NodeDocumentError naming `where` and the field when a field is of another type."""
    typed = _Typed(where)
    meta, spec = typed.get(doc, "metadata", dict, ""), typed.get(doc, "spec", dict, "")
    status = typed.get(doc, "status", dict, "")
    name = typed.get(meta, "name", str, "metadata.")
    if not name:
        raise NodeDocumentError(f"{where}: a Node without metadata.name")
    typed.where = f"{where}: node {name!r}"
    # An address whose type is not a string (damaged or hand-edited) names no kind of address: ignored.
    addresses = {a.get("type"): a.get("address") for a in typed.items(status, "addresses", "status.")
                 if isinstance(a.get("type"), str)}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in typed.items(status, "conditions", "status."))
    taints = [{"key": str(t.get("key") or ""), "value": str(t.get("value") or ""), "effect": str(t.get("effect") or "")}
              for t in typed.items(spec, "taints", "spec.")]
    address = addresses.get("InternalIP") or addresses.get("Hostname") or name
    return KubeNode(
        name=name, address=address if isinstance(address, str) else name,
        gpu_capacity=_quantity(typed.get(status, "capacity", dict, "status.").get(GPU_RESOURCE)),
        gpu_allocatable=_quantity(typed.get(status, "allocatable", dict, "status.").get(GPU_RESOURCE)),
        ready=ready, labels={str(k): str(v) for k, v in typed.get(meta, "labels", dict, "metadata.").items()},
        taints=taints, unschedulable=typed.get(spec, "unschedulable", bool, "spec."))


def nodes_from_text(text: str, where: str) -> list[KubeNode]:
    """The nodes of a saved `kubectl get nodes -o json` or `-o yaml` (a List, one Node, several YAML
    documents); NodeDocumentError naming `where` when it holds none. JSON is read as JSON (the json
    module, seconds for 20,000 nodes), YAML with libyaml; both within preflight.core.bounded's limits."""
    from preflight.core.bounded import InputError, load_json_or_yaml

    if len(text) > MAX_NODE_YAML_CHARS and text.lstrip()[:1] not in ("{", "["):
        raise NodeDocumentError(f"{where}: {len(text):,} characters of YAML, over {MAX_NODE_YAML_CHARS:,}: save the "
                                "listing with `kubectl get nodes -o json`, which is read faster")
    try:
        docs = load_json_or_yaml(text, where)
    except InputError as exc:
        raise NodeDocumentError(str(exc)) from None
    found = [from_node_document(d, where) for doc in docs for d in _node_dicts(doc)]
    if not found:
        raise NodeDocumentError(f"{where}: no Node objects (save them with `kubectl get nodes -o json > FILE`)")
    return sorted(found, key=lambda n: n.name)


def read_node_file(path: str) -> list[KubeNode]:
    """The nodes of a saved node listing, read within MAX_NODE_FILE_BYTES; NodeDocumentError naming the file."""
    from preflight.core.bounded import InputError, read_text

    try:
        text = read_text(path, MAX_NODE_FILE_BYTES)
    except InputError as exc:
        raise NodeDocumentError(str(exc)) from None
    return nodes_from_text(text, path)


def node_problems(node: KubeNode) -> list[str]:
    """Why a GPU node cannot take (all of) a GPU job now, in words; [] when nothing keeps it."""
    problems = []
    if not node.ready:
        problems.append("not Ready")
    if node.unschedulable:
        problems.append("cordoned (unschedulable)")
    hard = [t for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute")]
    if hard:
        problems.append("tainted " + ", ".join(f"{t['key']}:{t['effect']}" for t in hard))
    if node.gpu_allocatable < node.gpu_capacity:
        problems.append(f"offers {node.gpu_allocatable} of its {node.gpu_capacity} GPUs ({GPU_RESOURCE} allocatable "
                        "below capacity: a GPU the device plugin marked unhealthy)")
    return problems


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
