"""collectives.local judged from recorded facts (this CPU machine) and built ones (8-GPU nodes)."""

import copy
from dataclasses import replace

import pytest

from preflight.core.check import Expect
from preflight.launch.ranks import LaunchResult, RankRun, interpret_launch
from preflight.core.model import Status
from preflight.workers.allreduce import bus_factor, parse_sizes
from preflight_checks.collectives.local import (
    CPU_SIZES, FIX_SLOW_GLOO, GPU_SIZES, CollectivesLocal, Params, human_bytes,
)
from tests.conftest import finding_ids, load_facts

CHECK = CollectivesLocal()
CPU = "collectives/cpu_gloo_2ranks.json"
H100 = "collectives/gpu_8x_h100_nccl_built.json"
P2P_OFF = "collectives/gpu_8x_p2p_disabled_built.json"
ABSENT = "collectives/cpu_gloo_rank1_absent.json"


def evaluate(facts, expect=None, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), expect or Expect())


def largest(run):
    return max(run["result"]["sizes"], key=lambda s: s["bytes"])


def smallest(run):
    return min(run["result"]["sizes"], key=lambda s: s["bytes"])


def fired(outcome) -> list[tuple[str, Status]]:
    return [(f.id.split(".", 2)[2], f.level) for f in outcome.findings if f.level is not Status.PASS]


def by_name(outcome, fragment):
    found = [m for m in outcome.measurements if fragment in m.name]
    assert found, [m.name for m in outcome.measurements]
    return found


@pytest.mark.parametrize("fixture", [CPU, H100, P2P_OFF])
def test_recorded_and_built_figures_follow_the_nccl_tests_definitions(fixture):
    for run in load_facts(fixture)["runs"]:
        n = run["world_size"]
        for entry in run["result"]["sizes"]:
            assert entry["algbw_gbps"] == pytest.approx(entry["bytes"] / entry["time_s"] / 1e9)
            assert entry["busbw_gbps"] == pytest.approx(entry["algbw_gbps"] * 2 * (n - 1) / n)
            # Samples: one per operation in runs recorded before back-to-back timing, else `samples` groups.
            assert len(entry["time_samples_s"]) == run["result"].get("samples", run["result"]["iters"])


def test_cpu_run_without_a_floor_warns_that_only_the_sums_were_judged():
    facts = load_facts(CPU)
    run = facts["runs"][0]
    outcome = evaluate(facts)
    # Nothing compared is no PASS: the busbw is reported, and the warning names the setting to add.
    assert outcome.status is Status.WARN, outcome.details
    raised = [f for f in outcome.findings if f.level is not Status.PASS]
    assert [f.id for f in raised] == ["collectives.local.no-floor"]
    assert "--set collectives.local.min_busbw_gbps=" in raised[0].fix
    busbw = by_name(outcome, f"busbw at {human_bytes(largest(run)['bytes'])}")[0]
    assert busbw.value == pytest.approx(largest(run)["busbw_gbps"], rel=1e-3)
    assert busbw.unit == "GB/s" and busbw.threshold is None
    assert len(busbw.samples) == run["result"].get("samples", run["result"]["iters"])
    latency = by_name(outcome, "latency at 8 B")[0]
    assert latency.value == pytest.approx(smallest(run)["time_s"] * 1e6, rel=1e-3)
    assert latency.unit == "us"
    wrong = by_name(outcome, "wrong elements")[0]
    assert wrong.value == 0 and wrong.ok
    assert any("no GPUs" in d and "gloo among 2 CPU processes" in d for d in outcome.details)
    assert fired(outcome) == [("no-floor", Status.WARN)]


def test_busbw_threshold_is_judged_at_the_largest_message():
    facts = load_facts(CPU)
    measured = largest(facts["runs"][0])["busbw_gbps"]
    assert evaluate(facts, min_busbw_gbps=measured * 0.5).status is Status.PASS
    slow = evaluate(facts, min_busbw_gbps=measured * 2)
    assert slow.status is Status.FAIL and fired(slow) == [("slow-busbw", Status.FAIL)]
    assert slow.remediation == [FIX_SLOW_GLOO]  # gloo among CPU processes: the fix for that path
    judged = [m for m in slow.measurements if m.threshold is not None and "busbw" in m.name]
    assert len(judged) == 1 and judged[0].ok is False


