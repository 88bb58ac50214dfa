"""The findings of a run as every report lists them: what blocks first, then warnings, then what
was not measured; each with its own fix, and one row for the same finding on many nodes.

Built once from the verdict's Decision (preflight.core.verdict), which reads the run per finding;
the terminal, Markdown, HTML and JSON reporters all render these rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflight.core.findings import Found, fold_key, merge_figures, shapes
from preflight.core.levels import SKIPPED_AT_LEVEL
from preflight.core.model import CLUSTER_NODE, Scope
from preflight.core.nodeset import fold
from preflight.core.verdict import Decision

# A blocking SKIP says what the check had to measure and why; its fix, when its check gave none.
EXPECTED_SKIP_FIX = ("Make the check able to run here (the reason is above), or change what says it must: "
                     "expect.* in preflight.toml, the hosts file's slots, or --profile.")


@dataclass
class FindingRow:
    """One finding, or the same finding (id, level, sentence, fix) found on several nodes."""

    id: str
    check_id: str
    title: str
    level: str  # PASS, WARN, FAIL, SKIP, ERROR
    message: str
    fix: str
    nodes: list[str] = field(default_factory=list)  # nodes, links ("a -> b") or [CLUSTER_NODE]
    blocks: str = ""  # why it blocks; "" for a warning or what was not measured
    silenced: str = ""  # for an acknowledged finding: "until 2027-01-31: the reason" from [silence]
    cluster: bool = False  # the finding of a cluster check's own result (told by scope: a host may be "cluster")

    @property
    def status(self) -> str:  # the name the templates have always used
        return self.level

    @property
    def summary(self) -> str:
        return self.message

    @property
    def remediation(self) -> list[str]:
        return [self.fix] if self.fix else []

    @property
    def node(self) -> str:
        return self.nodes[0] if self.nodes else CLUSTER_NODE

    @property
    def nodeset(self) -> str:
        """The nodes as one node set: 'gpu[01-03,05]'; 'the cluster' for a cluster check's own finding."""
        if self.cluster:
            return "the cluster"
        return fold(n for n in self.nodes if n != CLUSTER_NODE or not self.cluster)

    @property
    def where(self) -> str:
        """'on gpu02', 'on gpu[01-03] (3 nodes)', 'across the cluster'."""
        if self.cluster:
            return "across the cluster"
        count = len([n for n in self.nodes if n != CLUSTER_NODE])
        return f"on {self.nodeset}" + (f" ({count} nodes)" if count > 1 else "")

    def to_dict(self) -> dict:
        return {"id": self.id, "check_id": self.check_id, "level": self.level, "message": self.message,
                "fix": self.fix, "nodes": CLUSTER_NODE if self.cluster else self.nodeset,
                **({"blocks": self.blocks} if self.blocks else {}),
                **({"silenced": self.silenced} if self.silenced else {})}


@dataclass
class LevelSkips:
    """Checks the run level left out: one line, not one per check and node."""

    level: str
    check_ids: list[str]
    fix: str


def rows(found: list[Found], expected_skip: bool = False) -> list[FindingRow]:
    """One row per distinct finding (preflight.core.findings.fold_key: the same finding on several
    nodes, its figures a few percent apart, is one row with their range), its nodes gathered, in the
    order first found."""
    by_key: dict[tuple, FindingRow] = {}
    said: dict[tuple, tuple[list[str], list[str]]] = {}
    listed: dict[tuple, set[str]] = {}  # each row's nodes, to look up
    shape = shapes()
    for f in found:
        message, fix = f.finding.message, f.finding.fix
        if expected_skip and f.level.value == "SKIP":
            message = f"skipped, but {f.blocks}: {message}"
            fix = fix or EXPECTED_SKIP_FIX
        key = fold_key(f, shape)
        row = by_key.get(key)
        if row is None:
            row = by_key[key] = FindingRow(f.id, f.result.check_id, f.result.title or f.result.check_id,
                                           f.level.value, message, fix, [], f.blocks,
                                           cluster=f.result.scope is Scope.CLUSTER and f.node == CLUSTER_NODE)
        messages, fixes = said.setdefault(key, ([], []))
        messages.append(message)
        fixes.append(fix)
        nodes = listed.setdefault(key, set())
        if f.node not in nodes:
            nodes.add(f.node)
            row.nodes.append(f.node)
    for key, row in by_key.items():
        row.message, row.fix = merge_figures(said[key][0]), merge_figures(said[key][1])
    return list(by_key.values())


def split_level_skips(found: list[Found], level: str) -> tuple[list[Found], LevelSkips | None]:
    """The SKIPs the run level made, apart from the other things not measured."""
    at_level = [f for f in found if f.id.endswith(SKIPPED_AT_LEVEL)]
    if not at_level:
        return found, None
    ids = list(dict.fromkeys(f.result.check_id for f in at_level))
    fix = at_level[0].finding.fix
    return [f for f in found if not f.id.endswith(SKIPPED_AT_LEVEL)], LevelSkips(level, ids, fix)


@dataclass
class FindingLists:
    blocking: list[FindingRow]
    warnings: list[FindingRow]
    not_measured: list[FindingRow]
    level_skips: LevelSkips | None
    acknowledged: list[FindingRow] = field(default_factory=list)


def acknowledged_rows(found: list[Found], silenced: dict[str, dict[str, str]]) -> list[FindingRow]:
    shown = rows(found)
    for row in shown:
        silence = silenced.get(row.id, {})
        until = f"until {silence['until']}" if silence.get("until") else "with no end date"
        row.silenced = f"{until}: {silence.get('reason', '')}"
    return shown


def finding_lists(decision: Decision, level: str, silenced: dict[str, dict[str, str]] | None = None) -> FindingLists:
    skipped, level_skips = split_level_skips(decision.skipped_findings, level)
    # The cross-node warnings (the point of a run over several nodes) before the per-node ones.
    warnings = sorted(decision.warning_findings, key=lambda f: f.result.scope is not Scope.CLUSTER)
    return FindingLists(rows(decision.blocking_findings, expected_skip=True), rows(warnings),
                        rows(skipped), level_skips, acknowledged_rows(decision.acknowledged_findings, silenced or {}))
