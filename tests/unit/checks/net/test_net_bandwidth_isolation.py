"""net.bandwidth judging its adaptive isolation pass (isolation="adaptive", the default).

The facts are made the way the check makes them: the ring screen and then
preflight_checks.net.isolation.adaptive_pass run to its end, with every link measured by the fault
simulator (preflight.launch.isolation_sim: each link a burst of two nodes, its figure times a nominal
rate) in place of iperf3. What the pass decides (which rings, which links, good or bad) is the
check's own code; only the figures are simulated.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Status
from preflight.launch.isolation import round_bound
from preflight.launch.isolation_launch import isolation_method
from preflight.launch.isolation_sim import Fault, FaultModel, racks
from preflight.launch.pairs import ring_rounds
from preflight.launch.recheck import recheck_wanted
from preflight_checks.net.bandwidth import NetBandwidth, Params
from preflight_checks.net.bandwidth_judge import below_floor, met_floor
from preflight_checks.net.isolation import (
    ISOLATION_METHODS, adaptive_pass, group_links, group_result, rounds_given, screen_reason,
)

NODES = [f"n{i}" for i in range(1, 9)]
NOMINAL_GBPS = 10.0
FLOOR = 8.0  # the simulator's own threshold (0.8) at the nominal rate
check = NetBandwidth()


def simulated(model: FaultModel):
    """measure_links over the simulator: one round, each link a group of its two nodes."""
    def measure_links(pairs):
        results = model.measure([list(p) for p in pairs])
        out = {}
        for pair, result in zip(pairs, results):
            if result.figure is None:
                out[pair] = {"error": result.note or "no result"}
            else:
                out[pair] = {"gbps": round(result.figure * NOMINAL_GBPS, 3)}
        return out
    return measure_links


def ring_links(faults: list[Fault], *, seed: int = 3, topology: dict[str, str] | None = None) -> list[dict]:
    """The ring's links as the facts hold them, each measured once over a cluster with `faults`."""
    screen = simulated(FaultModel(NODES, faults, topology=topology, seed=seed, times=False))
    links = []
    for pairs in ring_rounds(NODES):
        for (src, dst), sample in screen(pairs).items():
            links.append({"src": src, "dst": dst, "dst_address": dst, "local": False, "samples": [sample]})
    return links


def facts_for(faults: list[Fault], *, isolated_by: list[Fault] | None = None, budget_s: float = 300.0,
              seed: int = 3, topology: dict[str, str] | None = None) -> dict:
    """The facts of a ring run over NODES with `faults`, and its isolation pass (over a cluster with
    `isolated_by` in place of `faults` when given: a fault that has gone by then)."""
    links = ring_links(faults, seed=seed, topology=topology)
    facts = {"pattern": "ring", "nodes": NODES, "unreachable": [], "addresses": {n: n for n in NODES},
             "streams": 1, "duration_s": 1, "repeats": 1, "probe": {n: {"iperf3": True} for n in NODES},
             "links": links, "rounds": [[list(p) for p in r] for r in ring_rounds(NODES)]}
    reason = screen_reason(links, FLOOR)
    assert reason, "the screen was expected to find something"
    model = FaultModel(NODES, faults if isolated_by is None else isolated_by, topology=topology, seed=seed + 1,
                       times=False)
    facts["isolation"] = adaptive_pass(NODES, simulated(model), min_gbps=FLOOR, budget_s=budget_s, round_s=0.0,
                                       reason=reason, max_rounds=32, topology=topology)
    return json.loads(json.dumps(facts, allow_nan=False))  # what results.jsonl would hold


def evaluate(facts: dict, min_gbps: float = FLOOR):
    return check.evaluate(facts, Params(min_gbps=min_gbps), Expect())


def ids(outcome) -> list[str]:
    return sorted(f.id.removeprefix("net.bandwidth.") for f in outcome.findings if f.level is not Status.PASS)


def attributions(facts: dict) -> list[dict]:
    return facts["isolation"]["isolation"]["attributions"]


# -- the group rings ---------------------------------------------------------------------------------


