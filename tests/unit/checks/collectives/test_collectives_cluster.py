"""collectives.cluster judged from recorded and built facts, and its pure helpers.

Recorded facts (tests/data/collectives_cluster/record.py) come from real torchrun + gloo runs: two
local nodes, and three namespace nodes over ssh; the GPU ones are built and say so in "_source".
"""

from __future__ import annotations

import copy
import json
import itertools

import pytest

from preflight.core.check import Expect
from preflight.launch.torchrun import torchrun_argv
from preflight.launch.nodes import (
    choose_backend,
    coordinator_ip,
    is_loopback,
    loopback_findings,
    shared_machine_findings,
)
from preflight.launch.pairs import round_robin
from preflight.launch.torchrun_log import interpret_run, summarize_agent
from preflight.core.model import Status
from preflight_checks.collectives.cluster import (
    CollectivesCluster,
    Params,
    attribute,
    pairwise_reason,
    run_figures,
)
from tests.conftest import finding_ids, load_facts


def facts_of(name: str) -> dict:
    return load_facts(f"collectives_cluster/{name}")


def evaluate(facts: dict, expect: Expect | None = None, **overrides):
    check = CollectivesCluster()
    params = check.params_from({**facts.get("_params", {}), **overrides})
    return check.evaluate(facts, params, expect or Expect())


def fired(outcome) -> list[tuple[str, Status]]:
    """(kind, level) of each finding that fired: what the tests below assert on."""
    return [(f.id.split(".", 2)[2], f.level) for f in outcome.findings if f.level is not Status.PASS]


def by_name(outcome, fragment: str):
    found = [m for m in outcome.measurements if fragment in m.name]
    assert found, [m.name for m in outcome.measurements]
    return found


# -- recorded runs -------------------------------------------------------------------------------


def test_two_local_nodes_pass_with_the_measured_figures():
    facts = facts_of("local_2nodes_pass.json")
    outcome = evaluate(facts, min_busbw_gbps=0.001)
    assert outcome.status is Status.PASS, outcome.summary
    sizes = sorted(facts["run"]["result"]["sizes"], key=lambda s: s["bytes"])
    latency = by_name(outcome, "latency at 8 B")[0]
    assert latency.value == pytest.approx(sizes[0]["time_s"] * 1e6, abs=0.1)
    busbw = by_name(outcome, "busbw at 16 MiB")[0]
    assert busbw.value == pytest.approx(sizes[-1]["busbw_gbps"], abs=1e-3)
    assert len(busbw.samples) == facts["_params"]["iters"]
    assert by_name(outcome, "wrong elements")[0].value == 0
    assert "gloo across 2 nodes x 1 process" in outcome.summary
    # Both "nodes" are this machine: said, not hidden.
    assert any("one machine" in d and "alpha, beta" in d for d in outcome.details)
    # 127.0.0.1 was the address given for them: no host-name warning for that.
    assert not any("resolves only to" in d for d in outcome.details)


def test_testbed_pass_explains_host_names_that_resolve_to_loopback():
    facts = facts_of("testbed_3nodes_pass.json")
    outcome = evaluate(facts, min_busbw_gbps=0.001)
    assert outcome.status is Status.PASS, outcome.summary
    trap = next(d for d in outcome.details if "resolves only to" in d)
    hostname = facts["probes"]["n1"]["hostname"]
    assert f"{hostname!r}" in trap and "127.0.0.1" in trap and "n1, n2, n3" in trap
    assert "--local-addr" in trap and "GLOO_SOCKET_IFNAME" in trap
    # The addresses actually passed: every node's own IP and interface, none of them loopback.
    launch = next(d for d in outcome.details if d.startswith("rendezvous on n1"))
    for node in ("n1", "n2", "n3"):
        assert f"{node}: --local-addr={facts['plan'][node]['ip']}" in launch
        assert not is_loopback(facts["plan"][node]["ip"])
        assert facts["plan"][node]["interface"] != "lo"


def test_a_node_that_never_joins_is_error_naming_it_and_no_other():
    facts = facts_of("local_absent_node.json")
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and fired(outcome) == [("rendezvous", Status.ERROR)]
    message = outcome.findings[0].message
    assert "beta" in message and "alpha" not in message  # the node that never joined, and no other
    assert facts["run"]["fault_nodes"] == ["beta"]
    assert "pairwise" not in facts  # the node is already named


