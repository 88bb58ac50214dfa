"""The shared pieces of the check API that checks lean on."""

from preflight.core.check import Expect, too_few_nodes
from preflight.core.model import Status


def test_too_few_nodes_skips_one_node_unless_several_are_expected():
    one = too_few_nodes(["n1"], [], Expect(), single="nothing to pair", nothing="no pair measured")
    assert one.status is Status.SKIP and one.summary == "one node: nothing to pair"
    expected = too_few_nodes(["n1"], [], Expect(nodes=3), single="nothing to pair", nothing="no pair measured")
    assert expected.status is Status.ERROR
    assert expected.summary == "the configuration expects 3 nodes but this run has 1: no pair measured"


def test_too_few_nodes_names_the_unreachable_and_lets_two_through():
    lost = too_few_nodes(["n1"], ["n2", "n3"], Expect(), single="-", nothing="no pair measured")
    assert lost.status is Status.ERROR
    assert lost.summary == "only 1 of 3 nodes reachable (n2, n3 unreachable): no pair measured"
    assert too_few_nodes(["n1", "n2"], ["n3"], Expect(nodes=3), single="-", nothing="-") is None