def test_a_pair_is_measured_both_ways_and_a_bigger_group_as_a_ring_in_node_order():
    order = {n: i for i, n in enumerate(NODES)}
    assert group_links(["n4", "n2"], order) == [("n2", "n4"), ("n4", "n2")]
    assert group_links(["n7", "n1", "n3"], order) == [("n1", "n3"), ("n3", "n7"), ("n7", "n1")]
    assert group_links(["n1"], order) == []


@given(st.sets(st.sampled_from(NODES), min_size=2))
def test_every_link_of_the_screen_is_measured_by_every_group_holding_both_its_ends(members):
    order = {n: i for i, n in enumerate(NODES)}
    links = set(group_links(sorted(members), order))
    screened = [(NODES[i], NODES[(i + 1) % len(NODES)]) for i in range(len(NODES))]
    for src, dst in screened:
        if src in members and dst in members:
            assert (src, dst) in links


def test_a_group_is_bad_with_one_slow_or_failed_link_and_unknown_when_one_cannot_be_measured():
    links = [("n1", "n2"), ("n2", "n3"), ("n3", "n1")]
    fast = {p: {"gbps": 9.0} for p in links}
    assert group_result(links, fast, FLOOR).ok is True
    slow = {**fast, ("n2", "n3"): {"gbps": 1.0}}
    result = group_result(links, slow, FLOOR)
    assert result.ok is False and result.figure == 1.0 and result.note.index("n2 -> n3") < result.note.index("n1 -> n2")
    assert group_result(links, {**fast, ("n3", "n1"): {"error": "Connection refused"}}, FLOOR).ok is False
    local = {**fast, ("n3", "n1"): {"error": "local route", "unmeasurable": True}}
    assert group_result(links, local, FLOOR).ok is None


def test_adaptive_is_the_default_and_unknown_methods_are_refused():
    assert Params().isolation == "adaptive"
    assert isolation_method("off", ISOLATION_METHODS) == "off"
    with pytest.raises(CannotMeasure):
        isolation_method("bisect", ISOLATION_METHODS)


# -- what the pass names -----------------------------------------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_a_slow_node_is_named_and_no_other(node):
    facts = facts_for([Fault("slow-node", (node,), 0.3)])
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL
    assert ids(outcome) == ["isolated-node", "slow-link"]
    named = [a for a in attributions(facts) if not a["ambiguous"]]
    assert [(a["kind"], a["members"]) for a in named] == [("node", [node])]
    assert facts["isolation"]["isolation"]["round_count"] <= round_bound(len(NODES))


@pytest.mark.parametrize("index", range(len(NODES)))
def test_a_broken_ring_link_is_named_as_the_link_and_neither_node_alone(index):
    pair = (NODES[index], NODES[(index + 1) % len(NODES)])
    facts = facts_for([Fault("bad-link", pair, 0.05)])
    outcome = evaluate(facts)
    assert ids(outcome) == ["isolated-link", "slow-link"]
    named = [a for a in attributions(facts) if not a["ambiguous"]]
    assert [(a["kind"], sorted(a["members"])) for a in named] == [("link", sorted(pair))]


def test_a_link_that_fails_outright_is_named_too():
    facts = facts_for([Fault("dead-rank", ("n6",))])  # every burst holding n6 fails, with no figure
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR  # the ring's links through n6 were never measured
    assert "isolated-node" in ids(outcome) and "not-measured" in ids(outcome)
    assert [a["members"] for a in attributions(facts)] == [["n6"]]


def test_every_link_slow_is_ambiguous_not_a_guess():
    facts = facts_for([Fault("slow-node", (n,), 0.3) for n in NODES])
    outcome = evaluate(facts)
    assert ids(outcome) == ["isolation-ambiguous", "slow-link"]
    assert all(a["ambiguous"] for a in attributions(facts))
    assert outcome.status is Status.FAIL  # the slow links themselves are measured facts


def test_a_fault_gone_by_the_isolation_is_not_reproduced():
    facts = facts_for([Fault("slow-node", ("n3",), 0.3)], isolated_by=[])
    outcome = evaluate(facts)
    assert ids(outcome) == ["isolation-not-reproduced", "slow-link"]


