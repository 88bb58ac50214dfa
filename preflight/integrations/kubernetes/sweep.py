"""The end of a run: delete every pod and ConfigMap that carries the run's labels."""

from __future__ import annotations

from typing import Any

from preflight.integrations.kubernetes.api import api_error, run_selector


def delete_run(api: Any, namespace: str, run_id: str) -> int:
    """How many objects were still there; they are deleted (pods without waiting for their grace)."""
    selector = run_selector(run_id)
    try:
        pods = api.list_namespaced_pod(namespace, label_selector=selector).items
        maps = api.list_namespaced_config_map(namespace, label_selector=selector).items
        for pod in pods:
            started = pod.status is not None and pod.status.phase not in (None, "Pending")
            api.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=5 if started else 0)
        if maps:
            api.delete_collection_namespaced_config_map(namespace, label_selector=selector)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"cleaning up run {run_id} in {namespace}") from None
    return len(pods) + len(maps)
