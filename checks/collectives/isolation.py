"""The topology the cross-node checks' adaptive isolation pass is given (preflight.launch.isolation_launch
runs the pass itself, for collectives.cluster and scaling.multi_node alike)."""

from __future__ import annotations

from preflight.run.context import ClusterContext


def topology_of(ctx: ClusterContext) -> dict[str, str] | None:
    """node -> topology group, from a `group` or `rack` key in the nodes' specs; None when none has one."""
    found = {spec["name"]: str(spec.get("group") or spec.get("rack")) for spec in ctx.nodes
             if spec.get("group") or spec.get("rack")}
    return found or None