def test_an_absent_rendezvous_host_is_named_rather_than_those_waiting_for_it():
    facts = facts_of("local_absent_host.json")
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and fired(outcome) == [("rendezvous", Status.ERROR)]
    assert "alpha (the rendezvous host)" in outcome.findings[0].message and "beta" not in outcome.findings[0].message
    assert facts["run"]["fault_nodes"] == ["alpha"]


def test_a_rank_that_never_reports_in_is_named_with_its_node():
    outcome = evaluate(facts_of("local_absent_rank.json"))
    assert outcome.status is Status.ERROR and fired(outcome) == [("roll-call", Status.ERROR)]
    assert "rank 1 (beta)" in outcome.findings[0].message  # the rank, with its node


def test_a_shaped_node_is_named_by_the_pairwise_pass():
    facts = facts_of("testbed_n2_shaped_pairwise.json")
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL
    assert fired(outcome) == [("slow-busbw", Status.FAIL), ("pairwise-node", Status.FAIL)]
    assert "n2 is at fault" in outcome.findings[1].message
    pairs = {m.node: m for m in outcome.measurements if m.node}
    assert set(pairs) == {"n1 <-> n2", "n2 <-> n3", "n1 <-> n3"}
    assert pairs["n1 <-> n2"].ok is False and pairs["n2 <-> n3"].ok is False and pairs["n1 <-> n3"].ok is True
    assert pairs["n1 <-> n3"].value > 5 * max(pairs["n1 <-> n2"].value, pairs["n2 <-> n3"].value)
    main = by_name(outcome, "busbw at 1 MiB")[0]
    assert main.ok is False and main.threshold == facts["_params"]["min_busbw_gbps"]


def test_recorded_facts_rejudged_with_other_thresholds_give_the_other_answer():
    """collect() stores figures, evaluate() judges: the same recorded run, judged again."""
    facts = facts_of("testbed_n2_shaped_pairwise.json")
    ids = lambda outcome: {f.id for f in outcome.findings}  # noqa: E731
    recorded = evaluate(facts)
    assert recorded.status is Status.FAIL
    assert {"collectives.cluster.slow-busbw", "collectives.cluster.pairwise-node"} <= ids(recorded)
    # A floor every figure meets: the run passes and every pair is good on its own.
    lenient = evaluate(facts, min_busbw_gbps=0.01)
    assert lenient.status is Status.PASS and fired(lenient) == []
    assert "collectives.cluster.pairwise-all-good" in ids(lenient)
    assert "collectives.cluster.pairwise-node" not in ids(lenient)
    # A floor no pair meets: the pairwise pass blames the fabric, not n2.
    strict = evaluate(facts, min_busbw_gbps=10.0)
    assert strict.status is Status.FAIL
    assert "collectives.cluster.pairwise-all-bad" in ids(strict) and "collectives.cluster.pairwise-node" not in ids(strict)


def test_pair_facts_hold_figures_and_no_judgement():
    from preflight_checks.collectives.cluster import pair_facts

    run = facts_of("testbed_n2_shaped_pairwise.json")["run"]
    pair = pair_facts(run)
    assert "state" not in pair and "problems" not in pair
    assert pair["ok"] and pair["busbw_gbps"] == run["result"]["sizes"][-1]["busbw_gbps"]
    failed = pair_facts({"nodes": ["a", "b"], "ok": False, "error": "boom", "phase": "rendezvous"})
    assert failed == {"nodes": ["a", "b"], "ok": False, "error": "boom", "phase": "rendezvous"}


# -- built GPU facts -----------------------------------------------------------------------------


def test_gpu_nodes_pass_and_the_busbw_floor_is_judged_when_set():
    facts = facts_of("gpu_2nodes_8x_h100_nccl_built.json")
    assert facts["_source"].startswith("built, not measured")
    outcome = evaluate(facts, min_busbw_gbps=300)
    assert outcome.status is Status.PASS and fired(outcome) == []
    assert "nccl across 2 nodes x 8 GPUs" in outcome.summary  # the PASS summary says what ran
    largest = by_name(outcome, "busbw at 256 MiB")[0]
    assert largest.threshold == 300 and largest.ok is True
    low = evaluate(facts, min_busbw_gbps=400)
    assert low.status is Status.FAIL and fired(low) == [("slow-busbw", Status.FAIL)]


