"""The isolation pass's launch side, fed worker output of the recorded shape: per-rank times become
per-node times, a group's GroupResult carries them, and preflight.launch.isolation's straggler search
names a node whose ranks are slow in every group they are in."""

from __future__ import annotations

import copy

from preflight.launch.isolation import GroupResult, isolate
from preflight.launch.isolation_launch import judged_group, node_times
from preflight_checks.collectives.cluster import Params, judge_pair, pair_facts, run_node_times
from tests.conftest import load_facts

NODES = [f"n{i}" for i in range(1, 9)]
SLOW = "n5"


def allreduce_launch(group: list[str], slow_factor: float = 3.0) -> dict:
    """A group's launch result in the shape torchrun.run_launch gives: the recorded three-node run's
    worker report, with one rank per node and each rank's own median time at every size."""
    run = copy.deepcopy(load_facts("collectives_cluster/testbed_3nodes_pass.json")["run"])
    run.update(nodes=list(group), world_size=len(group), rank_nodes={str(r): n for r, n in enumerate(group)})
    result = run["result"]
    result["world_size"] = len(group)
    for size in result["sizes"]:
        size["rank_time_s"] = [size["time_s"] * (slow_factor if n == SLOW else 1.0) * (1 + 0.01 * (r % 3))
                               for r, n in enumerate(group)]
        size["known_sum_wrong_by_rank"] = [0] * len(group)
    result["random_check"]["wrong_by_rank"] = [0] * len(group)
    return run


def test_per_rank_times_become_the_slowest_rank_per_node():
    assert node_times([0.1, 0.3, 0.2, 0.2], {"0": "a", "1": "a", "2": "b", "3": "b"}) == {"a": 0.3, "b": 0.2}
    assert node_times(None, {"0": "a"}) is None and node_times([0.1], {}) is None
    launch = allreduce_launch(["n1", "n5", "n2"])
    times = run_node_times(launch)
    assert set(times) == {"n1", "n5", "n2"} and times["n5"] > 2.5 * times["n1"]


def test_a_group_judged_from_worker_output_carries_its_node_times():
    ok, kept = judged_group(judge_pair(pair_facts(allreduce_launch(["n1", "n2", "n3", "n5"])), Params()))
    assert ok.ok is True and set(ok.times_s) == {"n1", "n2", "n3", "n5"}
    assert ok.times_s == kept["node_times_s"]


def test_worker_output_with_one_slow_rank_names_a_straggler():
    """Every group's busbw passes its floor; only the per-rank times say that n5 is slow."""
    params = Params()
    measured: list[list[str]] = []

    def measure(groups: list[list[str]]) -> list[GroupResult]:
        measured.extend(groups)
        return [judged_group(judge_pair(pair_facts(allreduce_launch(g)), params))[0] for g in groups]

    screen_launch = allreduce_launch(NODES)
    screen = GroupResult(False, note="busbw below its floor", times_s=run_node_times(screen_launch))
    result = isolate(NODES, measure, screen=screen)
    named = [(a.kind, a.members) for a in result.named()]
    assert named == [("straggler", [SLOW])], result.to_dict()["notes"]
    straggler = result.named("straggler")[0]
    assert straggler.figures["time_s"] > 2.5 * straggler.figures["median_s"]
    assert any(SLOW in g and len(g) >= 4 for g in measured)  # measured again among known-good nodes


def test_without_per_rank_times_no_straggler_is_named():
    def measure(groups: list[list[str]]) -> list[GroupResult]:
        out = []
        for g in groups:
            facts = pair_facts(allreduce_launch(g))
            facts.pop("node_times_s", None)
            out.append(judged_group(judge_pair(facts, Params()))[0])
        return out

    result = isolate(NODES, measure, screen=GroupResult(False, note="busbw below its floor"))
    assert result.named("straggler") == []


def test_nodes_on_one_machine_give_no_node_times_and_no_straggler():
    """Network namespaces or containers on one host share its CPUs: a rank's time says how the
    scheduler treated it, so the pass drops the times and names no straggler (the same worker
    output with a slow rank names one above)."""
    from preflight.launch.isolation_launch import without_node_times
    from preflight.launch.nodes import share_a_machine

    probes = {n: {"boot_id": "b-1"} for n in NODES}
    assert share_a_machine(probes, NODES) and share_a_machine(probes, ["n1", "n2"])
    assert not share_a_machine({n: {"boot_id": f"b-{n}"} for n in NODES}, NODES)
    assert not share_a_machine({n: {} for n in NODES}, NODES)  # not known: no reason to drop anything
    params = Params()

    def measure(groups: list[list[str]]) -> list[GroupResult]:
        return [without_node_times(judged_group(judge_pair(pair_facts(allreduce_launch(g)), params))[0])
                for g in groups]

    screen = without_node_times(GroupResult(False, note="busbw below its floor",
                                            times_s=run_node_times(allreduce_launch(NODES))))
    assert screen.times_s is None
    result = isolate(NODES, measure, screen=screen)
    assert result.named("straggler") == []
