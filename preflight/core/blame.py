"""Which blocking finding is whose: the one rule Slurm's --drain, Kubernetes' --cordon and the
healthcheck's exit code act on. Pure.

A finding is a node's own when it blocks (FAIL, or WARN with fail_on = "warn"), its result is not an
ERROR (could not measure), and:
- it is a node check's finding on that node, or
- it is a cluster check's finding whose component (preflight.core.model.Component) is that node or
  one of its GPUs, confirmed; a cluster finding of an older results file without a component counts
  for the node its `node` field names;
and it is not silenced (preflight.core.verdict.is_silenced, the rule the verdict reads): what the GO
says was accepted is never drained, cordoned, left out of a subset or the healthcheck's exit 1.
A component that is a link (two nodes: neither end is at fault alone), a boundary (two topology
groups: no node is at fault) or a shared cause (several components confirmed at once under one
topology group, or links with one common end: one cause, not many faults) is nobody's own: `held`
lists those, so that the actions can name them (the link, the trunk, the group) and act on no node.
A suspect (component.confirmed False) is nobody's either.
Nothing here reads a message.

What is acted on (`acting`) is those nodes, within a blast radius: one run takes capacity away from
at most `share` of its nodes (DEFAULT_BLAST_RADIUS, 2%; at least one node) and from at most half of
one topology group. Past either, nothing is acted on, and the reason names every node that would
have been: many nodes at fault at once, or most of one switch, is likelier one shared cause (the
fabric, a switch, the check's own floor) than many faults, and draining them all is the outage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from preflight.core.nodeset import fold
from preflight.core.model import (
    COMPONENT_BOUNDARY, COMPONENT_GROUP, COMPONENT_LINK, CheckResult, Finding, RunReport, Scope, Status,
)

NOBODYS = (COMPONENT_LINK, COMPONENT_BOUNDARY, COMPONENT_GROUP)  # components no node is acted on for


class Blame(NamedTuple):
    check_id: str
    finding_id: str
    component: str = ""  # "node n5", "GPU 3 of n5", "link n2 - n6", "boundary rack1 - rack2"; "" for a node check's


def blocking_levels(fail_on: str) -> set[Status]:
    return {Status.FAIL, Status.WARN} if fail_on == "warn" else {Status.FAIL}


def _whose(result: CheckResult, finding: Finding, nodes: set[str]) -> str | None:
    """The node a blocking finding is the own of, or None (a link, a boundary, a suspect, no node)."""
    component = finding.component
    if component is not None:
        if not component.confirmed or component.kind in NOBODYS:
            return None
        node = component.nodes[0] if component.nodes else None
        if result.scope is Scope.NODE and node is None:
            node = result.node
        return node if node in nodes else None
    if result.scope is Scope.NODE:
        return result.node if result.node in nodes else None
    return finding.node if finding.node in nodes else None


def _blocking(result: CheckResult, levels: set[Status], silences: dict[str, dict[str, str]]) -> list[Finding]:
    """The findings of a result that block and are not silenced; for a result that blocks while stating no
    finding of a blocking level, the one that stands for it (preflight.core.findings), unless silenced."""
    from preflight.core.findings import findings_of
    from preflight.core.verdict import is_silenced

    stated = [f for f in result.findings if f.level in levels]
    return [f for f in (stated or findings_of(result)) if f.level in levels and not is_silenced(f, silences)]


def blames(report: RunReport) -> dict[str, list[Blame]]:
    """Node -> its own blocking findings, each with the component it names."""
    from preflight.core.verdict import active_silences

    levels = blocking_levels(report.fail_on)
    nodes = set(report.node_names)
    silences = active_silences(report)[0]
    found: dict[str, list[Blame]] = {}
    for result in report.results:
        if result.status not in levels:
            continue
        stated = any(f.level in levels for f in result.findings)
        blocking = _blocking(result, levels, silences)
        if result.scope is Scope.NODE and not stated and blocking and result.node in nodes:
            found.setdefault(result.node, []).append(Blame(result.check_id, result.check_id))
            continue
        for finding in blocking:
            node = _whose(result, finding, nodes)
            if node is not None:
                text = finding.component.text if finding.component is not None else ""
                found.setdefault(node, []).append(Blame(result.check_id, finding.id, text))
    return found


DEFAULT_BLAST_RADIUS = 0.02  # the share of a run's nodes one run may drain or cordon (at least one node)
GROUP_RADIUS = 0.5  # and never more than this share of one topology group


class Acting(NamedTuple):
    """What the actions take capacity away from: `nodes` (node -> its own blocking findings); past the
    blast radius none, `withheld` what would have been, and `why` says so, naming them."""

    nodes: dict[str, list[Blame]]
    withheld: dict[str, list[Blame]]
    why: str = ""


def acting(report: RunReport, radius: float = DEFAULT_BLAST_RADIUS,
           groups: Mapping[str, str] | None = None) -> Acting:
    """The nodes drain and cordon act on: blames(report), when they fit the blast radius (`radius` of
    the run's nodes, at least one; at most half of one topology group of `groups`, node -> group);
    else none, with why."""
    found = blames(report)
    why = past_radius(list(found), report.node_names, radius, groups)
    if not why:
        return Acting(found, {})
    return Acting({}, found, f"{why}: nothing is acted on; a cause they share (the fabric, a switch, a setting) is "
                  f"likelier than {len(found)} faults at once ([run] blast_radius or --blast-radius sets the "
                  f"limit). Would have been: {fold(sorted(found))}")


def confirmed_nodes(report: RunReport) -> set[str]:
    """Nodes a cluster check confirmed at fault: a blocking finding whose component is that node (or a
    GPU of it), confirmed."""
    return {node for node, found in blames(report).items()
            for b in found if b.component.startswith(("node ", "GPU "))}


def explained_by(report: RunReport, finding: Finding, confirmed: set[str] | None = None) -> list[str]:
    """The confirmed nodes that explain a blocking cluster finding pinned on no node (one check's cause
    is the cause the others point to): a finding without a component (an all-node shortfall, a pass
    whose evidence named no one component) or one naming a link with a confirmed end. None for a
    boundary, a shared cause, or when no node is confirmed."""
    confirmed = confirmed_nodes(report) if confirmed is None else confirmed
    component = finding.component
    if not confirmed or (component is not None and component.kind != COMPONENT_LINK):
        return []
    if component is None:
        return sorted(confirmed)
    return sorted(set(component.nodes) & confirmed)


def past_radius(acted: list[str], nodes: list[str], radius: float = DEFAULT_BLAST_RADIUS,
                groups: Mapping[str, str] | None = None) -> str:
    """Why acting on `acted` of a run's `nodes` is past the blast radius, or "" when it is not."""
    limit = max(1, math.floor(radius * len(nodes) + 1e-9))
    if len(acted) > limit:
        return (f"{len(acted)} nodes would be drained or cordoned, more than the blast radius of {limit} "
                f"({radius:.0%} of {len(nodes)} nodes, at least 1)")
    for group in sorted({groups[n] for n in acted if n in groups} if groups else ()):
        size = sum(1 for n in nodes if groups.get(n) == group)
        mine = [n for n in acted if groups.get(n) == group]
        if len(mine) > max(1, math.floor(GROUP_RADIUS * size)):
            return f"{len(mine)} of the {size} nodes of topology group {group} would be drained or cordoned, more than half of it"
    return ""


def own_findings(report: RunReport) -> dict[str, list[tuple[str, str]]]:
    """Node -> [(check id, finding id)] of the blocking findings that are that node's own."""
    return {node: [(b.check_id, b.finding_id) for b in found] for node, found in blames(report).items()}


def held(report: RunReport) -> list[Blame]:
    """Blocking, confirmed findings that name a link or a boundary: no node is drained for them, and
    each is named (also where its check ended in ERROR for another reason: a link not measured)."""
    from preflight.core.verdict import active_silences, is_silenced

    levels = blocking_levels(report.fail_on)
    silences = active_silences(report)[0]
    out = []
    for result in report.results:
        for finding in result.findings:
            component = finding.component
            if finding.level in levels and component is not None and component.confirmed \
                    and not is_silenced(finding, silences) \
                    and component.kind in NOBODYS:
                out.append(Blame(result.check_id, finding.id, component.text))
    return out


def held_text(blame: Blame) -> str:
    """Why nothing is drained for a link or boundary finding, naming it."""
    if blame.component.startswith("shared cause"):
        return (f"{blame.component} ({blame.finding_id}): several components confirmed at once share this one "
                "cause: no node is acted on for it")
    if blame.component.startswith("boundary"):
        return (f"{blame.component} ({blame.finding_id}): the trunk or uplink between those topology groups; "
                "no node is at fault: none is acted on")
    return f"{blame.component} ({blame.finding_id}): neither end is at fault alone: neither is acted on"
