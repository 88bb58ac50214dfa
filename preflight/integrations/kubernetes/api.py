"""The API client (the official `kubernetes` package), kubeconfig or in-cluster, and the names and
labels preflight uses on the objects it creates or touches."""

from __future__ import annotations

import os
import re
from typing import Any

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "preflight"
RUN_LABEL = "preflight.dev/run"
NODE_LABEL = "preflight.dev/node"
VERDICT_LABEL = "preflight.dev/verdict"
CHECKED_LABEL = "preflight.dev/checked-at"
TAINT_KEY = "preflight.dev/not-ready"
CONDITION = "PreflightReady"
GPU_RESOURCE = "nvidia.com/gpu"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class KubernetesError(Exception):
    """The API could not be reached or refused; the message says what was asked and why it failed."""


def client_module() -> Any:
    try:
        import kubernetes
    except ImportError as exc:  # pragma: no cover - a dependency of the kubernetes extra
        raise KubernetesError("the `kubernetes` Python package is needed for --k8s "
                              "(pip install 'kubernetes>=29', or pip install -e '.[kubernetes]' in the preflight "
                              "clone)") from exc
    return kubernetes


def core_api(context: str | None = None, kubeconfig: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config inside a pod (unless a kubeconfig is named), else the kubeconfig."""
    k8s = client_module()
    import warnings

    # A kubeconfig with insecure-skip-tls-verify is the user's choice; urllib3's warning about it on
    # every request would bury the bridge's own messages, which travel on stderr.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    try:
        if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST") \
                and os.path.exists(IN_CLUSTER_TOKEN):
            k8s.config.load_incluster_config()
            return k8s.client.CoreV1Api()
        api_client = k8s.config.new_client_from_config(config_file=kubeconfig, context=context)
    except Exception as exc:  # noqa: BLE001 - the config loaders raise several kinds
        raise KubernetesError(f"cannot load the Kubernetes configuration: {exc}") from None
    return k8s.client.CoreV1Api(api_client)


def api_error(exc: Exception, what: str) -> KubernetesError:
    """An ApiException in plain words: the status, the reason and the server's message."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None) or ""
    message = ""
    if body:
        import json

        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = str(body)[:300]
    if status == 403:
        return KubernetesError(f"{what}: forbidden ({message or exc}); "
                               "`preflight k8s manifests` prints the Role and ClusterRole a run needs")
    return KubernetesError(f"{what}: {status or ''} {getattr(exc, 'reason', '') or ''} {message or exc}".strip())


def object_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from the parts (lower case, '-' for anything else), at most `limit` characters."""
    text = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(text) > limit:
        import hashlib

        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        text = text[: limit - 9].rstrip("-") + "-" + digest
    return text


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9-_.], starting and ending alphanumeric."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return value.strip("-_.")


def run_labels(run_id: str, node: str | None = None) -> dict[str, str]:
    labels = {MANAGED_BY: MANAGER, RUN_LABEL: label_value(run_id)}
    if node:
        labels[NODE_LABEL] = label_value(node)
    return labels


def run_selector(run_id: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{RUN_LABEL}={label_value(run_id)}"
