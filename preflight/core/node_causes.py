"""One cause, one finding: a node that could not be used is one finding with its node set.

A node that cannot be reached (or has no preflight, or was lost) makes every check that was to run
there ERROR with the same sentence, and each cross-node check ERROR for its missing nodes. Listed one
by one, two unreachable nodes are twenty blocking findings; read as what they are, they are one:
"cannot reach node[1-2] over SSH". The results themselves stay as they are (each check's own section
shows them and the verdict still weighs them); only the findings the reports list are folded.
"""

from __future__ import annotations

from preflight.core.findings import Found
from preflight.core.model import CheckResult, Finding, RunReport, Scope, Status
from preflight.core.nodeset import fold

# The findings of node-level causes are filed under this id, as `preflight.nodes.unreachable`.
NODES_CHECK = "preflight.nodes"
NODES_TITLE = "Nodes"
# A cross-node check's finding that only says some nodes could not be reached (preflight.core.check).
FOLLOW_ON = ".nodes-unreachable"
_PLACE = "\x00"


def _cause(found: Found) -> tuple[str, str, str]:
    """(id suffix, the sentence with the node's name taken out, before its first ': ', the rest)."""
    text = found.finding.message.replace(found.node, _PLACE) if found.node else found.finding.message
    head, _, detail = text.partition(": ")
    return found.id[len(found.result.check_id):], head, detail


def fold_node_causes(found: list[Found], report: RunReport) -> list[Found]:
    """The blocking findings with each node-level cause folded into one finding per cause, naming its
    node set; a cross-node check's "nodes unreachable" finding is part of that cause, not one more."""
    lost = {n.name for n in report.nodes if n.reachable is False}
    if not lost:
        return found
    groups: dict[tuple[str, str, str], list[Found]] = {}
    kept: list[Found | tuple[str, str, str]] = []
    for f in found:
        own = (f.synthesised and f.level is Status.ERROR and f.result.scope is Scope.NODE
               and f.result.node in lost and f.node in lost and f.node in f.finding.message)
        if not own:
            kept.append(f)
            continue
        suffix, head, _ = _cause(f)
        key = (suffix, head, f.finding.fix)
        if key not in groups:
            groups[key] = []
            kept.append(key)
        groups[key].append(f)
    if not groups:
        return found
    follow_on = [f for f in kept if isinstance(f, Found) and f.id.endswith(FOLLOW_ON) and f.level is Status.ERROR]
    checks_after = sorted({f.result.check_id for f in follow_on})
    follow_ids = {id(f) for f in follow_on}
    out: list[Found] = []
    first = True
    for item in kept:
        if isinstance(item, Found):
            if id(item) not in follow_ids:
                out.append(item)
            continue
        out += _folded(item, groups[item], checks_after if first else [])
        first = False
    return out


def _folded(key: tuple[str, str, str], members: list[Found], checks_after: list[str]) -> list[Found]:
    suffix, head, fix = key
    nodes = list(dict.fromkeys(f.node for f in members))
    details = {_cause(f)[2] for f in members}
    message = head.replace(_PLACE, fold(nodes))
    if len(details) == 1 and next(iter(details)):
        detail = next(iter(details))
        message += ": " + detail.replace(_PLACE, fold(nodes))
    checks = sorted({f.result.check_id for f in members})
    message += (f" ({len(checks)} check{'s' if len(checks) != 1 else ''} could not run there"
                + (f"; nor could {', '.join(checks_after)} across the nodes" if checks_after else "") + ")")
    finding = Finding(NODES_CHECK + suffix, Status.ERROR, message, fix)
    out = []
    for node in nodes:
        result = CheckResult(NODES_CHECK, node, Status.ERROR, message, title=NODES_TITLE, scope=Scope.NODE,
                             findings=[finding])
        out.append(Found(result, finding, members[0].blocks, True))
    return out
