from dataclasses import replace

from preflight.check import Expect
from preflight.model import Status
from preflight_checks.node_environment import Params, NodeEnvironment
from tests.conftest import load_facts

CHECK = NodeEnvironment()


def evaluate(facts, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), Expect())


def test_tuned_gpu_node_passes():
    outcome = evaluate(load_facts("node_environment/healthy_gpu_node.json"))
    assert outcome.status is Status.PASS, outcome.details
    shm = next(m for m in outcome.measurements if m.name == "/dev/shm size")
    assert shm.ok and shm.value > 1000


def test_docker_default_shm_fails_and_names_the_cause():
    outcome = evaluate(load_facts("node_environment/docker_defaults.json"))
    assert outcome.status is Status.FAIL
    assert "/dev/shm is 0.06 GiB" in outcome.summary
    details = " ".join(outcome.details)
    assert "locked-memory limit is 64 KiB" in details
    assert "open-files limit is 1024" in details and "hard limit allows raising it" in details


def test_loopback_hostname_is_explained():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["hostname_addresses"] = ["127.0.1.1"]
    facts["env"] = {}
    outcome = evaluate(facts)
    assert outcome.status is Status.WARN
    assert "resolves only to 127.0.1.1" in outcome.summary and "rendezvous" in outcome.summary


def test_loopback_hostname_notes_interface_pinning():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["hostname_addresses"] = ["127.0.0.1"]
    outcome = evaluate(facts)
    assert "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME is set" in outcome.summary


def test_thresholds_are_parameters():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    assert evaluate(facts, min_free_disk_gib=10_000).status is Status.WARN
    assert evaluate(facts, min_shm_gib=2048).status is Status.FAIL
    relaxed = evaluate(load_facts("node_environment/docker_defaults.json"), min_shm_gib=0.05,
                       require_unlimited_memlock=False, min_open_files=1024)
    assert relaxed.status is Status.PASS, relaxed.details


def test_missing_shm_and_unreadable_disk_fail():
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts["shm_total_bytes"] = None
    facts["disks"] = {"/gone": {"error": "No such file or directory"}}
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL
    assert any("/dev/shm is missing" in d for d in outcome.details)
    assert any("cannot read free space of /gone" in d for d in outcome.details)
