"""--cordon and --uncordon: preflight's own taint, node condition and labels, from a run's report.

Deciding uses the rule Slurm's drain uses (preflight.core.blame): a node is cordoned only for its own
blocking findings (a failing node check on it, or a confirmed cluster finding whose component is it
or one of its GPUs); a link or boundary cordons no node and is named instead; ERROR, which means
"could not measure", cordons nothing. Uncordoning removes only preflight's taint
(`preflight.dev/not-ready`), never an operator's, and only from nodes this run reached and passed.
Every node checked gets the labels `preflight.dev/verdict` and `preflight.dev/checked-at`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import Any

from preflight.core.model import RunReport
from preflight.integrations.kubernetes.api import (
    CHECKED_LABEL, CONDITION, MERGE, STRATEGIC, TAINT_KEY, VERDICT_LABEL, api_error, label_value,
)
from preflight.core.blame import DEFAULT_BLAST_RADIUS, acting, held, held_text
from preflight.integrations.slurm import node_passes


@dataclass
class NodeAction:
    node: str
    what: str  # "cordon", "uncordon", "label", or "hold" (a link or boundary: no node cordoned, `reason` names it)
    reason: str = ""
    error: str = ""

    def describe(self) -> str:
        if self.error:
            return f"could not {self.what} {self.node}: {self.error}"
        if self.what == "hold":
            return f"not cordoned: {self.reason}"
        done = {"cordon": "cordoned", "uncordon": "uncordoned", "label": "labelled"}[self.what]
        return f"{done} {self.node}" + (f": {self.reason}" if self.reason else "")


def cordon_plan(report: RunReport, radius: float = DEFAULT_BLAST_RADIUS,
                groups: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Node -> (finding id, its sentence) of the first blocking finding that is the node's own, within
    the blast radius (preflight.core.blame.acting: past it, none); the sentence leads with the
    component a cluster finding names."""
    plan = {}
    for node, found in acting(report, radius, groups).nodes.items():
        check_id, finding_id, component = found[0]
        message = next((f.message for r in report.results if r.check_id == check_id
                        for f in r.findings if f.id == finding_id), finding_id)
        plan[node] = (finding_id, f"{component}: {message}" if component else message)
    return plan


def node_verdict(report: RunReport, node: str, blocked: set[str]) -> str:
    if node in blocked:
        return "NO-GO"
    return "GO" if node_passes(report, node) else "UNKNOWN"


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": CONDITION, "status": status, "reason": reason, "message": message[:1000],
            "lastHeartbeatTime": now, "lastTransitionTime": now}


def _set_taint(api: Any, node: str, value: str | None) -> bool:
    """Add (value given) or remove preflight's taint, leaving every other taint as it is."""
    current = api.read_node(node)
    taints = [t for t in (current.spec.taints or []) if t.key != TAINT_KEY]
    had = len(taints) != len(current.spec.taints or [])
    keep = [{"key": t.key, "value": t.value, "effect": t.effect, **({"timeAdded": t.time_added} if t.time_added else {})}
            for t in taints]
    if value is not None:
        keep.append({"key": TAINT_KEY, "value": label_value(value), "effect": "NoSchedule"})
    elif not had:
        return False
    api.patch_node(node, {"metadata": {"resourceVersion": current.metadata.resource_version},
                          "spec": {"taints": keep}}, _content_type=MERGE)
    return True


def apply(api: Any, report: RunReport, cordon: bool, uncordon: bool, radius: float = DEFAULT_BLAST_RADIUS,
          groups: Mapping[str, str] | None = None) -> list[NodeAction]:
    plan = cordon_plan(report, radius, groups)
    actions: list[NodeAction] = [NodeAction(b.component, "hold", held_text(b)) for b in held(report)] if cordon else []
    withheld = acting(report, radius, groups).why
    if cordon and withheld:
        actions.append(NodeAction("", "hold", withheld))
    stamp = str(int(time.time()))
    for node in report.node_names:
        verdict = node_verdict(report, node, set(plan))
        try:
            if cordon and node in plan:
                finding_id, message = plan[node]
                _set_taint(api, node, finding_id)
                api.patch_node_status(node, {"status": {"conditions": [_condition("False", finding_id, message)]}},
                                      _content_type=STRATEGIC)
                actions.append(NodeAction(node, "cordon", finding_id))
            elif uncordon and verdict == "GO":
                if _set_taint(api, node, None):
                    actions.append(NodeAction(node, "uncordon"))
                api.patch_node_status(node, {"status": {"conditions": [
                    _condition("True", "Passed", "preflight found nothing blocking on this node")]}},
                    _content_type=STRATEGIC)
            if cordon or uncordon:
                api.patch_node(node, {"metadata": {"labels": {VERDICT_LABEL: verdict, CHECKED_LABEL: stamp}}}, _content_type=MERGE)
        except Exception as exc:  # noqa: BLE001
            what = "cordon" if cordon and node in plan else ("uncordon" if uncordon else "label")
            actions.append(NodeAction(node, what, error=str(api_error(exc, f"updating node {node}"))))
    return actions