def test_a_pass_out_of_time_stops_and_says_so():
    facts = facts_for([Fault("slow-node", ("n3",), 0.3)], budget_s=0.0)
    assert facts["isolation"]["isolation"]["stopped"] and facts["isolation"]["isolation"]["round_count"] == 0
    outcome = evaluate(facts)
    assert ids(outcome) == ["isolation-ambiguous", "slow-link"]


def test_every_round_is_in_the_facts_and_the_details():
    facts = facts_for([Fault("slow-node", ("n5",), 0.3)])
    result = facts["isolation"]["isolation"]
    assert len(result["rounds"]) == result["round_count"] == len(facts["isolation"]["links"])
    for entry, measured in zip(result["rounds"], facts["isolation"]["links"]):
        members = [g["members"] for g in entry["groups"]]
        flat = [n for g in members for n in g]
        assert len(flat) == len(set(flat))  # the groups of a round are disjoint
        assert all(g["note"].startswith("Gbit/s: ") for g in entry["groups"] if g["ok"] is not None)
        assert {link["src"] for link in measured} <= set(flat) and all("gbps" in link for link in measured)
    details = evaluate(facts).details
    assert [d for d in details if d.startswith("isolation round ")][0].startswith("isolation round 1: ")
    assert sum(d.startswith("isolation round ") for d in details) == result["round_count"]


def test_rejudged_with_a_floor_nothing_misses_the_isolation_is_not_reported():
    facts = facts_for([Fault("slow-node", ("n5",), 0.3)])
    outcome = evaluate(facts, min_gbps=1.0)
    assert outcome.status is Status.PASS and ids(outcome) == []
    assert any("isolation pass ran" in d for d in outcome.details)


def test_a_slow_path_between_two_racks_is_named_as_their_boundary():
    topology = racks(NODES, 4)  # n1-n4 in rack00, n5-n8 in rack01: the ring crosses at n4 -> n5 and n8 -> n1
    facts = facts_for([Fault("boundary", ("rack00", "rack01"), 0.3)], topology=topology)
    outcome = evaluate(facts)
    assert ids(outcome) == ["isolated-boundary", "slow-link"]
    named = [a for a in attributions(facts) if not a["ambiguous"]]
    assert [(a["kind"], a["members"]) for a in named] == [("boundary", ["rack00", "rack01"])]


def test_a_slow_node_is_named_with_racks_too():
    facts = facts_for([Fault("slow-node", ("n6",), 0.3)], topology=racks(NODES, 4))
    assert ids(evaluate(facts)) == ["isolated-node", "slow-link"]
    assert [a["members"] for a in attributions(facts) if not a["ambiguous"]] == [["n6"]]


def test_the_screen_calls_for_isolation_on_slow_or_failed_links_only():
    def link(src, dst, local=False, **sample):
        return {"src": src, "dst": dst, "local": local, "samples": [sample] if sample else []}

    fast = [link("n1", "n2", gbps=9.0), link("n2", "n3", gbps=9.5)]
    assert screen_reason(fast, FLOOR) is None
    # A route local to the sender is a configuration error, reported as such, not a fault to isolate.
    assert screen_reason(fast + [link("n3", "n1", local=True, gbps=50.0)], FLOOR) is None
    assert screen_reason(fast + [link("n3", "n1", gbps=1.0)], FLOOR) == "1 ring link below 8 Gbit/s"
    assert "1 ring link failed" in screen_reason(fast + [link("n3", "n1", error="Connection refused")], FLOOR)


# -- the ring measured again when the pass blames nothing (preflight.launch.recheck) -------------------


def test_only_a_ring_link_below_the_floor_is_measured_again_not_a_failed_or_local_one():
    slow = ring_links([Fault("slow-node", ("n3",), 0.3)])
    assert below_floor(slow, FLOOR) and met_floor({"links": slow}, FLOOR) is False
    healthy = ring_links([])
    assert not below_floor(healthy, FLOOR) and met_floor({"links": healthy}, FLOOR) is True
    failed = ring_links([Fault("dead-rank", ("n6",))])  # no figure: an error, not a shortfall
    assert not below_floor(failed, FLOOR) and met_floor({"links": failed}, FLOOR) is None
    local = [{**link, "local": True, "why_local": "127.0.0.1"} if "n3" in (link["src"], link["dst"]) else link
             for link in slow]
    assert not below_floor(local, FLOOR)