def test_wrong_sums_fail_naming_the_rank_and_its_node():
    outcome = evaluate(facts_of("gpu_2nodes_wrong_sums_built.json"))
    assert outcome.status is Status.FAIL and fired(outcome) == [("wrong-sums", Status.FAIL), ("no-floor", Status.WARN)]
    assert "rank 11 (gpu02): 4096 elements" in outcome.findings[0].message


def test_a_slow_node_among_four_is_named():
    outcome = evaluate(facts_of("gpu_4nodes_gpu03_slow_built.json"))
    assert outcome.status is Status.FAIL
    assert fired(outcome) == [("slow-busbw", Status.FAIL), ("pairwise-node", Status.FAIL)]
    assert "gpu03 is at fault" in outcome.findings[1].message and "<->" not in outcome.findings[1].message


def test_a_slow_pair_is_named_when_both_nodes_are_fine_with_others():
    outcome = evaluate(facts_of("gpu_4nodes_pair_slow_built.json"))
    assert outcome.status is Status.FAIL
    assert fired(outcome) == [("slow-busbw", Status.FAIL), ("pairwise-pair", Status.FAIL)]
    assert "gpu01 <-> gpu02" in outcome.findings[1].message


def test_a_latency_ceiling_is_judged_when_set():
    facts = facts_of("gpu_2nodes_8x_h100_nccl_built.json")
    outcome = evaluate(facts, max_latency_us=20)
    assert outcome.status is Status.FAIL and fired(outcome) == [("slow-latency", Status.FAIL), ("no-floor", Status.WARN)]


# -- node counts, reachability, missing torch ------------------------------------------------------


def test_one_node_is_skip_unless_several_are_expected():
    facts = {"nodes": ["only"], "unreachable": [], "probes": {}}
    assert finding_ids(evaluate(facts)) == ["collectives.cluster.one-node"]
    expected = evaluate(facts, Expect(nodes=4))
    assert expected.status is Status.ERROR and fired(expected) == [("nodes-missing", Status.ERROR)]
    assert CollectivesCluster().expected_to_run(Expect(nodes=4))
    assert not CollectivesCluster().expected_to_run(Expect())


def test_only_one_reachable_node_is_error_naming_the_unreachable():
    outcome = evaluate({"nodes": ["a"], "unreachable": ["b", "c"], "probes": {}})
    assert outcome.status is Status.ERROR and fired(outcome) == [("nodes-unreachable", Status.ERROR)]
    assert "b, c unreachable" in outcome.findings[0].message


def test_unreachable_nodes_are_noted_and_the_others_measured():
    facts = facts_of("local_2nodes_pass.json")
    facts["unreachable"] = ["gamma"]
    outcome = evaluate(facts, min_busbw_gbps=0.001)
    assert outcome.status is Status.PASS
    assert "gamma unreachable, not measured" in outcome.summary
    assert any(d.startswith("not measured, unreachable: gamma") for d in outcome.details)


def test_missing_torch_is_skip_everywhere_and_fail_on_some():
    facts = facts_of("local_2nodes_pass.json")
    nowhere = copy.deepcopy(facts)
    for probe in nowhere["probes"].values():
        probe["torch"] = None
    nowhere.pop("run")
    skipped = evaluate(nowhere)
    assert skipped.status is Status.SKIP and fired(skipped) == [("no-torch", Status.SKIP)]
    assert skipped.remediation == []  # torch was not expected here: nothing to fix
    assert fired(evaluate(nowhere, Expect(frameworks=["torch"]))) == [("no-torch", Status.FAIL)]
    one = copy.deepcopy(facts)
    one["probes"]["beta"]["torch"] = None
    outcome = evaluate(one)
    assert outcome.status is Status.FAIL and ("no-torch", Status.FAIL) in fired(outcome)
    assert "beta" in next(f.message for f in outcome.findings if f.id.endswith(".no-torch"))


def test_a_node_whose_probe_failed_is_error_naming_it():
    facts = facts_of("local_2nodes_pass.json")
    facts["probes"]["beta"] = {"error": "beta could not be reached (ssh exit 255): Connection refused"}
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and ("probe-failed", Status.ERROR) in fired(outcome)


# -- pure helpers ---------------------------------------------------------------------------------


