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
does) is compared in two steps (`gpu_lagging`), since part of a GPU's spread is its node's (cooling,
clocks, power capping shared by its GPUs): each GPU against the other GPUs of its node (its share of
its node's median, against the spread of those shares over the run), where one that lags while
passing is `fleet.fail-slow`, naming that GPU (its component), with a smaller least distance
(FAIL_SLOW_MIN_DEVIATION, 3%) and a larger z-score (FAIL_SLOW_NODE_Z_LIMIT, 4); and each node's median
against its peers' medians, where a node that lags is a `fleet.outlier` of the node, not of a GPU.
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
# Against the other GPUs of its node the spread is the GPU's own, but its share of their median carries
# that median's spread too: a GPU 5% slow at 1% spread lies 4 to 5 of those deviations out, and a
# healthy one crosses 4 about 3 times in 100,000 (0.3 a run at 8,192 GPUs: bench/error_rates.py).
FAIL_SLOW_NODE_Z_LIMIT = 4.0
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


def gpu_lagging(values: list[float], nodes: list[str], better: str, passing: list[bool] | None = None, *,
                z_limit: float = FAIL_SLOW_NODE_Z_LIMIT, least: float = FAIL_SLOW_MIN_DEVIATION,
                node_z_limit: float = Z_LIMIT, node_least: float = MIN_DEVIATION
                ) -> tuple[list[tuple[int, float, float]], list[tuple[str, float, float, float]]]:
    """Per-GPU figures (`values`, each of the node in `nodes` at the same index) in two steps: (the GPUs
    that lag the other GPUs of their node: index, their node's median, z; the nodes whose median lags
    their peers': node, its median, the peers' median, z). A GPU's share of its node's median is judged
    against the spread of those shares over every node with three GPUs or more (each share of the median
    of the node's other GPUs). Pure."""
    by_node: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        by_node.setdefault(node, []).append(index)
    medians = {node: median([values[i] for i in idx]) for node, idx in by_node.items()}
    shares: list[float] = []
    where: list[int] = []
    for node, idx in by_node.items():
        for i in idx if len(idx) >= 3 else ():
            # against the median of the node's other GPUs: with its own value in it, the two middle
            # GPUs' shares sit at 1 by construction and make the spread look narrower than it is
            others = median([values[j] for j in idx if j != i])
            if others:
                shares.append(values[i] / others)
                where.append(i)
    gpus = [(where[i], medians[nodes[where[i]]], z)
            for i, _, z in lagging(shares, better, [passing[j] for j in where] if passing else None,
                                   z_limit=z_limit, least=least)] if shares else []
    order = list(by_node)
    node_values = [medians[n] for n in order]
    node_passing = [all(passing[i] for i in by_node[n]) for n in order] if passing else None
    slow_nodes = [(order[i], node_values[i], centre, z)
                  for i, centre, z in lagging(node_values, better, node_passing, z_limit=node_z_limit, least=node_least)]
    return gpus, slow_nodes


def outliers_of(ex: Extracted, *, z_limit: float = Z_LIMIT, min_nodes: int = MIN_NODES,
                min_deviation: float = MIN_DEVIATION) -> list[Outlier]:
    """find_outliers over a report already extracted (preflight.history.extract)."""
    groups, directions = _groups(ex)
    found: list[Outlier] = []
    for (kind, key), members in groups.items():
        if len({member[0] for member in members}) < min_nodes:  # nodes, for per-GPU figures too
            continue
        better = directions[(kind, key)]
        values = [member[1] for member in members]
        if members[0][4] is not None:  # per GPU: against its node's GPUs, and each node against its peers
            found += _per_gpu(kind, key, members, better, z_limit, min_deviation)
            continue
        for index, centre, z in lagging(values, better, [m[2] for m in members], z_limit=z_limit, least=min_deviation):
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


def _per_gpu(kind: str, key: Any, members: list[tuple[str, float, bool, bool, int | None]], better: str,
             z_limit: float, min_deviation: float) -> list[Outlier]:
    """The outliers of a per-GPU figure (gpu_lagging): GPUs against their node's, nodes against their peers."""
    values, nodes = [m[1] for m in members], [m[0] for m in members]
    gpus, slow_nodes = gpu_lagging(values, nodes, better, [m[2] for m in members],
                                   z_limit=max(z_limit, FAIL_SLOW_NODE_Z_LIMIT),
                                   least=min(min_deviation, FAIL_SLOW_MIN_DEVIATION),
                                   node_z_limit=z_limit, node_least=min_deviation)
    found = []
    for index, centre, z in gpus:
        node, value, _, judged, gpu = members[index]
        peers = [m[1] for i, m in enumerate(members) if m[0] == node and i != index] or [centre]
        found.append(Outlier(node, key.check_id, key.name, key.unit, value, centre, min(peers), max(peers),
                             len(peers), z, better, kind, judged, gpu))
    for node, value, centre, z in slow_nodes:
        peers = [v for n, v in ((n, median([m[1] for m in members if m[0] == n])) for n in dict.fromkeys(nodes))
                 if n != node]
        judged = all(m[3] for m in members if m[0] == node)
        found.append(Outlier(node, key.check_id, f"{key.name} (the median of its GPUs)", key.unit, value, centre,
                             min(peers), max(peers), len(peers), z, better, kind.replace(" per GPU", ""), judged))
    return found


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