def test_a_slow_ring_no_group_reproduces_is_measured_again_and_a_ring_that_meets_the_floor_is_a_transient():
    facts = facts_for([Fault("slow-node", ("n3",), 0.3)], isolated_by=[])  # gone by the isolation pass
    assert recheck_wanted(facts["isolation"]["isolation"]) and below_floor(facts["links"], FLOOR)
    assert evaluate(facts).status is Status.FAIL  # one ring, not measured again: it stands
    healthy = {"links": ring_links([], seed=5)}

    # n3's links at 3 Gbit/s against a floor of 8: under half of it, but no other ring below it: one burst
    far = evaluate({**facts, "rechecks": [healthy, healthy]})
    assert far.status is Status.WARN and ids(far) == ["isolation-not-reproduced", "transient"]
    (finding,) = [f for f in far.findings if f.id == "net.bandwidth.transient"]
    assert "one of them under 50% of it, and no other below it (one burst)" in finding.message
    # at 1 Gbit/s, under a quarter of it: a link dropped out, intermittent even when both rings meet the floor
    out = facts_for([Fault("slow-node", ("n3",), 0.1)], isolated_by=[])
    dropped = evaluate({**out, "rechecks": [healthy, healthy]})
    assert dropped.status is Status.FAIL and ids(dropped) == ["intermittent", "isolation-not-reproduced"]

    near = facts_for([Fault("slow-node", ("n3",), 0.7)], isolated_by=[])  # below the floor, not far below
    assert below_floor(near["links"], FLOOR) and not below_floor(near["links"], FLOOR / 2)
    transient = evaluate({**near, "rechecks": [healthy, healthy]})
    assert transient.status is Status.WARN  # GO: one ring below, the next two met the floor
    assert ids(transient) == ["isolation-not-reproduced", "transient"]
    (finding,) = [f for f in transient.findings if f.id == "net.bandwidth.transient"]
    assert "below its floor in 1 of 3 all-node readings (then slowest " in finding.message
    flapping = evaluate({**near, "rechecks": [{"links": near["links"]}, healthy]})  # below, below, above
    assert flapping.status is Status.FAIL and ids(flapping) == ["intermittent", "isolation-not-reproduced"]

    slow_again = {"links": facts["links"]}
    confirmed = evaluate({**facts, "rechecks": [slow_again, slow_again]})
    assert confirmed.status is Status.FAIL and ids(confirmed) == ["isolation-not-reproduced", "slow-link"]
    (slow,) = [f for f in confirmed.findings if f.id == "net.bandwidth.slow-link"]
    assert "below its floor in 3 of 3 all-node readings" in slow.message

    unmeasured = evaluate({**facts, "rechecks": [{"not_run": "less than 12 s of the check's time was left"}]})
    assert unmeasured.status is Status.FAIL and "not measured again" in unmeasured.summary
    failed = evaluate({**facts, "rechecks": [{"links": ring_links([Fault("dead-rank", ("n6",))])}]})
    assert failed.status is Status.FAIL and "not measured again (n5 -> n6" in failed.summary


def test_a_ring_that_met_its_floor_is_go_only_when_the_second_ring_meets_it_too():
    healthy = {"links": ring_links([], seed=5)}
    first = {"pattern": "ring", "nodes": NODES, "unreachable": [], "addresses": {n: n for n in NODES},
             "streams": 1, "duration_s": 1, "repeats": 1, "probe": {n: {"iperf3": True} for n in NODES},
             "links": ring_links([]), "rounds": [[list(p) for p in r] for r in ring_rounds(NODES)]}
    passed = evaluate({**first, "rechecks": [healthy]})
    assert passed.status is Status.PASS and "met its floor in 2 of 2 all-node readings" in passed.details
    # a flapping link: the first ring in a good burst, the second far below the floor (the pass from it
    # pinned nothing): NO-GO, intermittent, never a GO on the lucky first ring
    flapped = {"links": ring_links([Fault("bad-link", ("n2", "n3"), 0.13)])}
    flapping = evaluate({**first, "rechecks": [flapped]})
    assert flapping.status is Status.FAIL and ids(flapping) == ["intermittent"]
    (finding,) = [f for f in flapping.findings if f.id == "net.bandwidth.intermittent"]
    assert "met its floor first, then fell below it: below its floor in 1 of 2" in finding.message
    slow_once = {"links": ring_links([Fault("bad-link", ("n2", "n3"), 0.7)])}  # below the floor, not far below
    assert ids(evaluate({**first, "rechecks": [slow_once]})) == ["transient"]


