"""Fleet outliers within one run: a node that passes its threshold but lags its peers.

A pure function of the report dict, so that the runner can add its findings to a run and the store
can record them. For every figure measured on several nodes of the same kind (the same GPU model
and count, read from the nodes' facts), the robust test of Iglewicz and Hoaglin: the modified
z-score 0.6745 (x - median) / MAD, and an outlier beyond 3.5. It is direction-aware: a figure where
higher is better flags only nodes below their peers, and the reverse. Nodes that already fail the
figure's threshold are left to that finding; the test names only nodes that still pass, which no
threshold would catch. Links (figure "link") are compared with the other links of the same check.

When more than half the values are equal the MAD is 0, and the mean absolute deviation (scaled by
1.2533) takes its place; a node must also lie at least 5% from the median, so that a fleet of
identical figures does not flag a node for a difference in the last digit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from preflight.history.extract import CLUSTER, Extracted, extract, node_kind
from preflight.history.stats import median, robust_sigma

OUTLIER_ID = "fleet.outlier"
Z_LIMIT = 3.5
MIN_NODES = 5  # nodes of one kind that measured the figure, the outlier included
MIN_DEVIATION = 0.05  # relative distance from the median below which no node is an outlier
FIGURE_LINK = "link"


@dataclass
class Outlier:
    node: str
    check_id: str
    name: str
    unit: str
    value: float
    median: float
    peers_low: float
    peers_high: float
    peers: int  # the other nodes (or links) it was compared with
    z: float  # the modified z-score, signed; +-inf when the peers are all equal
    direction: str  # "higher", "lower" or "" (both ways)
    kind: str  # the node kind the peers share
    judged: bool = False  # a threshold judged the figure (and it passed)

    @property
    def deviation(self) -> float:
        return (self.value - self.median) / abs(self.median) if self.median else math.inf

    @property
    def message(self) -> str:
        side = "below" if self.value < self.median else "above"
        unit = f" {self.unit}" if self.unit else ""
        z = "all peers equal" if math.isinf(self.z) else f"modified z-score {self.z:.1f}"
        return (f"{self.node}: {self.check_id} {self.name} is {_num(self.value)}{unit}, {abs(self.deviation):.0%} "
                f"{side} the median {_num(self.median)}{unit} of {self.peers} peers ({self.kind}: "
                f"{_num(self.peers_low)}-{_num(self.peers_high)}{unit}; {z})"
                + ("; it still passes its threshold" if self.judged else "; no threshold judges it"))

    @property
    def fix(self) -> str:
        return (f"Rerun {self.check_id} on {self.node} alone and next to a peer. A node that stays an outlier run "
                "after run (`preflight history nodes --lemons`) is worth draining and inspecting: clocks and "
                "thermals, PCIe and NVLink link state, firmware, and the image it runs.")

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "check_id": self.check_id, "name": self.name, "unit": self.unit,
                "value": self.value, "median": self.median, "peers_low": self.peers_low,
                "peers_high": self.peers_high, "peers": self.peers,
                "z": None if math.isinf(self.z) else self.z, "direction": self.direction, "kind": self.kind}


def _num(value: float) -> str:
    return f"{value:.4g}"


def find_outliers(report: dict[str, Any], *, images: dict[str, dict[str, Any]] | None = None,
                  z_limit: float = Z_LIMIT, min_nodes: int = MIN_NODES,
                  min_deviation: float = MIN_DEVIATION) -> list[Outlier]:
    """Every passing node or link that lies beyond z_limit from its peers, worst first."""
    ex = extract(report)
    if images is not None:
        ex.images = images
    return outliers_of(ex, z_limit=z_limit, min_nodes=min_nodes, min_deviation=min_deviation)


def outliers_of(ex: Extracted, *, z_limit: float = Z_LIMIT, min_nodes: int = MIN_NODES,
                min_deviation: float = MIN_DEVIATION) -> list[Outlier]:
    """find_outliers over a report already extracted (preflight.history.extract)."""
    groups, directions = _groups(ex)
    found: list[Outlier] = []
    for (kind, key), members in groups.items():
        if len({member[0] for member in members}) < min_nodes:
            continue
        better = directions[(kind, key)]
        values = [member[1] for member in members]
        centre = median(values)
        sigma = robust_sigma(values, centre)
        for index, (node, value, passing, judged) in enumerate(members):
            dev = value - centre
            if not passing or dev == 0 or (better == "higher" and dev > 0) or (better == "lower" and dev < 0):
                continue
            if centre and abs(dev) / abs(centre) < min_deviation:
                continue
            z = dev / sigma if sigma else math.copysign(math.inf, dev)
            if abs(z) <= z_limit:
                continue
            peers = [member[1] for i, member in enumerate(members) if i != index]
            name = key.name if kind != "links" else f"{key.series or 'link bandwidth'} {node}"
            found.append(Outlier(node, key.check_id, name, key.unit, value, centre, min(peers), max(peers),
                                 len(peers), z, better, kind, judged))
    found.sort(key=lambda o: (-abs(o.z) if not math.isinf(o.z) else -math.inf, o.node, o.name))
    return found


def _groups(ex: Extracted) -> tuple[dict[tuple[str, Any], list[tuple[str, float, bool, bool]]],
                                     dict[tuple[str, Any], str]]:
    """(node kind, figure) -> (node, value, passing, judged) for every figure on a node with a known
    kind, and each group's direction; links are grouped by check, series and unit, whatever their names."""
    kinds = {n: node_kind(img) for n, img in ex.images.items()}
    failed = {(c, n) for c, n, s, _ in ex.results if s in ("FAIL", "ERROR")}
    groups: dict[tuple[str, Any], list[tuple[str, float, bool, bool]]] = {}
    directions: dict[tuple[str, Any], str] = {}
    for row in ex.figures:
        key = row.key
        if ex.keys[key].figure == FIGURE_LINK:
            group: tuple[str, Any] = ("links", key._replace(name="", at=""))
        elif row.node in kinds:
            group = (kinds[row.node], key)
        else:
            continue
        # A node-scope figure passes with its result; a cluster check's (a link) by its own judgement.
        passing = row.ok is not False and (key.check_id, row.node) not in failed
        members = groups.get(group)
        if members is None:
            members = groups[group] = []
            directions[group] = ex.keys[key].direction
        members.append((row.node, row.value, passing, row.ok is True))
    return groups, directions


