"""Fleet outliers within one run, from reports the real checks judged."""

from __future__ import annotations

from preflight.history.outliers import OUTLIER_ID, find_outliers, outlier_findings, outlier_result
from preflight.core.model import Status
from tests.unit.history import fleet

NODES = fleet.node_names(16)


def test_a_slow_node_that_still_passes_is_named_among_16_peers():
    report = fleet.fleet_report(NODES, fleet.START, seed=11, slow={"gpu07": 0.88})
    gpu07 = next(r for r in report["results"] if r["node"] == "gpu07" and r["check_id"] == "collectives.local")
    assert gpu07["status"] == "PASS"  # the floor does not catch it
    findings = outlier_findings(report)
    assert findings and {f.node for f in findings} == {"gpu07"}
    assert {f.id for f in findings} == {OUTLIER_ID} and {f.level for f in findings} == {Status.WARN}
    busbw = [o for o in find_outliers(report) if o.name == "nccl (8 GPUs): busbw at 1 GiB"]
    assert len(busbw) == 1 and busbw[0].z < -3.5 and busbw[0].peers == 15
    assert busbw[0].peers_low <= busbw[0].peers_high < busbw[0].median * 1.05
    assert busbw[0].judged  # a threshold judged it, and it passed


def test_a_healthy_fleet_has_no_outliers():
    report = fleet.fleet_report(NODES, fleet.START, seed=12)
    assert find_outliers(report) == []
    result = outlier_result(report)
    assert result.status is Status.PASS and result.findings == []


def test_a_faster_node_is_not_an_outlier_where_higher_is_better():
    report = fleet.fleet_report(NODES, fleet.START, seed=13, slow={"gpu05": 1.15})
    named = find_outliers(report)
    assert all(o.direction != "higher" for o in named)
    assert not any(o.name.endswith("busbw at 1 GiB") for o in named)


def test_a_node_below_its_floor_is_left_to_its_own_finding():
    report = fleet.fleet_report(NODES, fleet.START, seed=14, slow={"gpu09": 0.7})
    gpu09 = next(r for r in report["results"] if r["node"] == "gpu09" and r["check_id"] == "collectives.local")
    assert gpu09["status"] == "FAIL"
    assert not [o for o in find_outliers(report) if o.check_id == "collectives.local"]


def test_too_few_nodes_of_a_kind_are_not_compared():
    report = fleet.fleet_report(fleet.node_names(4), fleet.START, seed=15, slow={"gpu02": 0.8})
    assert find_outliers(report) == []
    assert outlier_result(report) is None


def test_nodes_of_another_kind_are_not_peers():
    """Nodes reporting another GPU model form their own group: too few there to compare."""
    report = fleet.fleet_report(NODES, fleet.START, seed=16, slow={"gpu16": 0.85})
    for result in report["results"]:
        if result["node"] == "gpu16" and result["check_id"] == "gpu.visibility":
            for gpu in result["facts"]["nvml"]["gpus"]:
                gpu["name"] = "NVIDIA H200"
    assert "gpu16" not in {o.node for o in find_outliers(report)}


def test_outlier_result_is_a_cluster_warning():
    report = fleet.fleet_report(NODES, fleet.START, seed=17, slow={"gpu03": 0.88})
    result = outlier_result(report)
    assert result.check_id == OUTLIER_ID and result.status is Status.WARN
    assert {f.node for f in result.findings} == {"gpu03"}
    assert result.to_dict()["findings"][0]["id"] == OUTLIER_ID


def test_a_slow_link_that_passes_is_named_among_the_links():
    """net.bandwidth's link figures, as the check judged them in tests/data/reports/cluster_run.json,
    spread over a ring of 16 nodes: one link carries 30% less than the others and still passes 10 Gbit/s."""
    import copy
    import json

    template = json.loads((fleet.DATA / "reports" / "cluster_run.json").read_text())
    net = next(r for r in template["results"] if r["check_id"] == "net.bandwidth")
    sample = next(m for m in net["measurements"] if m["figure"] == "link" and m["ok"])
    report = fleet.fleet_report(NODES, fleet.START, seed=18)
    links = []
    for i, node in enumerate(NODES):
        pair = f"{node} -> {NODES[(i + 1) % len(NODES)]}"
        factor = 0.7 if i == 5 else 1 + 0.002 * (i % 3)
        links.append({**copy.deepcopy(sample), "name": pair, "at": pair, "node": pair,
                      "value": round(sample["value"] * factor, 2)})
    report["results"].append({**net, "status": "PASS", "findings": [], "measurements": links})
    named = [o for o in find_outliers(report) if o.check_id == "net.bandwidth"]
    assert [o.node for o in named] == [f"{NODES[5]} -> {NODES[6]}"]
    assert named[0].kind == "links" and named[0].peers == 15


def with_gpu_rates(report, slow=None, noise=0.01, seed=5):
    """gpu.visibility's per-GPU matmul rates, spread by `noise` (a GPU's run-to-run spread), one GPU
    slowed: slow = (node, gpu index, factor)."""
    import random

    rng = random.Random(seed)
    for result in report["results"]:
        for m in result["measurements"]:
            if m.get("gpu") is not None:
                m["value"] *= 1 + rng.gauss(0, noise)
                if slow and (result["node"], m["gpu"]) == slow[:2]:
                    m["value"] *= slow[2]
    return report


def test_one_gpu_five_percent_slow_is_fail_slow_naming_that_gpu():
    from preflight.history.outliers import FAIL_SLOW_ID

    # gpu.visibility's rate is the median of three products: a GPU spread of 1% reads as about 0.7%
    report = with_gpu_rates(fleet.fleet_report(NODES, fleet.START, seed=12), slow=("gpu05", 3, 0.95), noise=0.007)
    slow = [f for f in outlier_findings(report) if f.id == FAIL_SLOW_ID]
    assert [(f.component.kind, f.component.nodes, f.component.gpu) for f in slow] == [("gpu", ["gpu05"], 3)]
    assert slow[0].level is Status.WARN
    assert not [f for f in outlier_findings(report) if f.id != FAIL_SLOW_ID]  # no node is named for it


def test_a_healthy_fleets_gpus_have_no_fail_slow():
    report = with_gpu_rates(fleet.fleet_report(NODES, fleet.START, seed=12))
    assert outlier_findings(report) == []


def test_a_slowdown_shared_by_every_gpu_of_a_node_names_no_gpu_and_a_node_far_behind_is_the_nodes_outlier():
    from preflight.history.outliers import FAIL_SLOW_ID, OUTLIER_ID, gpu_lagging

    report = with_gpu_rates(fleet.fleet_report(NODES, fleet.START, seed=12), noise=0.003)
    for result in report["results"]:  # gpu05's cooling: all eight of its GPUs 12% slow together
        for m in result["measurements"]:
            if m.get("gpu") is not None and result["node"] == "gpu05":
                m["value"] *= 0.88
    found = outlier_findings(report)
    assert not [f for f in found if f.id == FAIL_SLOW_ID]
    assert [(f.node, f.component.kind if f.component else None) for f in found if f.id == OUTLIER_ID
            and "median of its GPUs" in f.message] == [("gpu05", "node")]
    # the test itself: a shared slowdown moves the node, not a GPU against its node's others
    values = [1.0] * 40 + [0.9] * 8
    nodes = [name for name in "abcdef" for _ in range(8)]
    gpus, slow = gpu_lagging(values, nodes, "higher")
    assert gpus == [] and [s[0] for s in slow] == ["f"]