def test_latency_threshold():
    facts = load_facts(CPU)
    latency_us = smallest(facts["runs"][0])["time_s"] * 1e6
    assert evaluate(facts, max_latency_us=latency_us * 2, min_busbw_gbps=0.001).status is Status.PASS
    outcome = evaluate(facts, max_latency_us=latency_us / 2)
    assert outcome.status is Status.FAIL and fired(outcome) == [("latency", Status.FAIL), ("no-floor", Status.WARN)]


def test_healthy_8_gpu_node_passes_with_nccl_and_the_gloo_fallback():
    facts = load_facts(H100)
    outcome = evaluate(facts, min_busbw_gbps=300)
    assert outcome.status is Status.PASS and fired(outcome) == []
    assert by_name(outcome, "gloo (8 processes) fallback: busbw")  # both backends ran and are reported
    nccl = by_name(outcome, "nccl (8 GPUs): busbw at 256 MiB")[0]
    assert nccl.threshold == 300 and nccl.ok
    # The threshold is for the main backend only; the CPU fallback is reported, never held to it.
    fallback = [m for m in outcome.measurements if "fallback" in m.name and "busbw" in m.name]
    assert fallback and all(m.threshold is None for m in fallback)


def test_p2p_disabled_node_fails_on_busbw_and_says_which_backend():
    facts = load_facts(P2P_OFF)
    outcome = evaluate(facts, min_busbw_gbps=300)
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["collectives.local.slow-busbw"]
    assert outcome.findings[0].message.startswith("nccl (8 GPUs)")  # the backend is named
    assert outcome.remediation == [CHECK.fixes["slow-busbw"]]  # its own fix, not the check's generic hints


def test_a_wrong_known_sum_fails_naming_rank_and_size():
    facts = load_facts(H100)
    entry = largest(facts["runs"][0])
    entry["known_sum_wrong_by_rank"][5] = 4096
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL and fired(outcome) == [("wrong-sums", Status.FAIL), ("no-floor", Status.WARN)]
    assert "256 MiB on rank 5: 4096 elements" in outcome.findings[0].message
    assert by_name(outcome, "nccl (8 GPUs): wrong elements")[0].ok is False


def test_random_data_mismatch_fails_naming_the_rank():
    facts = load_facts(CPU)
    facts["runs"][0]["result"]["random_check"]["wrong_by_rank"] = [0, 17]
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL and fired(outcome) == [("wrong-sums", Status.FAIL), ("no-floor", Status.WARN)]
    assert "rank 1: 17 elements" in outcome.findings[0].message


def test_a_rank_that_never_joined_is_error_naming_it():
    facts = load_facts(ABSENT)
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR and fired(outcome) == [("run-failed", Status.ERROR)]
    assert "rank 1" in outcome.findings[0].message
    assert facts["runs"][0]["missing_ranks"] == [1]


def test_gpus_without_nccl_fail():
    facts = load_facts(H100)
    facts["nccl_available"] = False
    facts["runs"] = facts["runs"][1:]
    facts["runs"][0]["role"] = "primary"
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL and fired(outcome) == [("no-nccl", Status.FAIL)]


def test_one_gpu_notes_that_nccl_had_nothing_to_do():
    facts = load_facts(H100)
    facts["gpu_count"] = 1
    facts["notes"] = ["one GPU: there is nothing to all-reduce among with NCCL on this node"]
    facts["runs"] = facts["runs"][1:]
    outcome = evaluate(facts)
    assert outcome.status is Status.PASS
    assert outcome.details[0].startswith("one GPU")


