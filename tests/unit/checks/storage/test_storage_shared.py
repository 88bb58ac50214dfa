"""storage.shared judged from facts recorded on the namespace test bed (tests/cluster/record_data.py):
three nodes sharing a directory, and the same with node 3 seeing a private tmpfs there instead."""

from __future__ import annotations

import copy
import json

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.storage.shared import Params, StorageShared
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "storage"
check = StorageShared()


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())["facts"]


def test_shared_directory_passes():
    facts = recorded("facts_shared.json")
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    assert [(m.node, m.value, m.threshold) for m in outcome.measurements] == [("n1", 3, 3), ("n2", 3, 3), ("n3", 3, 3)]


def test_a_node_with_its_own_directory_fails_naming_it():
    facts = recorded("facts_node3_private.json")
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["storage.shared.not-shared"]
    assert "2 separate views (n1, n2; n3)" in outcome.findings[0].message  # the views are named, node by node
    assert "n3 does not see the tokens written by n1, n2" in outcome.details
    assert "n1 does not see the token written by n3" in outcome.details
    assert any("filesystem types differ" in d and "n3 tmpfs" in d for d in outcome.details)
    failing = {m.node for m in outcome.measurements if m.ok is False}
    assert failing == {"n1", "n2", "n3"}  # everyone misses someone's token


def test_one_way_visibility_is_named_pair_by_pair():
    facts = copy.deepcopy(recorded("facts_shared.json"))
    facts["seen"]["n2"]["n1"] = False  # derived: n2 misses only n1's token
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["storage.shared.not-shared"]
    assert "n2 does not see n1" in outcome.findings[0].message and "n3" not in outcome.findings[0].message


def test_a_node_that_cannot_write_fails_with_the_reason():
    facts = copy.deepcopy(recorded("facts_shared.json"))
    facts["writes"]["n2"] = {"written": False, "error": "cannot create a file there (Read-only file system)"}
    for row in facts["seen"].values():
        row.pop("n2")
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["storage.shared.cannot-write"]
    assert outcome.findings[0].message.startswith("n2 ") and "Read-only file system" in outcome.findings[0].message


def test_read_back_that_could_not_run_is_error():
    facts = copy.deepcopy(recorded("facts_shared.json"))
    facts["read_errors"] = {"n3": "n3 could not be reached: Connection refused"}
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["storage.shared.read-failed"]
    assert "n3" in outcome.findings[0].message


def test_no_directory_configured_is_skip_with_the_reason():
    outcome = check.evaluate({"dir": None, "nodes": ["a", "b"], "unreachable": []}, Params(), Expect(nodes=2))
    assert outcome.status is Status.SKIP and finding_ids(outcome) == ["storage.shared.no-dir"]
    assert outcome.remediation == [check.fixes["no-dir"]]  # how to configure it
    # With several nodes expected, the skip blocks the verdict: a multi-node run must name the directory.
    assert check.expected_to_run(Expect(nodes=2)) and not check.expected_to_run(Expect(nodes=1))


def test_one_node():
    facts = {"dir": "/ckpt", "nodes": ["a"], "unreachable": []}
    assert finding_ids(check.evaluate(facts, Params(dir="/ckpt"), Expect())) == ["storage.shared.one-node"]
    assert finding_ids(check.evaluate(facts, Params(dir="/ckpt"), Expect(nodes=3))) == ["storage.shared.nodes-missing"]


def test_unreachable_nodes_are_noted():
    facts = copy.deepcopy(recorded("facts_shared.json"))
    facts["unreachable"] = ["n4"]
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.PASS and any("unreachable: n4" in d for d in outcome.details)
    alone = check.evaluate({"dir": "/ckpt", "nodes": ["a"], "unreachable": ["b"]}, Params(dir="/ckpt"), Expect())
    assert alone.status is Status.ERROR and finding_ids(alone) == ["storage.shared.nodes-unreachable"]


def test_a_node_not_reached_while_writing_is_error_not_fail():
    facts = copy.deepcopy(recorded("facts_shared.json"))
    facts["writes"]["n2"] = {"written": False, "unreachable": True,
                             "error": "n2 could not be reached: ssh: connect to host n2 port 22: Connection refused"}
    for row in facts["seen"].values():
        row.pop("n2")
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["storage.shared.unreachable"]
    assert "n2" in outcome.findings[0].message


def test_findings_have_ids():
    facts = recorded("facts_node3_private.json")
    outcome = check.evaluate(facts, Params(dir=facts["dir"]), Expect())
    assert [f.id for f in outcome.findings] == ["storage.shared.not-shared"]
    assert "findmnt" in outcome.findings[0].fix
