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

A per-GPU figure (a measurement that declares its `gpu`, as gpu.visibility's matrix-multiply rate
does) is compared GPU by GPU across every node of the kind: a GPU that lags the run's other GPUs
while passing is `fleet.fail-slow`, naming that GPU (its component), with a smaller least distance
(FAIL_SLOW_MIN_DEVIATION, 3%) and a larger z-score (FAIL_SLOW_Z_LIMIT, 5): a GPU's own spread is
near 1%, a node's figures' wider, and a run has eight times more GPUs than nodes to raise false alarms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from preflight.history.extract import CLUSTER, Extracted, extract, node_kind
from preflight.history.stats import median, robust_sigma

OUTLIER_ID = "fleet.outlier"
FAIL_SLOW_ID = "fleet.fail-slow"  # one GPU slower than the run's other GPUs of its kind, though it passes
FAIL_SLOW_MIN_DEVIATION = 0.03
# Beyond 5 robust standard deviations: among the 8,192 GPUs of 1,024 nodes, a healthy GPU with 1% spread
# crosses it about once in 3,000 runs (one-sided normal tail 2.9e-7 per GPU), while one 5% slow, its
# rate the median of three readings, lies near 7 of them (bench/error_rates.py measures both).
FAIL_SLOW_Z_LIMIT = 5.0
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
    gpu: int | None = None  # for a per-GPU figure: the GPU's index on `node`

    @property
    def finding_id(self) -> str:
        return FAIL_SLOW_ID if self.gpu is not None else OUTLIER_ID

    @property
    def where(self) -> str:
        return self.node if self.gpu is None else f"GPU {self.gpu} of {self.node}"

    def finding(self) -> Any:
        """This outlier as a WARN Finding whose component is its node, or its GPU."""
        from preflight.core.model import COMPONENT_GPU, COMPONENT_NODE, Component, Finding, Status

        component = Component(COMPONENT_GPU if self.gpu is not None else COMPONENT_NODE, [self.node], gpu=self.gpu,
                              confirmation={"peers": self.peers, "median": self.median, "z": None if math.isinf(self.z)
                                            else round(self.z, 2)})
        return Finding(self.finding_id, Status.WARN, self.message, self.fix, node=self.node, component=component)

    @property
    def deviation(self) -> float:
        return (self.value - self.median) / abs(self.median) if self.median else math.inf

    @property
    def message(self) -> str:
        side = "below" if self.value < self.median else "above"
        unit = f" {self.unit}" if self.unit else ""
        z = "all peers equal" if math.isinf(self.z) else f"modified z-score {self.z:.1f}"
        return (f"{self.where}: {self.check_id} {self.name} is {_num(self.value)}{unit}, {abs(self.deviation):.0%} "
                f"{side} the median {_num(self.median)}{unit} of {self.peers} peers ({self.kind}: "
                f"{_num(self.peers_low)}-{_num(self.peers_high)}{unit}; {z})"
                + ("; it still passes its threshold" if self.judged else "; no threshold judges it"))

    @property
    def fix(self) -> str:
        if self.gpu is not None:
            return (f"GPU {self.gpu} of {self.node} computes slower than its peers: compare its clocks, power and "
                    "thermal state with theirs (nvidia-smi -q -d PERFORMANCE,CLOCK shows throttle reasons), reseat "
                    "or replace it if it stays slow; a synchronous job runs at the pace of its slowest GPU.")
        return (f"Rerun {self.check_id} on {self.node} alone and next to a peer. A node that stays an outlier run "
                "after run (`preflight history nodes --lemons`) is worth draining and inspecting: clocks and "
                "thermals, PCIe and NVLink link state, firmware, and the image it runs.")

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "check_id": self.check_id, "name": self.name, "unit": self.unit,
                "value": self.value, "median": self.median, "peers_low": self.peers_low,
                "peers_high": self.peers_high, "peers": self.peers,
                "z": None if math.isinf(self.z) else self.z, "direction": self.direction, "kind": self.kind,
                **({"gpu": self.gpu} if self.gpu is not None else {})}


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
        if len({member[0] for member in members}) < min_nodes:  # nodes, for per-GPU figures too
            continue
        better = directions[(kind, key)]
        per_gpu = members[0][4] is not None
        least = min(min_deviation, FAIL_SLOW_MIN_DEVIATION) if per_gpu else min_deviation
        limit = max(z_limit, FAIL_SLOW_Z_LIMIT) if per_gpu else z_limit
        values = [member[1] for member in members]
        for index, centre, z in lagging(values, better, [m[2] for m in members], z_limit=limit, least=least):
            node, value, _, judged, gpu = members[index]
            peers = [member[1] for i, member in enumerate(members) if i != index]
            name = key.name if kind != "links" else f"{key.series or 'link bandwidth'} {node}"
            found.append(Outlier(node, key.check_id, name, key.unit, value, centre, min(peers), max(peers),
                                 len(peers), z, better, kind, judged, gpu))
    found.sort(key=lambda o: (-abs(o.z) if not math.isinf(o.z) else -math.inf, o.node, o.name))
    return found