def test_a_fault_the_pass_names_is_never_measured_again():
    facts = facts_for([Fault("slow-node", ("n3",), 0.3)])
    assert not recheck_wanted(facts["isolation"]["isolation"])


# -- a link that drops out in single samples while its median passes ----------------------------------


def _three_samples(links: list[dict], drop: dict[tuple[str, str], float] | None = None) -> list[dict]:
    """The ring's links with three samples each (repeats = 3), as iperf3 reads them on a steady fabric;
    a link in `drop` has its second sample at that figure (one measurement in a bad burst)."""
    out = []
    for link in links:
        gbps = link["samples"][0]["gbps"]
        second = (drop or {}).get((link["src"], link["dst"]), gbps * 0.99)
        out.append({**link, "samples": [{"gbps": gbps}, {"gbps": round(second, 3)}, {"gbps": round(gbps * 1.01, 3)}]})
    return out


def _ring_facts(links: list[dict], rechecks: list[list[dict]]) -> dict:
    return {"pattern": "ring", "nodes": NODES, "unreachable": [], "addresses": {n: n for n in NODES},
            "streams": 1, "duration_s": 1, "repeats": 3, "probe": {n: {"iperf3": True} for n in NODES},
            "links": links, "rounds": [[list(p) for p in r] for r in ring_rounds(NODES)],
            "rechecks": [{"links": r} for r in rechecks]}


def _report_of(outcome):
    from preflight.core.model import CheckResult, NodeInfo, RunReport, Scope

    result = CheckResult("net.bandwidth", "cluster", outcome.status, outcome.summary, scope=Scope.CLUSTER,
                         findings=outcome.findings)
    return RunReport(started_at="2026-12-03T00:00:00+00:00", nodes=[NodeInfo(n) for n in NODES],
                     planned=["net.bandwidth"], cluster_checks=["net.bandwidth"], results=[result])


def test_a_link_that_drops_out_in_single_samples_of_two_rings_is_flapping_though_its_medians_pass():
    from preflight.core.blame import blames
    from preflight.core.verdict import Verdict, decide

    steady = _three_samples(ring_links([]))
    healthy = evaluate(_ring_facts(steady, [_three_samples(ring_links([], seed=5))]))
    assert healthy.status is Status.PASS and ids(healthy) == []
    dropped = _three_samples(ring_links([]), {("n2", "n3"): 1.2})  # 1.2 Gbit/s against a floor of 8
    again = _three_samples(ring_links([], seed=5), {("n2", "n3"): 0.9})

    # once: any link's bad second on a large ring; noted, not judged
    once = evaluate(_ring_facts(dropped, [_three_samples(ring_links([], seed=5))]))
    assert once.status is Status.PASS and ids(once) == []
    assert any("n2 -> n3 dropped under 2 Gbit/s once (1.20 Gbit/s, in 1 of the 2" in d for d in once.details)

    twice = evaluate(_ring_facts(dropped, [again]))
    assert twice.status is Status.FAIL and ids(twice) == ["flapping-link"]
    (finding,) = [f for f in twice.findings if f.id == "net.bandwidth.flapping-link"]
    assert "the link n2 -> n3 is flapping: it dropped under 2 Gbit/s in 2 of the 2" in finding.message
    assert "1.20, 0.90" in finding.message and finding.fix
    assert (finding.component.kind, finding.component.nodes, finding.component.confirmed) == \
        ("link", ["n2", "n3"], False)
    report = _report_of(twice)
    assert decide(report).verdict is Verdict.NO_GO
    assert blames(report) == {}  # a link: nobody's own, nothing drained or cordoned for it

    # a sample under half the floor but not under a quarter of it is a slow second, not a drop
    slow_second = _three_samples(ring_links([]), {("n2", "n3"): 3.0})
    assert ids(evaluate(_ring_facts(slow_second, [slow_second]))) == []
    # a link whose median is below the floor is a slow link, judged by the readings, not flapping
    slow = [{**link, "samples": [{"gbps": 1.0}, {"gbps": 1.1}, {"gbps": 9.0}]} if link["src"] == "n2" else link
            for link in steady]
    assert "flapping-link" not in ids(evaluate(_ring_facts(slow, [slow, slow])))


