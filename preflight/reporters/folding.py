"""One row for many nodes: identical per-node results, and identical rows of the node x check
matrix, folded into one with their node set (`gpu[0001-0016,0018-1000]`), so a 1,000-node report is
a handful of rows, each naming the nodes it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflight.core.model import CLUSTER_NODE, CheckResult
from preflight.core.nodeset import fold


def label(nodes: list[str]) -> str:
    """'gpu01', 'gpu[01-03] (3 nodes)', or 'Across the cluster'."""
    if nodes == [CLUSTER_NODE]:
        return "Across the cluster"
    folded = fold(nodes)
    return folded if len(nodes) == 1 else f"{folded} ({len(nodes)} nodes)"


@dataclass
class MatrixRow:
    nodes: list[str]
    statuses: dict[str, str]  # check id -> status ("" where no result)

    @property
    def label(self) -> str:
        return label(self.nodes)


def matrix_rows(nodes: list[str], matrix: dict[str, dict[str, str]], check_ids: list[str]) -> list[MatrixRow]:
    """Nodes whose every check has the same status share a row, in the order their first node comes."""
    rows: dict[tuple[str, ...], MatrixRow] = {}
    for node in nodes:
        key = tuple(matrix[node].get(cid, "") for cid in check_ids)
        row = rows.get(key)
        if row is None:
            rows[key] = MatrixRow([node], dict(matrix[node]))
        else:
            row.nodes.append(node)
    return list(rows.values())


@dataclass
class ResultGroup:
    """Results of one check that say the same on several nodes; `result` is the first of them."""

    result: CheckResult
    nodes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return label(self.nodes)


def _same(result: CheckResult) -> tuple:
    return (result.status, result.summary, tuple(result.details),
            tuple([(f.id, f.level, f.message, f.fix, f.node) for f in result.findings]),
            tuple([(m.name, str(m.value), m.unit, str(m.threshold), m.comparison, m.ok, m.node, tuple(m.samples))
                   for m in result.measurements]))


def result_groups(results: list[CheckResult]) -> list[ResultGroup]:
    groups: dict[tuple, ResultGroup] = {}
    for result in results:
        key = _same(result)
        group = groups.get(key)
        if group is None:
            groups[key] = ResultGroup(result, [result.node])
        else:
            group.nodes.append(result.node)
    return list(groups.values())