def test_without_torch_skip_unless_torch_is_expected():
    facts = {"cpu_count": 2, "runs": [], "notes": [], "torch_version": None}
    assert fired(evaluate(facts)) == [("no-torch", Status.SKIP)]
    assert fired(evaluate(facts, expect=Expect(frameworks=["torch"]))) == [("no-torch", Status.FAIL)]


def test_an_error_outranks_a_failure_and_both_are_in_the_details():
    facts = load_facts(H100)
    largest(facts["runs"][0])["known_sum_wrong_by_rank"][2] = 1
    facts["runs"][1].update({"ok": False, "result": None, "error": "rank 3 of 8 never joined within 60s",
                             "missing_ranks": [3]})
    outcome = evaluate(facts)
    assert outcome.status is Status.ERROR
    assert fired(outcome) == [("wrong-sums", Status.FAIL), ("no-floor", Status.WARN), ("run-failed", Status.ERROR)]
    assert {f.message for f in outcome.findings if f.level is not Status.PASS} <= set(outcome.details)


def test_default_sizes_and_bus_factor():
    assert GPU_SIZES[0] == CPU_SIZES[0] == 8
    assert GPU_SIZES[-1] == 256 << 20
    assert bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(2 * 7 / 8)
    assert parse_sizes("1048576,8,8") == [8, 1048576]
    with pytest.raises(Exception):
        parse_sizes("2")


def _launch(*ranks, timed_out=False):
    return LaunchResult(ranks=list(ranks), master_addr="127.0.0.1", master_port=1234, timed_out=timed_out,
                        timeout_s=30)


def _rank(rank, returncode, stdout="", stderr="", killed=False):
    return RankRun(rank=rank, pid=1000 + rank, argv=["x"], env={}, returncode=returncode, stdout=stdout,
                   stderr=stderr, killed=killed)


def test_interpret_launch_reads_the_worker_protocol():
    ok = interpret_launch(_launch(_rank(0, 0, 'noise\n{"ok": true, "world_size": 2}\n'), _rank(1, 0)))
    assert ok["ok"] and ok["result"] == {"world_size": 2}

    missing = interpret_launch(_launch(
        _rank(0, 1, '{"ok": false, "rank": 0, "error": "rank 1 of 2 never joined within 5s", "missing_ranks": [1]}'),
        _rank(1, -9, killed=True)))
    assert not missing["ok"] and missing["missing_ranks"] == [1]
    assert missing["error"] == "rank 1 of 2 never joined within 5s"

    crashed = interpret_launch(_launch(_rank(0, -9, killed=True),
                                       _rank(1, 1, stderr="Traceback ...\nImportError: no module named x")))
    assert crashed["error"] == "rank 1 exited with code 1: ImportError: no module named x"

    hung = interpret_launch(_launch(_rank(0, -9, killed=True), _rank(1, -9, killed=True), timed_out=True))
    assert hung["error"].startswith("ranks 0, 1 still running after 30s")
    assert [r["pid"] for r in hung["launch"]["ranks"]] == [1000, 1001]


def test_command_lines_in_the_evidence_can_be_pasted_into_a_shell():
    rank = RankRun(rank=1, pid=1, argv=["python", "-m", "preflight.workers.allreduce", "--sizes", "8,16"],
                   env={"RANK": "1", "MASTER_ADDR": "127.0.0.1"})
    assert rank.command_line == "MASTER_ADDR=127.0.0.1 RANK=1 python -m preflight.workers.allreduce --sizes 8,16"


def test_facts_round_trip_unchanged_through_evaluate():
    facts = load_facts(H100)
    before = copy.deepcopy(facts)
    evaluate(facts, min_busbw_gbps=1)
    assert facts == before  # evaluate is pure


def test_process_group_timeout_is_shorter_than_the_check_and_torch_is_what_makes_it_required():
    assert CHECK.timeout_s > Params().pg_timeout_s
    assert CHECK.expected_to_run(Expect(frameworks=["torch"]))
    assert not CHECK.expected_to_run(Expect(frameworks=["tensorflow"]))