# -- the pass's rounds by default --------------------------------------------------------------------


@pytest.mark.parametrize("fault,count", [("slow-link", 64), ("boundary", 8)])
def test_the_default_pass_has_the_rounds_a_search_at_that_size_takes(fault, count):
    """Under a real fabric's noise a slow link among 64 nodes, or a boundary among 8, takes 20-50 rounds
    to search and confirm; the 120 s (13 rounds) the pass had confirmed 0-17% of them."""
    from preflight.launch.fault_corpus import row
    from preflight.launch.isolation_sim import Fabric
    from preflight.launch.isolation_types import IsolationParams

    def recall(rounds: int) -> float:
        return row(fault, count, 0.05, 0.01, 20, seed=5, params=IsolationParams(max_rounds=rounds), fabric=Fabric())["recall"]

    given = rounds_given(Params(), count)
    assert given >= 44 and recall(given) >= 0.85
    assert recall(rounds_given(Params(isolation_timeout_s=120.0), count)) <= 0.3  # the old budget, side by side


def test_a_ring_just_under_its_floor_that_meets_it_measured_again_at_once_is_a_transient_warn():
    from preflight.launch.recheck import FIRST_AGAIN
    from preflight_checks.net.bandwidth_judge import deep_below

    near = facts_for([Fault("slow-node", ("n3",), 0.7)], isolated_by=[])
    near.pop("isolation")  # measured again at once and met: no pass ran
    assert below_floor(near["links"], FLOOR) and not deep_below(near, FLOOR)  # just under: measured again
    assert deep_below({"links": ring_links([Fault("slow-node", ("n3",), 0.3)])}, FLOOR)  # far under: the pass
    healthy = {"links": ring_links([], seed=5)}
    result = evaluate({**near, "rechecks": [{**healthy, FIRST_AGAIN: True}, healthy]})
    assert result.status is Status.WARN and ids(result) == ["transient"], ids(result)
    (finding,) = [f for f in result.findings if f.id == "net.bandwidth.transient"]
    assert "over it when measured again at once; below its floor in 0 of 2 all-node readings" in finding.message


def test_a_watch_ring_feeds_the_flapping_rule_only_when_a_link_dropped_out_by_its_median():
    # two watch rings at once after the second ring (preflight.launch.recheck): one that merely holds a
    # single bad sample is no reading and gives the flapping-link rule no second chance at a healthy
    # link's rare drop; one whose link dropped out by its median counts: intermittent (NO-GO)
    from preflight.launch.recheck import WATCHING

    dropped = _three_samples(ring_links([]), {("n2", "n3"): 1.2})  # 1.2 Gbit/s against a floor of 8
    steady = _three_samples(ring_links([], seed=5))
    one_sample = _three_samples(ring_links([], seed=5), {("n2", "n3"): 0.9})
    facts = _ring_facts(dropped, [steady])
    quiet = evaluate({**facts, "rechecks": facts["rechecks"] + [{"links": one_sample, WATCHING: True},
                                                                 {"links": steady, WATCHING: True}]})
    assert quiet.status is Status.PASS and ids(quiet) == [], ids(quiet)
    assert any("2 more taken at once, none under 25% of it" in d for d in quiet.details)
    out = [{**link, "samples": [{"gbps": 0.9}] * 3} if (link["src"], link["dst"]) == ("n2", "n3") else link
           for link in steady]
    caught = evaluate({**facts, "rechecks": facts["rechecks"] + [{"links": out, WATCHING: True}]})
    assert caught.status is Status.FAIL and ids(caught) == ["intermittent"], ids(caught)
    (finding,) = caught.findings
    assert "below its floor in 1 of 3 all-node readings, one of them under 25% of it (a part dropped out)" \
        in finding.message
