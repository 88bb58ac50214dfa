"""What an adaptive isolation pass found (the facts of preflight.launch.isolation_launch or of
net.bandwidth's pass), as findings: the one translator collectives.cluster, scaling.multi_node and
net.bandwidth use. Pure.

`isolation_findings(check, facts, level)` gives the findings, each with the component it names
(preflight.core.model.Component), and the detail lines (every round, the pass's notes, how each
blame was confirmed). The kinds become finding ids under the id of the check that ran the pass, and
each such check declares a fix for every kind in ISOLATION_KINDS:
- `isolated-node`: a node at fault, confirmed (bad in N of M measurements with different known-good
  partners: preflight.launch.isolation_plan.confirm);
- `isolated-link`: the link between two nodes (bad together, confirmed, each good with others);
- `isolated-boundary`: the path between two topology groups (a trunk, an uplink);
- `straggler`: a node far slower than its groups' median, in most of several observations;
- `suspect`: a node, link or boundary seen bad, but not as often as blaming asks: a WARN, never acted on;
- `isolation-ambiguous`: what the evidence narrowed it down to, and what it could be;
- `isolation-not-reproduced`: nothing was singled out (no group reproduced the fault);
- `shared-cause`: several components confirmed at once that share one cause (most nodes under one
  topology group, links with one common end): reported as one, never acted on node by node; or the
  fleet (a WARN): components bad as often as blaming asks, none standing out from the other groups.
A confirmed component gets `level` (the level of what made the run bad); the others WARN at most.
"""

from __future__ import annotations

from typing import Any

from preflight.core.model import (
    COMPONENT_BOUNDARY, COMPONENT_GPU, COMPONENT_GROUP, COMPONENT_LINK, COMPONENT_NODE, Component, Finding, Status,
)
from preflight.launch.nodes import names_text

ISOLATION_KINDS = ("isolated-node", "isolated-link", "isolated-boundary", "straggler", "suspect",
                   "isolation-ambiguous", "isolation-not-reproduced", "shared-cause")

SHARED_CAUSE_FIX = ("Several components were confirmed at once under one topology group, or as links with one common "
                    "end: one cause, not many faults, so no node is acted on for it. Check that switch (its uplinks, "
                    "error and congestion counters, other jobs' traffic through it) or that node's NIC, then run "
                    "the check again on those nodes (--nodes).")


def suspect_fix(check_id: str, pass_time: str) -> str:
    """The fix of a check's `suspect` finding; `pass_time`: the check's option for its pass's time limit."""
    return ("Seen bad, but not as often or with as many partners as blaming takes: nothing is acted on. Run the check "
            "again on the nodes named (--nodes); a suspect that is bad again is confirmed then. When the pass stopped "
            f"at its time limit before measuring it again later, give it more time: {pass_time} and timeout in "
            f'[checks."{check_id}"] of preflight.toml.')


NOT_REPRODUCED = ("no group of nodes reproduced the fault on its own: it appears only with all nodes together "
                  "(congestion, an oversubscribed uplink, the size of the job), or it was transient")


def isolation_findings(check: Any, facts: dict[str, Any] | None, level: Status, *, floor: str = "",
                       not_reproduced: str = NOT_REPRODUCED) -> tuple[list[Finding], list[str]]:
    """(findings, detail lines) of an isolation pass's facts; none without facts. `check`: the check
    class (its `finding` builds ids and fixes); `floor`: what its groups were judged against."""
    if not facts:
        return [], []
    result = facts.get("isolation") or {}
    rounds = result.get("round_count", 0)
    prefix = (f"adaptive isolation ({facts.get('reason')}; {rounds} round{'' if rounds == 1 else 's'}"
              + (f" against {floor}" if floor else "") + ")")
    soft = Status.WARN if level.severity >= Status.WARN.severity else level
    findings, confirmed = [], []
    for found in result.get("attributions", []):
        kind, text, component = describe(found)
        sure = kind not in ("suspect", "isolation-ambiguous") and found.get("confidence", "confirmed") == "confirmed"
        # A straggler confirmed in a run that met its floors is slow but passing: a WARN, never a PASS.
        at = (level if level.severity >= Status.WARN.severity else Status.WARN) if kind == "straggler" \
            else level if sure else soft
        findings.append(_with(check.finding(kind, at, f"{prefix}: {text}"), component))
        if component is not None and found.get("confirmation"):
            confirmed.append(confirmation_line(component, found["confirmation"]))
    if not findings:
        text = not_reproduced
        if result.get("stopped"):
            text = f"stopped ({result['stopped']}) before anything was singled out"
        findings.append(check.finding("isolation-not-reproduced", soft, f"{prefix}: {text}"))
    return findings, round_lines(result) + list(result.get("notes", [])) + confirmed


def _with(finding: Finding, component: Component | None) -> Finding:
    """The finding with its component; one that names a node (or a GPU of one) is on that node, so every
    report lists it there and not "across the cluster". A link or a boundary is on no one node."""
    finding.component = component
    if component is not None and component.kind in (COMPONENT_NODE, COMPONENT_GPU) and component.nodes:
        finding.node = component.nodes[0]
    return finding