def test_torchrun_command_passes_every_address_explicitly():
    argv = torchrun_argv("/venv/bin/python", nnodes=3, nproc=8, rdzv_endpoint="10.0.0.1:29400", run_id="r1",
                         is_host=True, local_addr="10.0.0.1", rdzv_timeout_s=60, env={"GLOO_SOCKET_IFNAME": "eth1"},
                         module="allreduce", worker_args=["--backend", "nccl"])
    assert argv[:2] == ["env", "GLOO_SOCKET_IFNAME=eth1"]
    assert argv[2:5] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--rdzv-backend=c10d" in argv and "--rdzv-endpoint=10.0.0.1:29400" in argv
    assert "--local-addr=10.0.0.1" in argv and "--nnodes=3" in argv and "--nproc-per-node=8" in argv
    assert "--rdzv-conf=is_host=1,join_timeout=60,read_timeout=60" in argv
    assert argv[-4:] == ["-m", "preflight.workers.allreduce", "--backend", "nccl"]
    other = torchrun_argv("python3", nnodes=3, nproc=8, rdzv_endpoint="10.0.0.1:29400", run_id="r1", is_host=False,
                          local_addr="10.0.0.2", rdzv_timeout_s=60, env={}, module="allreduce", worker_args=[])
    assert "--rdzv-conf=is_host=0,join_timeout=60,read_timeout=60" in other


@pytest.mark.parametrize("count", range(2, 10))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(count):
    names = [f"n{i}" for i in range(count)]
    rounds = round_robin(names)
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    seen = [frozenset(p) for r in rounds for p in r]
    assert sorted(seen, key=sorted) == sorted({frozenset(p) for p in itertools.combinations(names, 2)}, key=sorted)
    for pairs in rounds:
        members = [n for p in pairs for n in p]
        assert len(members) == len(set(members))


def pair(a: str, b: str, state: str) -> dict:
    return {"nodes": [a, b], "state": state}


def test_attribution_names_a_node_a_pair_or_nothing():
    names = ["a", "b", "c", "d"]
    every = list(itertools.combinations(names, 2))
    node_c = attribute([pair(x, y, "bad" if "c" in (x, y) else "good") for x, y in every])
    assert node_c["nodes"] == ["c"] and node_c["pairs"] == []
    link = attribute([pair(x, y, "bad" if {x, y} == {"a", "b"} else "good") for x, y in every])
    assert link["nodes"] == [] and link["pairs"] == [["a", "b"]]
    everything = attribute([pair(x, y, "bad") for x, y in every])
    assert everything["all_bad"] and everything["nodes"] == []
    fine = attribute([pair(x, y, "good") for x, y in every])
    assert fine["nodes"] == [] and fine["pairs"] == [] and not fine["all_bad"] and fine["measured"] == 6
    unmeasured = attribute([pair("a", "b", "error")])
    assert unmeasured["measured"] == 0


def test_pairwise_runs_only_when_it_can_tell_something():
    params = Params(min_busbw_gbps=1.0)
    ok = facts_of("testbed_3nodes_pass.json")["run"]
    assert pairwise_reason(ok, Params(), 3) is None
    slow = pairwise_reason(ok, Params(min_busbw_gbps=1e6), 3)
    assert slow and "busbw" in slow
    assert pairwise_reason(ok, Params(min_busbw_gbps=1e6), 2) is None  # one pair only: the run itself
    named = facts_of("local_absent_node.json")["run"]
    assert pairwise_reason(named, params, 3) is None
    unnamed = {"ok": False, "fault_nodes": [], "error": "hang"}
    assert pairwise_reason(unnamed, params, 3) == "the all-reduce across all nodes failed"
    # Several ranks silent inside a collective (what one broken link does to gloo's start): a guess, not a pin.
    silent = {"ok": False, "phase": "stopped", "fault_nodes": ["n1", "n3", "n4"], "error": "stopped"}
    assert pairwise_reason(silent, params, 4) == "the all-reduce across all nodes failed"
    assert pairwise_reason({**silent, "fault_nodes": ["n3"]}, params, 4) is None  # one hung rank is a pin


def raw(name: str) -> dict:
    data = facts_of(name)
    return summarize_agent(data["stdout_lines"], data["stderr_text"], data["returncode"], data["killed"],
                           data["duration_s"], data["transport_failure"])


def test_torchrun_output_completed_rendezvous():
    agent = raw("torchrun_rendezvous_complete.json")
    assert agent["rendezvous"] == "complete" and agent["returncode"] == 0
    assert agent["group_rank"] in (0, 1) and len(agent["global_ranks"]) == 1
    assert agent["pids"]["torchrun"] > 0 and agent["pids"]["log_dir"].rsplit("/", 1)[-1].startswith("preflight-torchrun.")
    assert agent["last_error"] == ""


