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

from preflight.history.extract import CLUSTER, at_text, direction, node_image, node_kind, node_names, number
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
    if images is None:
        images = {n: node_image(report, n) for n in node_names(report)}
    kinds = {n: node_kind(img) for n, img in images.items()}
    groups: dict[tuple[Any, ...], list[tuple[str, float, bool, bool]]] = {}
    meta: dict[tuple[Any, ...], tuple[str, str, str, str]] = {}
    for result in report.get("results") or []:
        if not isinstance(result, dict):
            continue
        check_id, status = str(result.get("check_id")), result.get("status")
        for m in result.get("measurements") or []:
            value = number(m.get("value")) if isinstance(m, dict) else None
            if value is None:
                continue
            node = str(m.get("node") or result.get("node"))
            if m.get("figure") == FIGURE_LINK:
                key: tuple[Any, ...] = ("links", check_id, m.get("series") or "", m.get("unit") or "")
                kind, name = "links", str(m.get("series") or "link bandwidth")
            elif node in kinds and node != CLUSTER:
                kind, name = kinds[node], str(m.get("name"))
                key = (kind, check_id, name, m.get("series") or "", at_text(m.get("at")), m.get("unit") or "")
            else:
                continue
            passing = m.get("ok") is not False and status not in ("FAIL", "ERROR")
            groups.setdefault(key, []).append((node, value, passing, m.get("ok") is True))
            meta.setdefault(key, (check_id, name, str(m.get("unit") or ""), direction(m)))
    found: list[Outlier] = []
    for key, members in groups.items():
        if len({member[0] for member in members}) < min_nodes:
            continue
        check_id, name, unit, better = meta[key]
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
            found.append(Outlier(node, check_id, name if key[0] != "links" else f"{name} {node}", unit, value,
                                 centre, min(peers), max(peers), len(peers), z, better, key[0], judged))
    found.sort(key=lambda o: (-abs(o.z) if not math.isinf(o.z) else -math.inf, o.node, o.name))
    return found


def outlier_findings(report: dict[str, Any], **options: Any) -> list[Any]:
    """The outliers as preflight.model.Finding objects (id fleet.outlier, level WARN, node set)."""
    from preflight.model import Finding, Status

    return [Finding(OUTLIER_ID, Status.WARN, o.message, o.fix, node=o.node)
            for o in find_outliers(report, **options)]


def outlier_result(report: dict[str, Any], **options: Any) -> Any:
    """A cluster-scope CheckResult `fleet.outlier` holding the findings, for the runner to add to a
    run of several nodes: WARN with outliers, PASS without; None when no figure had enough peers."""
    from preflight.model import CheckResult, Finding, Measurement, Scope, Status

    outliers = find_outliers(report, **options)
    compared = _compared_groups(report, options.get("min_nodes", MIN_NODES))
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


def _compared_groups(report: dict[str, Any], min_nodes: int) -> int:
    images = {n: node_image(report, n) for n in node_names(report)}
    counts: dict[tuple[Any, ...], set[str]] = {}
    for result in report.get("results") or []:
        for m in result.get("measurements") or [] if isinstance(result, dict) else []:
            node = str(m.get("node") or result.get("node"))
            if number(m.get("value")) is None or node not in images:
                continue
            key = (node_kind(images[node]), result.get("check_id"), m.get("name"), m.get("series"), at_text(m.get("at")))
            counts.setdefault(key, set()).add(node)
    return sum(1 for nodes in counts.values() if len(nodes) >= min_nodes)
