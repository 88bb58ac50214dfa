"""Adaptive fault isolation (preflight.launch.isolation) against the seeded fault simulator.

The code under test is the real search; only the cluster is simulated (preflight.launch.isolation_sim),
through the same measure() interface the checks give it. Small N, fixed seeds.
"""

from __future__ import annotations

import json

import pytest

from preflight.launch.isolation import GroupResult, IsolationParams, Stop, isolate, round_bound
from preflight.launch.isolation_sim import FAULT_MODELS, Fault, FaultModel, node_names, racks, scenario, score_isolation


def checked(measure):
    """The measure, asserting what every round must be: disjoint groups of known nodes."""
    def run(groups):
        members = [n for g in groups for n in g]
        assert len(members) == len(set(members)), groups
        assert all(len(g) >= 2 for g in groups), groups
        return measure(groups)
    return run


def run(nodes, model, **kwargs):
    result = isolate(nodes, checked(model.measure), topology=kwargs.pop("topology", model.topology or None), **kwargs)
    assert result.round_count == model.rounds
    return result


def named(result):
    return {(a.kind, tuple(a.members)) for a in result.named()}


@pytest.mark.parametrize("fault", FAULT_MODELS)
def test_every_fault_model_is_attributed_to_the_right_component(fault):
    for seed in range(12):
        nodes, topology, model = scenario(fault, 16, seed)
        result = run(nodes, model, topology=topology)
        scored = score_isolation(result, model)
        assert scored["right"], (seed, model.faults, [(a.kind, a.members, a.ambiguous) for a in result.attributions])
        assert not scored["false_blame"]


