"""Where each node sits in the network: node -> topology group (a rack, a leaf switch), for the
adaptive isolation pass (preflight.launch.isolation), whose groups follow it and whose
cross-boundary probes find trunk faults.

The facts travel in each node's spec (`ClusterContext.nodes`), put there when the run's nodes are
found (preflight.engine.runner.NodeTarget.topology; the sources are read in preflight.integrations.topology).
Three sources, in this order:

1. the hosts file's `group=NAME` or `rack=NAME` column: spec key `group` (or `rack`);
2. Slurm, for a run in an allocation: the leaf switch of each node (the Level=0 switch of the
   topology/tree plugin) or its block (topology/block), from `scontrol show topology`: spec key
   `switch`;
3. Kubernetes node labels that name a network locality (TOPOLOGY_LABELS): spec key
   `topology_labels`.

The first source that names any node is used for every node (names from two sources are not
comparable); a node it does not name is left out, and isolate() puts it in a group of its own
kind. None when no source names any node. A cluster without a topology plugin (scontrol prints
nothing, or an error) simply has no Slurm topology: that is not a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from preflight.integrations.topology import LABELS_KEY, SWITCH_KEY, TOPOLOGY_LABELS


def topology_of(ctx: Any) -> dict[str, str] | None:
    """node -> topology group for the nodes of `ctx` (a ClusterContext); None when nothing is known."""
    return topology_from_specs(ctx.nodes)


def topology_from_specs(specs: Iterable[Mapping[str, Any]]) -> dict[str, str] | None:
    """node -> topology group from node specs, by the first source that names any node (see the
    module's docstring); None when none does."""
    specs = list(specs)
    found = {str(s["name"]): str(s.get("group") or s.get("rack")) for s in specs if s.get("group") or s.get("rack")}
    if found:
        return found
    found = {str(s["name"]): str(s[SWITCH_KEY]) for s in specs if s.get(SWITCH_KEY)}
    if found:
        return found
    for label in TOPOLOGY_LABELS:
        found = {str(s["name"]): str(s[LABELS_KEY][label]) for s in specs
                 if isinstance(s.get(LABELS_KEY), Mapping) and s[LABELS_KEY].get(label)}
        if found:
            return found
    return None