def lagging(values: list[float], better: str, passing: list[bool] | None = None, *, z_limit: float = Z_LIMIT,
            least: float = MIN_DEVIATION) -> list[tuple[int, float, float]]:
    """(index, median, modified z-score) of each value that lags the others: beyond `z_limit` on the
    worse side of `better` ("higher", "lower", or "" for both), at least `least` from the median,
    and passing (when `passing` is given). The test fleet.outlier and fleet.fail-slow share. Pure."""
    centre = median(values)
    sigma = robust_sigma(values, centre)
    out = []
    for index, value in enumerate(values):
        dev = value - centre
        if (passing is not None and not passing[index]) or dev == 0 or (better == "higher" and dev > 0) \
                or (better == "lower" and dev < 0):
            continue
        if centre and abs(dev) / abs(centre) < least:
            continue
        z = dev / sigma if sigma else math.copysign(math.inf, dev)
        if abs(z) > z_limit:
            out.append((index, centre, z))
    return out


def _groups(ex: Extracted) -> tuple[dict[tuple[str, Any], list[tuple[str, float, bool, bool, int | None]]],
                                     dict[tuple[str, Any], str]]:
    """(node kind, figure) -> (node, value, passing, judged, gpu) for every figure on a node with a known
    kind, and each group's direction; links are grouped by check, series and unit, whatever their names;
    per-GPU figures apart from per-node ones."""
    kinds = {n: node_kind(img) for n, img in ex.images.items()}
    failed = {(c, n) for c, n, s, _ in ex.results if s in ("FAIL", "ERROR")}
    groups: dict[tuple[str, Any], list[tuple[str, float, bool, bool, int | None]]] = {}
    directions: dict[tuple[str, Any], str] = {}
    for row in ex.figures:
        key = row.key
        if ex.keys[key].figure == FIGURE_LINK:
            group: tuple[str, Any] = ("links", key._replace(name="", at=""))
        elif row.node in kinds:
            group = (kinds[row.node] + (" per GPU" if row.gpu is not None else ""), key)
        else:
            continue
        # A node-scope figure passes with its result; a cluster check's (a link) by its own judgement.
        passing = row.ok is not False and (key.check_id, row.node) not in failed
        members = groups.get(group)
        if members is None:
            members = groups[group] = []
            directions[group] = ex.keys[key].direction
        members.append((row.node, row.value, passing, row.ok is True, row.gpu))
    return groups, directions


def outlier_findings(report: dict[str, Any], **options: Any) -> list[Any]:
    """The outliers as preflight.core.model.Finding objects (fleet.outlier or, for a GPU, fleet.fail-slow;
    level WARN; the node or GPU as their component)."""
    return [o.finding() for o in find_outliers(report, **options)]


def outlier_result(report: dict[str, Any], **options: Any) -> Any:
    """A cluster-scope CheckResult `fleet.outlier` holding the findings, for the runner to add to a
    run of several nodes: WARN with outliers, PASS without; None when no figure had enough peers."""
    from preflight.core.model import CheckResult, Measurement, Scope, Status

    ex = extract(report)
    outliers = outliers_of(ex, **options)
    compared = _compared_groups(ex, options.get("min_nodes", MIN_NODES))
    if not compared:
        return None
    findings = [o.finding() for o in outliers]
    if outliers:
        summary = (f"{len({o.node for o in outliers})} node(s) lag their peers while passing: "
                   + "; ".join(f"{o.where} ({o.name})" for o in outliers[:3]))
    else:
        summary = f"no node lags its peers on {compared} figure(s) measured on {MIN_NODES} or more nodes of a kind"
    measurements = [Measurement(f"{o.where}: {o.check_id} {o.name}", o.value, o.unit, node=o.node, gpu=o.gpu)
                    for o in outliers]
    return CheckResult(check_id=OUTLIER_ID, node=CLUSTER, status=Status.WARN if outliers else Status.PASS,
                       summary=summary, title="Fleet outliers within the run", scope=Scope.CLUSTER,
                       measurements=measurements, findings=findings,
                       why="A node that is much slower than identical peers still passes a floor set for the "
                           "whole fleet, and a synchronous job runs at the pace of its slowest node.")


def _compared_groups(ex: Extracted, min_nodes: int) -> int:
    return sum(1 for members in _groups(ex)[0].values() if len({m[0] for m in members}) >= min_nodes)