def describe(found: dict[str, Any]) -> tuple[str, str, Component | None]:
    """An attribution's finding kind, sentence and component."""
    kind, members, figures = found["kind"], found["members"], found.get("figures") or {}
    sure = found.get("confidence", "confirmed") == "confirmed"
    how = found.get("confirmation") or {}
    if kind == "group" and figures.get("shared_by") == "fleet":
        parts = figures.get("components") or []
        return "shared-cause", (f"the whole fleet reads near or below its floor, no component stands out: "
                                f"{len(parts)} components read bad as often as blaming asks, none of them far "
                                "from the other groups (judged by the all-node readings; nothing is acted on)"), \
            Component(COMPONENT_GROUP, confirmed=False, confirmation=how)
    if kind == "group" and not sure and not found.get("ambiguous"):
        listed = ", ".join(" - ".join(c["members"]) for c in figures.get("components") or [])
        return "shared-cause", (f"topology group {members[0]} is slow, not one node of it: {listed} read bad to the "
                                "end, but no worse than another node under the same group read at the same time (a "
                                "neighbour's traffic, the group's uplink); named as one cause, nothing is acted on"), \
            Component(COMPONENT_GROUP, groups=list(members), confirmed=False, confirmation=how)
    if kind == "group" and not found.get("ambiguous"):
        parts = figures.get("components") or []
        by_node = figures.get("shared_by") == "node"
        component = Component(COMPONENT_GROUP, list(members) if by_node else [], groups=[] if by_node else list(members),
                              confirmation=how)
        listed = "; ".join(f"{c['kind']} {' - '.join(c['members'])}" for c in parts)
        return "shared-cause", (f"{len(parts)} components were confirmed at once with one cause in common, "
                                f"{'node' if by_node else 'topology group'} {members[0]} ({listed}): named as one "
                                "shared cause, not acted on node by node"), component
    if found.get("ambiguous") or kind not in ("node", "link", "boundary", "straggler"):
        could = "; ".join(f"{c['kind']} {' - '.join(c['members'])}" for c in found.get("candidates", []))
        return "isolation-ambiguous", (f"the fault is among {names_text(members)}, but the evidence does not single "
                                       "out one component" + (f" (it could be: {could})" if could else "")), None
    if kind == "boundary":
        component = Component(COMPONENT_BOUNDARY, groups=list(members), confirmed=sure, confirmation=how)
    else:
        component = Component(COMPONENT_LINK if kind == "link" else COMPONENT_NODE, list(members), confirmed=sure,
                              confirmation=how)
    seen = _seen(how)
    if not sure:
        return "suspect", _suspect(component, seen, how), component
    if kind == "node":
        return "isolated-node", (f"{members[0]} is at fault: {seen}, with {names_text(figures.get('bad_with') or [])}, "
                                 "while they are good with others"), component
    if kind == "link":
        return "isolated-link", (f"the link between {members[0]} and {members[1]} is at fault: {seen} together, "
                                 "while each is good with other nodes (neither is at fault alone)"), component
    if kind == "boundary":
        return "isolated-boundary", (f"the path between topology groups {members[0]} and {members[1]} is at fault "
                                     "(a trunk or uplink between them): different pairs across them are bad while "
                                     "each group is good on its own; no node is at fault"), component
    return "straggler", (f"{members[0]} is a straggler: {figures.get('time_s', 0):.3g} s against its groups' median "
                         f"{figures.get('median_s', 0):.3g} s, slow in {figures.get('slow_in')} of "
                         f"{figures.get('observed')} observations"), component


def _suspect(component: Component, seen: str, how: dict[str, Any]) -> str:
    """Why a component seen bad is not blamed: too few readings, or a pass that ended before the later ones."""
    if how.get("ended_before_later"):
        return (f"{component.text} is a suspect, not blamed: {seen}, but the pass ended (out of time or rounds) "
                "before measuring it again later, as blaming takes (it is not acted on)")
    return f"{component.text} is a suspect, not blamed: {seen}, fewer than confirming a fault takes (it is not acted on)"


def _seen(how: dict[str, Any]) -> str:
    """How often a component read bad: its confirming measurements, then the readings later in the pass
    (a component confirmed with no counted measurements, from the screen, has only those)."""
    later = [r for r in how.get("later") or [] if isinstance(r, dict)]
    parts = [f"bad in {how['bad_in']} of {how['of']} measurements"] if "bad_in" in how and "of" in how else []
    if later:
        parts.append(f"bad in {sum(1 for r in later if r.get('bad'))} of {len(later)} readings later in the pass")
    return ", then ".join(parts) or "bad"


def confirmation_line(component: Component, how: dict[str, Any]) -> str:
    """How a blame (or a suspect) was confirmed: its measurements and partners."""
    shown = "; ".join(f"round {m.get('round')} {{{names_text(m.get('group') or [], limit=4)}}} "
                      f"{'bad' if m.get('bad') else 'good'}" for m in how.get("measurements", []))
    partners = how.get("partners") or []
    return (f"{component.text}: {_seen(how)}"
            + (f", with known-good partners {names_text(partners)}" if partners else "") + (f" ({shown})" if shown else ""))


def round_lines(result: dict[str, Any], limit: int = 8) -> list[str]:
    """One line per round: its groups and how each measured (the first `limit` groups)."""
    lines = []
    for entry in result.get("rounds", []):
        groups = entry["groups"]
        shown = [f"{{{names_text(g['members'], limit=4)}}} {_state(g)}" for g in groups[:limit]]
        more = f"; and {len(groups) - limit} more groups" if len(groups) > limit else ""
        lines.append(f"isolation round {entry['round']}: " + "; ".join(shown) + more)
    return lines


def _state(group: dict[str, Any]) -> str:
    if group.get("ok") is None:
        return "not measured" + (f" ({group['note']})" if group.get("note") else "")
    text = "good" if group["ok"] else "bad"
    if group.get("figure") is not None:
        text += f" ({group['figure']:.3g})"
    return text + (f" [{group['note']}]" if group.get("note") else "")