@pytest.mark.parametrize("count", [8, 64, 1024])
@pytest.mark.parametrize("kind", ["slow-node", "dead-rank"])
def test_one_bad_node_is_named_within_the_round_bound(count, kind):
    nodes = node_names(count)
    for bad in (nodes[0], nodes[count // 3], nodes[-1]):
        model = FaultModel(nodes, [Fault(kind, (bad,), 0.5)], seed=count)
        result = run(nodes, model)
        assert named(result) == {("node", (bad,))}
        assert result.round_count <= round_bound(count) == 2 * {8: 3, 64: 6, 1024: 10}[count] + 4
        assert result.named()[0].confidence == "confirmed"


def test_a_fault_between_two_racks_is_named_as_that_boundary():
    nodes = node_names(32)
    topology = racks(nodes, 4)
    model = FaultModel(nodes, [Fault("boundary", ("rack02", "rack05"), 0.4)], topology=topology, seed=3)
    result = run(nodes, model)
    assert named(result) == {("boundary", ("rack02", "rack05"))}
    assert not result.named("node") and not result.named("link")
    # The evidence: two different pairs across the same two racks were bad.
    boundary = result.named("boundary")[0]
    pairs = boundary.figures["pairs"]
    assert len(pairs) == 2 and pairs[0] != pairs[1]
    assert all(sorted(topology[n] for n in pair) == ["rack02", "rack05"] for pair in pairs)


def test_a_bad_link_across_racks_is_a_link_not_the_boundary():
    nodes = node_names(32)
    model = FaultModel(nodes, [Fault("bad-link", ("n05", "n22"), 0.3)], topology=racks(nodes, 4), seed=5)
    result = run(nodes, model)
    assert named(result) == {("link", ("n05", "n22"))}


def test_a_bad_link_names_both_nodes_and_blames_neither():
    nodes = node_names(64)
    model = FaultModel(nodes, [Fault("bad-link", ("n11", "n40"), 0.3)], seed=2)
    result = run(nodes, model)
    assert named(result) == {("link", ("n11", "n40"))}
    assert {"n11", "n40"} <= set(result.good)


def test_two_nodes_alone_are_ambiguous_with_their_candidates():
    nodes = node_names(2)
    result = run(nodes, FaultModel(nodes, [Fault("slow-node", ("n01",), 0.4)]))
    (found,) = result.attributions
    assert found.ambiguous and found.kind == "unexplained" and found.members == ["n00", "n01"]
    assert {(c["kind"], tuple(c["members"])) for c in found.candidates} == {
        ("node", ("n00",)), ("node", ("n01",)), ("link", ("n00", "n01"))}
    assert not result.named()


def test_a_link_between_nodes_alone_in_their_groups_is_link_or_boundary():
    nodes = node_names(8)
    alone = {n: f"leaf{i}" for i, n in enumerate(nodes)}  # nothing else across the same two groups
    result = run(nodes, FaultModel(nodes, [Fault("bad-link", ("n02", "n06"), 0.3)], topology=alone, seed=1))
    (found,) = result.attributions
    assert found.ambiguous and found.members == ["n02", "n06"]
    assert {c["kind"] for c in found.candidates} == {"link", "boundary"}


def test_every_group_bad_is_one_ambiguous_set_not_a_list_of_nodes():
    nodes = node_names(16)
    model = FaultModel(nodes, [Fault("slow-node", (n,), 0.5) for n in nodes], seed=4)
    result = run(nodes, model)
    (found,) = result.attributions
    assert found.ambiguous and found.members == nodes
    assert not result.named() and not result.good


def test_a_straggler_is_named_with_its_time_against_the_median():
    nodes = node_names(64)
    model = FaultModel(nodes, [Fault("straggler", ("n33",), 2.0)], seed=7)
    result = run(nodes, model)
    assert named(result) == {("straggler", ("n33",))}
    figures = result.named("straggler")[0].figures
    assert figures["slow_in"] >= 2 and figures["slow_in"] * 2 > figures["observed"]
    assert figures["time_s"] > figures["median_s"] * 1.25
    assert 1.6 < figures["ratio"] < 2.5  # 2.0 under 5% noise


def test_noise_alone_names_nothing():
    for seed in range(20):
        nodes = node_names(64)
        result = run(nodes, FaultModel(nodes, [], seed=seed, noise=0.05))
        assert result.attributions == [] and result.round_count <= 2


def test_straggler_and_dead_rank_together_are_both_named():
    nodes = node_names(32)
    model = FaultModel(nodes, [Fault("dead-rank", ("n04",)), Fault("straggler", ("n05",), 1.8)], seed=9)
    result = run(nodes, model)
    assert named(result) == {("node", ("n04",)), ("straggler", ("n05",))}


def test_the_rounds_show_how_the_verdict_was_reached_and_are_json():
    nodes = node_names(16)
    model = FaultModel(nodes, [Fault("slow-node", ("n09",), 0.4)], seed=1)
    result = run(nodes, model)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["round_count"] == len(data["rounds"]) == model.rounds
    assert data["rounds"][0]["groups"][0]["members"] == nodes  # the screen: everyone at once
    assert data["rounds"][0]["groups"][0]["ok"] is False
    (found,) = data["attributions"]
    assert found["kind"] == "node" and found["members"] == ["n09"] and found["rounds"]
    assert set(found["rounds"]) <= {r["round"] for r in data["rounds"]}
    # Every round it cites measured n09 in a bad group.
    for index in found["rounds"]:
        groups = data["rounds"][index - 1]["groups"]
        assert any("n09" in g["members"] and g["ok"] is False for g in groups)


def test_the_same_seed_gives_the_same_rounds():
    first = [isolate(n, m.measure, topology=t).to_dict() for n, t, m in [scenario("two-faults", 32, 5)]]
    second = [isolate(n, m.measure, topology=t).to_dict() for n, t, m in [scenario("two-faults", 32, 5)]]
    assert first == second


def test_a_given_screen_saves_its_round():
    nodes = node_names(64)
    fresh = run(nodes, FaultModel(nodes, [Fault("dead-rank", ("n20",))], seed=2))
    model = FaultModel(nodes, [Fault("dead-rank", ("n20",))], seed=2)
    given = run(nodes, model, screen=GroupResult(False, note="timed out"))
    assert named(given) == named(fresh) == {("node", ("n20",))}
    assert given.round_count == fresh.round_count - 1


def test_a_measure_that_stops_leaves_the_unfinished_search_ambiguous():
    nodes = node_names(64)
    model = FaultModel(nodes, [Fault("slow-node", ("n10",), 0.4)], seed=1)
    calls = []

    def measure(groups):
        calls.append(1)
        if len(calls) > 2:
            raise Stop("out of time")
        return model.measure(groups)

    result = isolate(nodes, measure)
    assert result.stopped == "out of time" and result.round_count == 2
    (found,) = result.attributions
    assert found.ambiguous and "n10" in found.members and len(found.members) < len(nodes)


def test_a_round_limit_is_kept():
    nodes = node_names(64)
    model = FaultModel(nodes, [Fault("bad-link", ("n01", "n60"), 0.3)], seed=1)
    result = run(nodes, model, params=IsolationParams(max_rounds=3))
    assert result.round_count == 3 and result.stopped
    assert all(a.ambiguous for a in result.attributions) and result.attributions


def test_binary_splitting_gives_the_same_answers():
    for fault in ("slow-node", "bad-link", "two-faults"):
        for seed in range(5):
            nodes, topology, model = scenario(fault, 32, seed)
            result = run(nodes, model, topology=topology, params=IsolationParams(arity=2))
            assert score_isolation(result, model)["right"], (fault, seed)


def test_a_link_between_good_parts_is_searched_beside_a_bad_node_not_after_it():
    # n05 slow, and a link between two parts of the first split that were each good: the good parts
    # together are bad (twice), and the link's search runs beside the node's confirmation, so both
    # take about as many rounds as the link alone, not the node's rounds plus the link's
    nodes = node_names(64)
    link = Fault("bad-link", ("n20", "n50"), 0.3)
    alone = run(nodes, FaultModel(nodes, [link], noise=0.0, seed=1))
    both = run(nodes, FaultModel(nodes, [Fault("slow-node", ("n05",), 0.5), link], noise=0.0, seed=1))
    assert {(a.kind, tuple(a.members), a.confidence) for a in both.attributions} == {
        ("node", ("n05",), "confirmed"), ("link", ("n20", "n50"), "confirmed")}
    assert both.round_count <= alone.round_count + 3  # the node measured once more later: a round or so
    assert any("good parts of a split together" in p for r in both.rounds for p in r.purposes)


def scripted_times(node, times):
    """A healthy fleet whose groups all meet the floor, every node 1.0 s but `node`, whose successive
    observations take `times` (then 1.0 s): a node's time drawn from a heavy tail, read again."""
    left = list(times)

    def measure(groups):
        out = []
        for group in groups:
            took = {n: 1.0 + 0.001 * i for i, n in enumerate(group)}
            if node in group:
                took[node] = left.pop(0) if left else 1.0
            out.append(GroupResult(True, figure=1.0, times_s=took))
        return out
    return measure


def test_the_reading_that_made_a_node_a_suspect_is_not_counted_as_a_straggler():
    """Slow in the screen (which chose it out of all 64), then slow in two of the first four readings
    among known-good nodes: three slow of five counted the screen and named a healthy node; without it,
    two of four is half, so it is read again, and two of five is not most of them."""
    nodes = node_names(64)
    result = isolate(nodes, scripted_times("n33", [1.6, 1.6, 1.0, 1.6, 1.0]))
    assert result.named("straggler") == [], result.to_dict()["notes"]
    assert any("n33 was slow in 2 of 5 observations: not a straggler" in n for n in result.to_dict()["notes"])


def test_a_straggler_slow_in_half_its_readings_is_read_again_and_named():
    """A real straggler under heavy noise: slow, then slow in two of four readings and in the one
    after: three of five, named (stopping at two of four, half, would have let it go)."""
    nodes = node_names(64)
    result = isolate(nodes, scripted_times("n33", [1.6, 1.6, 1.0, 1.6, 1.0, 1.6]))
    (found,) = result.named("straggler")
    assert (found.confidence, found.figures["slow_in"], found.figures["observed"]) == ("confirmed", 3, 5)


def test_a_straggler_is_named_on_three_readings_after_the_one_that_chose_it():
    nodes = node_names(64)
    result = isolate(nodes, scripted_times("n33", [1.6] * 4))
    (found,) = result.named("straggler")
    assert found.members == ["n33"] and found.confidence == "confirmed"
    assert (found.figures["slow_in"], found.figures["observed"]) == (3, 3)
    assert found.evidence[0].endswith("the reading that made it a suspect, not counted")
    assert not any("not counted" in line for line in found.evidence[1:])


def lucky_slow(node, lucky, upto=16):
    """A healthy fleet (figure 1.0, floor 0.8) but `node`, 30% slow: every group with it reads 0.7 (0.45
    when it holds more than `upto` nodes: a burst's bad luck), but its first `lucky` groups of three to
    `upto` nodes, which read 1.0 (a burst's good luck)."""
    left = [lucky]

    def measure(groups):
        out = []
        for group in groups:
            slow = node in group
            if slow and 2 < len(group) <= upto and left[0] > 0:
                left[0] -= 1
                slow = False
            out.append(GroupResult(not slow, figure=(0.45 if len(group) > upto else 0.7) if slow else 1.0))
        return out
    return measure


def test_a_node_another_search_confirmed_is_not_confirmed_again_for_every_pair_it_was_bad_in():
    """A slow node that read good once in its part is found by the cross search, paired with one node
    after another; each pair's search waited for the node while the first confirmed it. Each went on
    to confirm it again, four rounds of one node each: the pass ran out of rounds and blamed nothing.
    A pair whose end was confirmed meanwhile is explained by that blame."""
    nodes = node_names(64)
    result = isolate(nodes, checked(lucky_slow("n09", 1)))
    confirming = [r.index for r in result.rounds for g, p in zip(r.groups, r.purposes)
                  if "n09" in g and "known-good node" in p]
    assert [(a.kind, a.members, a.confidence) for a in result.attributions] == [("node", ["n09"], "confirmed")]
    assert len(confirming) <= 2 * IsolationParams().confirm_of, confirming
    assert any("n09 confirmed at fault by another search" in n for n in result.notes), result.notes
