"""net.bandwidth: schedules, iperf3 output parsing and judging, from output recorded on the test bed.

tests/data/net/ holds what iperf3 and the check really printed on three namespace nodes with node 2's
link shaped to 2 Gbit/s (tests/cluster/record_data.py). Variants (no iperf3, a local route, an
unreachable node) are derived from those records and say so.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.net.iperf import parse_client_output, summarize_sample
from preflight.launch.pairs import full_rounds, ring_rounds
from preflight_checks.net.bandwidth import INSTALL_HINT, NetBandwidth, Params
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "net"
SHAPED_RATE_GBPS = 2.0  # the tbf rate of node 2's link when the data was recorded
check = NetBandwidth()


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())["facts"]


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def node_disjoint(pairs) -> bool:
    nodes = [n for pair in pairs for n in pair]
    return len(nodes) == len(set(nodes))


# -- schedules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(2, 12))
def test_ring_measures_every_successor_link_once_in_rounds_of_disjoint_pairs(n):
    names = [f"n{i}" for i in range(n)]
    rounds = ring_rounds(names)
    links = [pair for r in rounds for pair in r]
    expected = [(names[i], names[(i + 1) % n]) for i in range(n)] if n > 2 else [("n0", "n1"), ("n1", "n0")]
    assert sorted(links) == sorted(expected)
    assert all(node_disjoint(r) for r in rounds)
    # Two rounds when the ring splits into two matchings, three for an odd ring (which cannot).
    assert len(rounds) == (3 if n % 2 and n > 2 else 2)


@pytest.mark.parametrize("n", range(2, 10))
def test_full_measures_every_ordered_pair_once_in_rounds_of_disjoint_pairs(n):
    names = [f"n{i}" for i in range(n)]
    rounds = full_rounds(names)
    links = [pair for r in rounds for pair in r]
    assert sorted(links) == sorted(itertools.permutations(names, 2))
    assert all(node_disjoint(r) for r in rounds)
    tournament_rounds = n - 1 if n % 2 == 0 else n
    assert len(rounds) == 2 * tournament_rounds  # each tournament round, one direction then the other


def test_schedules_of_one_node_are_empty():
    assert ring_rounds(["a"]) == [] and full_rounds(["a"]) == []


# -- iperf3 output -------------------------------------------------------------------------------


def test_parse_recorded_client_output_sums_the_receiver_figures():
    per_port = parse_client_output(lines("client_output_shaped.txt"))
    assert sorted(per_port) == ["5201", "5202"]
    reports = [per_port[p]["report"] for p in ("5201", "5202")]
    received = [r["end"]["sum_received"]["bits_per_second"] / 1e9 for r in reports]
    sent = [r["end"]["sum_sent"]["bits_per_second"] / 1e9 for r in reports]
    sample = summarize_sample(per_port, streams=2)
    assert sample["gbps"] == pytest.approx(sum(received), abs=1e-3)
    assert sample["gbps"] != pytest.approx(sum(sent), abs=1e-4)  # the receiver's figure, not the sender's
    assert sample["connected"] == [["198.18.0.11", "198.18.0.12"]]
    # Together the processes cannot beat the shaper, and they do come close to it.
    assert 0.8 * SHAPED_RATE_GBPS < sample["gbps"] <= SHAPED_RATE_GBPS


def test_unshaped_link_is_faster_than_the_shaped_one():
    fast = summarize_sample(parse_client_output(lines("client_output_fast.txt")), streams=2)
    shaped = summarize_sample(parse_client_output(lines("client_output_shaped.txt")), streams=2)
    assert fast["gbps"] > 2 * shaped["gbps"]


def test_connection_refused_is_an_error_sample_not_a_figure():
    sample = summarize_sample(parse_client_output(lines("client_output_refused.txt")), streams=2)
    assert "gbps" not in sample
    assert "Connection refused" in sample["error"]


def test_missing_client_reports_are_an_error():
    per_port = parse_client_output(lines("client_output_shaped.txt"))
    del per_port["5202"]
    sample = summarize_sample(per_port, streams=2)
    assert "gbps" not in sample and "did not report" in sample["error"]


def test_truncated_json_is_an_error():
    text = lines("client_output_shaped.txt")
    cut = text.index("@@stderr 5201")
    broken = text[: cut - 40] + text[cut:]
    sample = summarize_sample(parse_client_output(broken), streams=2)
    assert "gbps" not in sample and "port 5201" in sample["error"]


# -- judging -------------------------------------------------------------------------------------


def test_ring_with_one_shaped_node_fails_naming_its_links_and_no_other():
    facts = recorded("facts_ring_3nodes_n2_shaped.json")
    outcome = check.evaluate(facts, Params(min_gbps=4), Expect())
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["net.bandwidth.slow-link"]
    failing = {m.node for m in outcome.measurements if m.ok is False}
    assert failing == {"n1 -> n2", "n2 -> n3"}
    slowest = min((m for m in outcome.measurements), key=lambda m: m.value)
    assert "n3 -> n1" not in outcome.findings[0].message and f"slowest {slowest.node}" in outcome.findings[0].message
    for m in outcome.measurements:
        assert m.unit == "Gbit/s" and m.threshold == 4 and m.comparison == ">=" and len(m.samples) == 3
    assert outcome.remediation == [check.fixes["slow-link"]]  # iperf3 is there; installing it is no fix


def test_full_with_one_shaped_node_fails_every_link_touching_it():
    facts = recorded("facts_full_3nodes_n2_shaped.json")
    outcome = check.evaluate(facts, Params(min_gbps=4), Expect())
    assert outcome.status is Status.FAIL
    failing = {m.node for m in outcome.measurements if m.ok is False}
    assert failing == {"n1 -> n2", "n2 -> n1", "n2 -> n3", "n3 -> n2"}
    assert {m.node for m in outcome.measurements} == {f"{a} -> {b}" for a, b in itertools.permutations(["n1", "n2", "n3"], 2)}


def test_judged_on_the_median_of_the_samples():
    facts = recorded("facts_ring_3nodes_n2_shaped.json")
    for m in check.evaluate(facts, Params(min_gbps=1), Expect()).measurements:
        assert m.value == pytest.approx(sorted(m.samples)[1], abs=1e-3)


def test_a_low_enough_threshold_passes_and_names_the_slowest_link():
    facts = recorded("facts_ring_3nodes_n2_shaped.json")
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    slowest = min(outcome.measurements, key=lambda m: m.value)
    assert f"slowest {slowest.node}" in outcome.summary  # the PASS summary names the slowest link


def test_matrix_has_every_pair():
    facts = recorded("facts_full_3nodes_n2_shaped.json")
    matrix = facts["matrix_gbps"]
    assert set(matrix) == {"n1", "n2", "n3"}
    assert all(set(row) == {"n1", "n2", "n3"} - {src} for src, row in matrix.items())
    assert all(isinstance(v, float) for row in matrix.values() for v in row.values())


def test_a_local_route_is_error_even_with_a_fast_figure():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    probe = json.loads((DATA / "probe_n1.json").read_text())["probe"]
    own = probe["targets"]["198.18.0.11"]  # what the probe on n1 said about n1's own address
    link = next(link for link in facts["links"] if link["src"] == "n3")
    link.update(local=own["local"], why_local=own["why"])  # derived: as if n3's target were its own address
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.local-route"]
    assert outcome.findings[0].message.startswith("n3 -> n1:")
    local = next(m for m in outcome.measurements if m.node == "n3 -> n1")
    assert local.value is None and local.ok is False


def test_iperf3_connected_to_itself_is_error():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    link = next(link for link in facts["links"] if link["src"] == "n3")
    for sample in link["samples"]:
        sample["connected"] = [["198.18.0.13", "198.18.0.13"]]
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.local-route"]
    assert outcome.findings[0].message.startswith("n3 -> n1:")


def test_probe_recorded_on_the_test_bed_tells_local_from_remote():
    targets = json.loads((DATA / "probe_n1.json").read_text())["probe"]["targets"]
    assert targets["198.18.0.12"]["local"] is False
    assert targets["198.18.0.11"]["local"] is True and "address of this node" in targets["198.18.0.11"]["why"]
    assert targets["127.0.0.1"]["local"] is True and "loopback" in targets["127.0.0.1"]["why"]


def test_no_iperf3_is_error_with_install_instructions():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    facts["probe"]["n3"]["iperf3"] = None  # derived: as if n3 had no iperf3
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.no-iperf3"]
    assert "n3" in outcome.findings[0].message
    assert outcome.remediation == [INSTALL_HINT]


def test_a_link_never_measured_is_error():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    link = next(link for link in facts["links"] if link["src"] == "n3")
    link["samples"] = [{"error": "port 5201: unable to connect to server: Connection refused"}]
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.not-measured"]
    assert outcome.findings[0].message.startswith("n3 -> n1:")


def test_one_failed_repeat_out_of_three_still_judges_the_others():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    link = next(link for link in facts["links"] if link["src"] == "n3")
    link["samples"][0] = {"error": "port 5201: the server is busy running a test"}
    outcome = check.evaluate(facts, Params(min_gbps=1), Expect())
    assert outcome.status is Status.PASS
    assert any("1 failed attempt" in d for d in outcome.details)


def test_unreachable_nodes_are_noted_and_the_rest_judged():
    facts = copy.deepcopy(recorded("facts_ring_3nodes_n2_shaped.json"))
    facts["unreachable"] = ["n4"]
    outcome = check.evaluate(facts, Params(min_gbps=4), Expect())
    assert outcome.status is Status.FAIL
    assert any("unreachable: n4" in d for d in outcome.details)


def test_one_node_is_skip_unless_several_are_expected():
    facts = {"nodes": ["solo"], "unreachable": [], "links": []}
    assert finding_ids(check.evaluate(facts, Params(), Expect())) == ["net.bandwidth.one-node"]
    outcome = check.evaluate(facts, Params(), Expect(nodes=4))
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.nodes-missing"]
    assert check.expected_to_run(Expect(nodes=4)) and not check.expected_to_run(Expect())


def test_only_one_reachable_node_is_error():
    outcome = check.evaluate({"nodes": ["a"], "unreachable": ["b", "c"], "links": []}, Params(), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.nodes-unreachable"]
    assert "b, c" in outcome.findings[0].message


def test_nothing_measured_is_never_pass():
    facts = {"nodes": ["a", "b"], "unreachable": [], "links": [], "probe": {"a": {"iperf3": "/x"}, "b": {"iperf3": "/x"}}}
    outcome = check.evaluate(facts, Params(), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["net.bandwidth.nothing-measured"]


def test_findings_have_ids_and_links_declare_their_figure():
    facts = recorded("facts_ring_3nodes_n2_shaped.json")
    outcome = check.evaluate(facts, Params(min_gbps=4), Expect())
    assert [f.id for f in outcome.findings] == ["net.bandwidth.slow-link"]
    assert "ethtool" in outcome.findings[0].fix
    assert all(m.figure == "link" and m.at == m.node == m.name for m in outcome.measurements)
    missing = copy.deepcopy(facts)
    missing["probe"]["n3"]["iperf3"] = None
    assert "net.bandwidth.no-iperf3" in {f.id for f in check.evaluate(missing, Params(min_gbps=1), Expect()).findings}
