"""GO in the job's shape: the largest healthy subset of a run's nodes that fits the shape a job asks for.

A job rarely needs every node of a cluster; it needs N nodes in a shape: a multiple of its
data-parallel width (`nodes-multiple-of=4`), all under one leaf switch (`within=group`), with at
least so many GPUs each (`gpus-per-node=8`). When a run is NO-GO because some nodes are broken, the
question that matters at night is "can the job start without them?". This module answers it from
the run's verdict, purely:

- a node is left out when it has a blocking finding of its own (the caller passes which, as the
  integrations decide it for draining), when anything blocking was found on it (an ERROR, a SKIP
  that had to measure), when a planned result is missing on it, or when it was unreachable;
- a blocking finding that cannot be pinned on a node (a cluster check that failed as a whole, a
  link between two nodes, a missing cluster result, an unmet expectation) means no subset is
  offered: nobody can say which nodes to leave out; unless a node a cluster check confirmed at fault
  explains it (preflight.core.blame.explained_by: a shortfall with no component, a link with a
  confirmed end), when it is left out with that node;
- no subset is offered for a run that reached no verdict for other reasons (interrupted, a plugin
  that did not load, nothing measured).

The answer is plain data (`RunReport.subset`, results.json `subset`), so every report renders it
and `decide` gives it its exit code (EXIT_SUBSET_GO): a subset GO is never exit 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from preflight.core.blame import confirmed_nodes, explained_by
from preflight.core.model import RunReport, Scope
from preflight.core.nodeset import fold
from preflight.core.verdict import Verdict, decide

KEYS = ("nodes-multiple-of", "within", "gpus-per-node")
WITHIN = ("group",)
MAX_MULTIPLE = 65536
MAX_GPUS = 1024


class ShapeError(ValueError):
    """A --shape value that is not understood; the message names the key."""


@dataclass(frozen=True)
class Shape:
    nodes_multiple_of: int = 1
    within: str = ""  # "" (anywhere) or "group": every node in one topology group
    gpus_per_node: int | None = None

    def text(self) -> str:
        parts = []
        if self.nodes_multiple_of > 1:
            parts.append(f"nodes-multiple-of={self.nodes_multiple_of}")
        if self.within:
            parts.append(f"within={self.within}")
        if self.gpus_per_node is not None:
            parts.append(f"gpus-per-node={self.gpus_per_node}")
        return ",".join(parts) or "nodes-multiple-of=1"


def _positive(flag: str, key: str, value: str, limit: int) -> int:
    try:
        number = int(value, 10)
    except ValueError:
        raise ShapeError(f"{flag} {key}={value}: not a whole number") from None
    if not 1 <= number <= limit:
        raise ShapeError(f"{flag} {key}={value}: must be between 1 and {limit}")
    return number


def parse(values: Iterable[str], flag: str = "--shape", defaults: Mapping[str, int] | None = None) -> Shape | None:
    """The shape from `--shape` values (each KEY=VALUE, comma-separated or repeated); None for none.
    `defaults` (shape key -> value: the job's plan) fill the keys the values leave out."""
    found: dict[str, str] = {}
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, val = part.partition("=")
            key, val = key.strip(), val.strip()
            if not sep or not val:
                raise ShapeError(f"{flag} {part}: write KEY=VALUE ({', '.join(k + '=' for k in KEYS)})")
            if key not in KEYS:
                from preflight.core.suggest import suggest

                raise ShapeError(f"{flag} {key}: unknown key{suggest(key, KEYS)} (keys: {', '.join(KEYS)})")
            if key in found and found[key] != val:
                raise ShapeError(f"{flag} {key}: given twice ({found[key]} and {val})")
            found[key] = val
    if not found:
        return None
    for key, default in (defaults or {}).items():
        if key not in found:
            limit = MAX_GPUS if key == "gpus-per-node" else MAX_MULTIPLE
            _positive("[job] (the shape's default)", key, str(default), limit)
            found[key] = str(default)
    within = found.get("within", "")
    if within and within not in WITHIN:
        raise ShapeError(f"{flag} within={within}: not known (known: {', '.join(WITHIN)})")
    multiple = _positive(flag, "nodes-multiple-of", found["nodes-multiple-of"], MAX_MULTIPLE) \
        if "nodes-multiple-of" in found else 1
    gpus = _positive(flag, "gpus-per-node", found["gpus-per-node"], MAX_GPUS) if "gpus-per-node" in found else None
    return Shape(multiple, within, gpus)


@dataclass(frozen=True)
class Candidate:
    """A node of the run as the shape sees it: its name, its topology group, its GPU count."""

    name: str
    group: str = ""
    gpus: int | None = None


def left_out(report: RunReport, decision: object, own: Mapping[str, list[tuple[str, str]]]
             ) -> tuple[dict[str, str], list[str], str]:
    """(node -> why it is left out, the blocking findings pinned on no node, why no subset at all or "").

    `decision` is decide(report); `own` maps a node to the (check id, finding id) of the blocking
    findings that are its own, as draining and cordoning read them."""
    names = report.node_names
    known = set(names)
    bad: dict[str, str] = {}
    for node in report.nodes:
        if node.reachable is False:
            bad.setdefault(node.name, "unreachable")
    pinned = set()  # (check id, finding id) that the own-findings rule puts on a node
    for node, found in own.items():
        if node in known and found:
            bad.setdefault(node, found[0][1])
            pinned.update(found)
    unlocated: list[str] = []
    confirmed = confirmed_nodes(report)
    for found in getattr(decision, "blocking_findings", []):
        result = found.result
        if result.scope is Scope.NODE and result.node in known:
            bad.setdefault(result.node, found.id)
        elif found.finding.node in known:
            bad.setdefault(str(found.finding.node), found.id)
        elif (result.check_id, found.id) not in pinned and not explained_by(report, found.finding, confirmed):
            unlocated.append(found.id)  # a finding a confirmed node explains is left out with that node
    for check_id, node in getattr(decision, "missing", []):
        if check_id in report.cluster_checks:
            unlocated.append(f"{check_id} (no result)")
        elif node in known:
            bad.setdefault(node, f"{check_id} (no result)")
    why_not = ""
    verdict = getattr(decision, "verdict", None)
    if report.interrupted:
        why_not = "the run was interrupted"
    elif report.load_errors:
        why_not = "a check plugin did not load"
    elif verdict is Verdict.INCOMPLETE and not getattr(decision, "missing", []):
        why_not = "the run reached no verdict"
    elif not getattr(decision, "measured", 0):
        why_not = "nothing was measured"
    return bad, list(dict.fromkeys(unlocated)), why_not


def largest(shape: Shape, candidates: list[Candidate], bad: Mapping[str, str], unlocated: list[str] = (),
            why_not: str = "") -> dict:
    """The largest subset of healthy candidates that fits `shape`, as RunReport.subset holds it.

    Healthy candidates keep their order (hosts file, allocation); where the shape leaves healthy nodes
    out (a multiple, one group), the last ones in that order go. Among groups, the one with the most
    nodes that fit wins, the first on a tie."""
    total = len(candidates)
    answer: dict = {"shape": shape.text(), "total": total, "offered": False, "nodes": [], "exclude": [],
                    "slurm_exclude": "", "reasons": {}, "group": "", "why_not": ""}
    if why_not:
        answer["why_not"] = why_not
        return answer
    if unlocated:
        shown = ", ".join(unlocated[:3]) + (f" and {len(unlocated) - 3} more" if len(unlocated) > 3 else "")
        answer["why_not"] = f"a blocking finding is pinned on no node ({shown}): no node can be left out for it"
        return answer
    reasons = _unfit(shape, candidates, bad)
    healthy = [c for c in candidates if c.name not in reasons]
    best_group, best = _best_pool(shape, _pools(shape, healthy, reasons))
    kept = {c.name for c in best}
    for c in healthy:
        if c.name not in kept and c.name not in reasons:
            reasons[c.name] = (f"outside the group {best_group}" if shape.within == "group" and c.group != best_group
                               else f"left out to keep a multiple of {shape.nodes_multiple_of}")
    answer["reasons"] = {c.name: reasons[c.name] for c in candidates if c.name in reasons}
    answer["nodes"] = [c.name for c in candidates if c.name in kept]
    answer["exclude"] = [c.name for c in candidates if c.name not in kept]
    answer["group"] = best_group
    if shape.within == "group":  # kept, so that a re-judged run is answered in the same groups
        answer["groups"] = {c.name: c.group for c in candidates if c.group}
    answer["slurm_exclude"] = fold(answer["exclude"])  # sbatch/srun --exclude=
    if not best:
        answer["why_not"] = (f"no healthy nodes fit the shape {shape.text()} "
                             f"({len(healthy)} of {total} healthy)")
        return answer
    answer["offered"] = True
    return answer


def _unfit(shape: Shape, candidates: list[Candidate], bad: Mapping[str, str]) -> dict[str, str]:
    """Why each candidate that cannot be in any subset is out: a blocking finding, or too few GPUs."""
    reasons = {c.name: bad[c.name] for c in candidates if c.name in bad}
    if shape.gpus_per_node is None:
        return reasons
    for c in candidates:
        if c.name in reasons:
            continue
        if c.gpus is None:
            reasons[c.name] = "GPU count unknown"
        elif c.gpus < shape.gpus_per_node:
            reasons[c.name] = f"{c.gpus} GPUs, the shape asks for {shape.gpus_per_node}"
    return reasons


def _pools(shape: Shape, healthy: list[Candidate], reasons: dict[str, str]) -> list[tuple[str, list[Candidate]]]:
    """The pools a subset is drawn from: all healthy nodes, or each topology group (the nodes in none are out)."""
    if shape.within != "group":
        return [("", healthy)]
    groups: dict[str, list[Candidate]] = {}
    for c in healthy:
        if c.group:
            groups.setdefault(c.group, []).append(c)
        else:
            reasons[c.name] = "in no topology group"
    return list(groups.items())


def _best_pool(shape: Shape, pools: list[tuple[str, list[Candidate]]]) -> tuple[str, list[Candidate]]:
    """The pool with the most nodes that fit the multiple, the first on a tie, cut to that multiple."""
    best_group, best = "", []
    for group, pool in pools:
        size = len(pool) - len(pool) % shape.nodes_multiple_of
        if size > len(best):
            best_group, best = group, pool[:size]
    return best_group, best


def candidates_of(report: RunReport, groups: Mapping[str, str] | None = None) -> list[Candidate]:
    """The run's nodes with their topology group (from the caller: where the run found its nodes) and
    their GPU count: the NVIDIA GPUs the inventory found on the PCI bus, else the slots written for it."""
    from preflight.core.check import ROLE_INVENTORY

    inventory = {cid for cid, role in report.roles.items() if role == ROLE_INVENTORY}
    pci: dict[str, int] = {}
    for result in report.results:
        gpus = (result.facts or {}).get("nvidia_gpus") if result.check_id in inventory else None
        if isinstance(gpus, list):
            pci[result.node] = len(gpus)
    slots = {n.name: n.slots for n in report.nodes}
    return [Candidate(name, (groups or {}).get(name, ""), pci.get(name, slots.get(name)))
            for name in report.node_names]


def subset_for(report: RunReport, shape: Shape, own: Mapping[str, list[tuple[str, str]]],
               groups: Mapping[str, str] | None = None) -> dict:
    """RunReport.subset for this run and shape; `own` as in left_out."""
    report.subset = None  # judged without an earlier answer
    bad, unlocated, why_not = left_out(report, decide(report), own)
    return largest(shape, candidates_of(report, groups), bad, unlocated, why_not)