def test_torchrun_output_rendezvous_timeout_and_unreachable_host():
    waited = raw("torchrun_rendezvous_timeout.json")
    assert waited["rendezvous"] == "timeout" and waited["returncode"] != 0 and waited["global_ranks"] == []
    assert "RendezvousTimeoutError" in waited["last_error"]
    unreachable = raw("torchrun_rendezvous_unreachable.json")
    assert unreachable["rendezvous"] == "unreachable"


def test_torchrun_output_worker_failure_gives_the_failing_rank():
    agent = raw("torchrun_worker_failed.json")
    assert agent["rendezvous"] == "complete"
    assert agent["last_error"].startswith("worker rank") and "exit code" in agent["last_error"]


def test_interpretation_of_a_rendezvous_that_one_node_never_reached():
    waited = raw("torchrun_rendezvous_timeout.json")
    absent = summarize_agent(["@@pid 10 11 /tmp/preflight-torchrun.x"], "", 143, True, 20.0)
    outcome = interpret_run({"a": waited, "b": absent}, "a", 8, 60)
    assert outcome["phase"] == "rendezvous" and outcome["fault_nodes"] == ["b"]
    assert "torchrun on b never joined the rendezvous within 8s" in outcome["error"]
    nobody = interpret_run({"a": waited, "b": waited}, "a", 8, 60)
    assert nobody["fault_nodes"] == [] and "in vain" in nobody["error"]


def test_interpretation_of_a_lost_ssh_session_names_the_node():
    lost = summarize_agent([], "Connection to 10.0.0.2 closed by remote host.", 255, False, 3.0, transport_failure=True)
    done = raw("torchrun_rendezvous_complete.json")
    outcome = interpret_run({"a": done, "b": lost}, "a", 60, 60)
    assert outcome["fault_nodes"] == ["b"] and "lost contact with b" in outcome["error"]


def test_run_figures_read_the_worker_report():
    result = facts_of("gpu_2nodes_wrong_sums_built.json")["run"]["result"]
    figures = run_figures(result)
    assert figures["wrong"] == 4096 and figures["largest_bytes"] == 256 << 20
    assert figures["busbw_gbps"] == pytest.approx(368.0)


def test_backend_choice():
    gpu = {"gpus": 8, "nccl": True, "gloo": True}
    chosen = choose_backend({"a": gpu, "b": {**gpu, "gpus": 4}})
    assert chosen["backend"] == "nccl" and chosen["nproc_per_node"] == 4 and "GPU counts differ" in chosen["notes"][0]
    mixed = choose_backend({"a": gpu, "b": {"gpus": 0, "nccl": False, "gloo": True}}, cpu_ranks_per_node=2)
    assert mixed["backend"] == "gloo" and mixed["nproc_per_node"] == 2 and "some nodes have GPUs" in mixed["notes"][0]
    forced = choose_backend({"a": {"gpus": 0, "gloo": True}, "b": {"gpus": 0, "gloo": True}}, backend="nccl")
    assert "error" in forced and "a, b have no GPU" in forced["error"]
    assert "error" in choose_backend({"a": gpu}, backend="mpi")