def outlier_findings(report: dict[str, Any], **options: Any) -> list[Any]:
    """The outliers as preflight.core.model.Finding objects (id fleet.outlier, level WARN, node set)."""
    from preflight.core.model import Finding, Status

    return [Finding(OUTLIER_ID, Status.WARN, o.message, o.fix, node=o.node)
            for o in find_outliers(report, **options)]


def outlier_result(report: dict[str, Any], **options: Any) -> Any:
    """A cluster-scope CheckResult `fleet.outlier` holding the findings, for the runner to add to a
    run of several nodes: WARN with outliers, PASS without; None when no figure had enough peers."""
    from preflight.core.model import CheckResult, Finding, Measurement, Scope, Status

    ex = extract(report)
    outliers = outliers_of(ex, **options)
    compared = _compared_groups(ex, options.get("min_nodes", MIN_NODES))
    if not compared:
        return None
    findings = [Finding(OUTLIER_ID, Status.WARN, o.message, o.fix, node=o.node) for o in outliers]
    if outliers:
        summary = (f"{len({o.node for o in outliers})} node(s) lag their peers while passing: "
                   + "; ".join(f"{o.node} ({o.name})" for o in outliers[:3]))
    else:
        summary = f"no node lags its peers on {compared} figure(s) measured on {MIN_NODES} or more nodes of a kind"
    measurements = [Measurement(f"{o.node}: {o.check_id} {o.name}", o.value, o.unit, node=o.node)
                    for o in outliers]
    return CheckResult(check_id=OUTLIER_ID, node=CLUSTER, status=Status.WARN if outliers else Status.PASS,
                       summary=summary, title="Fleet outliers within the run", scope=Scope.CLUSTER,
                       measurements=measurements, findings=findings,
                       why="A node that is much slower than identical peers still passes a floor set for the "
                           "whole fleet, and a synchronous job runs at the pace of its slowest node.")


def _compared_groups(ex: Extracted, min_nodes: int) -> int:
    return sum(1 for members in _groups(ex)[0].values() if len({m[0] for m in members}) >= min_nodes)