def test_addresses_and_loopback():
    assert coordinator_ip("198.18.0.11") == "198.18.0.11"
    assert coordinator_ip("localhost") in ("127.0.0.1", "::1")
    for address in ("127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(address)
    assert not is_loopback("10.0.0.1") and not is_loopback("gpu01")


def test_loopback_findings_use_the_addresses_recorded_before_the_launch_too():
    probes = {"n1": {"hostname": "gpu01"}, "n2": {"hostname": "gpu02", "hostname_addresses": ["10.0.0.2"]}}
    resolved = {"n1": ["127.0.1.1"]}
    found = loopback_findings(probes, resolved, {"n1": "10.0.0.1", "n2": "10.0.0.2"})
    assert len(found) == 1 and "on n1 the host name 'gpu01' resolves only to 127.0.1.1" in found[0]


def test_shared_machine_findings_group_by_boot_id():
    probes = {"a": {"boot_id": "x"}, "b": {"boot_id": "x"}, "c": {"boot_id": "y"}}
    found = shared_machine_findings(probes)
    assert len(found) == 1 and found[0].startswith("a, b run on one machine")


def test_nodes_that_waited_while_the_host_gave_up_are_not_blamed():
    lost = raw("torchrun_rendezvous_host_lost.json")
    closed = raw("torchrun_rendezvous_closed.json")
    assert lost["rendezvous"] == "host lost" and closed["rendezvous"] == "closed"
    host = raw("torchrun_rendezvous_timeout.json")
    absent = summarize_agent(["@@pid 10 11 /tmp/preflight-torchrun.x"], "", 143, True, 20.0)
    for victim in (lost, closed):
        outcome = interpret_run({"n1": host, "n2": victim, "n3": absent}, "n1", 8, 60)
        assert outcome["fault_nodes"] == ["n3"], outcome["error"]
        assert "n2" not in outcome["error"]


def test_testbed_node_that_never_joins_is_named_over_ssh():
    facts = facts_of("testbed_absent_node.json")
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and fired(outcome) == [("rendezvous", Status.ERROR)]
    assert facts["run"]["fault_nodes"] == ["n3"]
    message = outcome.findings[0].message
    assert "n3" in message and "n1" not in message and "n2" not in message


# NCCL_DEBUG=INFO lines in NCCL 2.2x's format (written from its source's format strings, not recorded
# on a GPU node): an InfiniBand node, and one that found no IB device and fell back to sockets.
NCCL_IB_LINES = [
    "gpu01:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>",
    "gpu01:12345:12345 [0] NCCL INFO Using network IB",
    "gpu01:12345:12400 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0",
    "gpu01:12345:12400 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
]
NCCL_SOCKET_LINES = [
    "node1:2201:2201 [0] NCCL INFO NET/IB : No device found.",
    "node1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    "node1:2201:2201 [0] NCCL INFO Using network Socket",
    "node1:2201:2230 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
]


def test_the_network_nccl_used_is_read_from_its_info_lines():
    from preflight.launch.nccl_log import nccl_network

    ib = nccl_network(["I1129 torchrun noise"] + NCCL_IB_LINES)
    assert ib["network"] == "IB" and ib["via"] == ["NET/IB/0", "P2P/CUMEM"]
    assert ib["devices"]["NET/IB"].startswith("[0]mlx5_0:1/IB")
    sockets = nccl_network(NCCL_SOCKET_LINES)
    assert sockets["network"] == "Socket" and sockets["via"] == ["NET/Socket/0"]
    assert "NET/IB" not in sockets["devices"]  # "No device found" is not a device
    assert nccl_network(NCCL_SOCKET_LINES[-1:])["network"] == "Socket"  # from the channel line alone
    assert nccl_network(["gloo only", "I1129 16:23:51 torchrun"]) is None
    assert summarize_agent(NCCL_IB_LINES, "", 0, False, 1.0)["nccl"]["network"] == "IB"


def test_nccl_over_sockets_is_a_warning_and_the_network_is_reported():
    facts = copy.deepcopy(facts_of("gpu_2nodes_8x_h100_nccl_built.json"))
    facts["nccl_network"] = {"gpu01": "IB", "gpu02": "IB"}
    outcome = evaluate(facts, min_busbw_gbps=100.0)
    assert outcome.status is Status.PASS
    assert any(d.startswith("NCCL between nodes ran over IB on gpu01, gpu02") for d in outcome.details)
    facts["nccl_network"] = {"gpu01": "IB", "gpu02": "Socket"}
    outcome = evaluate(facts, min_busbw_gbps=100.0)
    assert outcome.status is Status.WARN
    assert fired(outcome) == [("nccl-over-sockets", Status.WARN)]
    assert "gpu02" in outcome.findings[0].message and "gpu01" not in outcome.findings[0].message


def test_without_a_floor_only_the_sums_are_judged_and_it_says_so():
    outcome = evaluate(copy.deepcopy(facts_of("gpu_2nodes_8x_h100_nccl_built.json")))
    assert outcome.status is Status.WARN
    fired = [f for f in outcome.findings if f.level is not Status.PASS]
    assert [f.id for f in fired] == ["collectives.cluster.no-floor"]
    assert "--set collectives.cluster.min_busbw_gbps=" in fired[0].fix


def test_both_backends_get_the_probed_interface():
    from preflight.launch.torchrun import node_plan
    from preflight.engine.context import ClusterContext

    ctx = ClusterContext(nodes=[{"kind": "local", "name": "a", "address": "127.0.0.1", "python": "python3"}],
                         output_dir=".", scratch_dir=".", expect=Expect(), timeout_s=10)
    plan = node_plan(ctx, {"a": {"interface": "ib0", "ip": "10.1.0.1"}}, ["a"], socket_ifname=None,
                     extra_env={}, threads=1)
    env = plan["a"]["env"]
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "ib0" and env["NCCL_DEBUG"] == "INFO"
    mine = node_plan(ctx, {"a": {"interface": "ib0", "ip": "10.1.0.1"}}, ["a"], socket_ifname=None,
                     extra_env={"NCCL_SOCKET_IFNAME": "eth1"}, threads=1)
    assert mine["a"]["env"]["NCCL_SOCKET_IFNAME"] == "eth1"  # the user's own setting wins


def test_a_torchelastic_error_file_is_preferred_over_torchrun_log_lines():
    data = facts_of("torchrun_worker_failed.json")
    from_logs = summarize_agent(data["stdout_lines"], data["stderr_text"], 1, False, 1.0)
    assert from_logs["last_error"] and from_logs["error_files"] == []
    record = {"message": {"message": "RuntimeError: Timed out waiting 5000ms for recv operation",
                          "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1764500000"}}}
    lines = data["stdout_lines"][:-1] + ["@@error-file 0 " + json.dumps(record)] + data["stdout_lines"][-1:]
    agent = summarize_agent(lines, data["stderr_text"], 1, False, 1.0)
    rank = agent["global_ranks"][0]
    assert agent["last_error"] == f"worker rank {rank} failed: RuntimeError: Timed out waiting 5000ms for recv operation"
    assert agent["error_files"] == [{"local_rank": 0, "message": record["message"]["message"]}]


def test_a_rank_that_joined_and_went_silent_is_named_whoever_ended_it():
    waiting = {"ok": False, "rank": 0, "error": "RuntimeError: Timed out waiting 5000ms for recv operation"}
    for killed_by_us in (True, False):  # stopped by the launch, or by its torchrun when the store went
        agents = {"a": {"rendezvous": "complete", "global_ranks": [0], "reports": [waiting], "returncode": 1},
                  "b": {"rendezvous": "complete", "global_ranks": [1], "reports": [], "killed": killed_by_us,
                        "returncode": 143 if killed_by_us else 1}}
        outcome = interpret_run(agents, "a", 10, 30)
        assert outcome["phase"] == "stopped" and outcome["fault_nodes"] == ["b"]
        assert outcome["error"].startswith("rank 1 (b) stopped inside a collective")
    # Every node's ranks spoke: their errors are listed, nobody is singled out.
    agents["b"]["reports"] = [{"ok": False, "rank": 1, "error": "boom"}]
    assert interpret_run(agents, "a", 10, 30)["phase"] == "collective"


def test_a_rank_that_could_not_connect_to_a_peer_outranks_a_silent_one():
    # Seen on the bed under load with one pair's traffic refused: n2 could not connect to n4, n4 and n1 saw
    # their peers close, and n3's rank was ended with the launch before it reported. The silence is not the
    # fault: nobody is singled out, so the isolation pass measures the pairs and names the link.
    refused = {"ok": False, "rank": 1, "error": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/socket.cc:142] "
                                                "rv != -1. -1 vs -1. connect: Permission denied"}
    closed = {"ok": False, "rank": 0, "error": "DistBackendError: Connection closed by peer [198.18.0.12]:40017"}
    agents = {"n1": {"rendezvous": "complete", "global_ranks": [0], "reports": [closed], "returncode": 1},
              "n2": {"rendezvous": "complete", "global_ranks": [1], "reports": [refused], "returncode": 1},
              "n3": {"rendezvous": "complete", "global_ranks": [2], "reports": [], "killed": True, "returncode": 143},
              "n4": {"rendezvous": "complete", "global_ranks": [3], "reports": [dict(closed, rank=3)], "returncode": 1}}
    outcome = interpret_run(agents, "n1", 10, 30)
    assert outcome["phase"] == "collective" and outcome["fault_nodes"] == []
    assert "rank 1 (n2): RuntimeError" in outcome["error"] and "connect: Permission denied" in outcome["error"]
    # Without the refused connection, the silent rank is still the one named.
    agents["n2"]["reports"] = [dict(closed, rank=1)]
    assert interpret_run(agents, "n1", 10, 30)["fault_nodes"] == ["n3"]
