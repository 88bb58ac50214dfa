"""collectives.local: nccl-tests timing and output, thresholds at their message size, the 1-GPU case."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from preflight.core.check import Expect
from preflight.core.model import FIGURE_SIZE, Status
from preflight_checks.collectives.nccl_tests import argv_for, parse_output, row_at
from preflight_checks.collectives.local import CollectivesLocal, Params, main_sizes
from tests.conftest import load_facts
from tests.conftest import TESTS

CHECK = CollectivesLocal()
DATA = TESTS / "data" / "collectives"


def evaluate(facts, **params):
    return CHECK.evaluate(facts, replace(Params(), **params), Expect())


def fired(outcome) -> set[str]:
    return {f.id for f in outcome.findings if f.level is not Status.PASS}


def test_nccl_tests_output_is_parsed_row_by_row():
    recorded = json.loads((DATA / "nccl_tests_8x_h100_built.json").read_text())
    assert "built by hand" in recorded["_source"]
    parsed = parse_output(recorded["output"])
    assert parsed["n_gpus"] == 8 and parsed["out_of_bounds"] == 0
    sizes = [r["bytes"] for r in parsed["rows"]]
    assert sizes[0] == 8 and sizes[-1] == 256 * 2**20 and len(sizes) == 26  # 8 B doubling to 256 MiB
    last = row_at(parsed, 256 * 2**20)
    assert last["count"] == 64 * 2**20 and last["type"] == "float"
    oop = last["out_of_place"]
    # Units as nccl-tests prints them: time in us, GB/s = 1e9 bytes/s, busbw = algbw * 2(n-1)/n.
    assert oop["algbw_gbps"] == pytest.approx(last["bytes"] / (oop["time_us"] * 1e-6) / 1e9, rel=2e-3)
    assert oop["busbw_gbps"] == pytest.approx(oop["algbw_gbps"] * 2 * 7 / 8, rel=2e-3)
    assert all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in parsed["rows"])
    assert parsed["avg_busbw_gbps"] == pytest.approx(sum(r["out_of_place"]["busbw_gbps"] for r in parsed["rows"])
                                                     / len(sizes), rel=1e-3)


def test_nccl_tests_without_validation_prints_na():
    line = "   268435456      67108864     float     sum      -1   1222.7  219.54  384.20    N/A   1219.8  220.06  385.11    N/A"
    row = parse_output(line)["rows"][0]
    assert row["out_of_place"]["wrong"] is None and row["in_place"]["busbw_gbps"] == 385.11
    assert parse_output("NCCL failure common.cu:1039 'unhandled cuda error'\n")["rows"] == []


def test_nccl_tests_argv_covers_the_sweep():
    assert argv_for("/opt/all_reduce_perf", [8, 1 << 20, 256 << 20], 8, 20, 5) == [
        "/opt/all_reduce_perf", "-b", "8", "-e", str(256 << 20), "-f", "2", "-g", "8", "-n", "20", "-w", "5", "-c", "1"]


def test_both_figures_side_by_side_as_size_figures():
    outcome = evaluate(load_facts("collectives/gpu_8x_h100_nccl_built.json"), min_busbw_gbps=300.0)
    assert outcome.status is Status.PASS, outcome.details
    series = {}
    for m in outcome.measurements:
        if m.figure == FIGURE_SIZE:
            series.setdefault(m.series, set()).add(m.at)
    assert series["nccl"] == series["nccl-tests"] == {1 << 20, 32 << 20, 256 << 20}
    assert series["gloo"] == {1 << 20, 16 << 20}
    assert any(d.startswith("busbw at 256 MiB: preflight") and "nccl-tests" in d for d in outcome.details)


def test_wrong_elements_in_nccl_tests_fail():
    facts = load_facts("collectives/gpu_8x_h100_nccl_built.json")
    facts["nccl_tests"]["rows"][-1]["in_place"]["wrong"] = 12
    outcome = evaluate(facts)
    assert outcome.status is Status.FAIL and "collectives.local.nccl-tests-wrong" in fired(outcome)


def test_nccl_tests_that_failed_to_run_warn():
    facts = load_facts("collectives/gpu_8x_h100_nccl_built.json")
    facts["nccl_tests"] = {"argv": ["all_reduce_perf"], "returncode": 1, "error": "exit status 1, no result table",
                           "rows": []}
    assert fired(evaluate(facts, min_busbw_gbps=300.0)) == {"collectives.local.nccl-tests-failed"}
    assert fired(evaluate(facts)) == {"collectives.local.nccl-tests-failed", "collectives.local.no-floor"}


def test_one_gpu_gloo_is_never_judged_against_an_nccl_floor():
    # What collect() recorded before the fix on a 1-GPU node: gloo among CPU processes as "primary".
    facts = load_facts("collectives/gpu_8x_h100_nccl_built.json")
    facts.update(gpu_count=1, notes=["one GPU: there is nothing to all-reduce among with NCCL on this node"])
    facts["runs"] = facts["runs"][1:]
    facts["runs"][0]["role"] = "primary"
    facts.pop("nccl_tests")
    outcome = evaluate(facts, min_busbw_gbps=460.0, max_latency_us=30.0)
    assert outcome.status is Status.PASS, outcome.summary
    assert all(m.threshold is None for m in outcome.measurements if "busbw" in m.name or "latency" in m.name)
    assert any("fallback path" in d for d in outcome.details)


def test_the_floor_is_judged_at_the_size_it_was_measured_at():
    facts = load_facts("collectives/healthy_h100-8x_built.json")
    outcome = evaluate(facts, min_busbw_gbps=460.0, busbw_size_bytes=16 << 30)
    judged = [m for m in outcome.measurements if m.threshold is not None and "busbw" in m.name]
    assert [(m.at, m.ok) for m in judged] == [(16 << 30, True)]
    assert outcome.status is Status.PASS
    # The 256 MiB figure (~383 GB/s) is never held to the 16 GiB floor.
    at_256 = next(m for m in outcome.measurements if m.series == "nccl" and m.at == 256 << 20)
    assert at_256.value < 460 and at_256.threshold is None


def test_a_floor_for_a_size_not_measured_is_not_judged_against_another_size():
    facts = load_facts("collectives/gpu_8x_h100_nccl_built.json")  # largest size 256 MiB
    outcome = evaluate(facts, min_busbw_gbps=460.0, busbw_size_bytes=16 << 30)
    assert outcome.status is Status.WARN
    assert fired(outcome) == {"collectives.local.threshold-size-not-measured"}


def test_the_busbw_size_joins_the_nccl_sweep():
    params = replace(Params(), busbw_size_bytes=16 << 30)
    assert main_sizes([8, 1 << 20, 256 << 20], params) == [8, 1 << 20, 256 << 20, 16 << 30]
    assert main_sizes([8, 1 << 20], Params()) == [8, 1 << 20]


def test_back_to_back_groups_on_cpu():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from preflight.workers.allreduce import samples_and_ops, timed_group

    assert samples_and_ops(20, 5) == (5, 4)
    assert samples_and_ops(3, 5) == (3, 1)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        calls = []
        seconds = timed_group(lambda: calls.append(1), 4, torch.device("cpu"))
        assert len(calls) == 4 and seconds >= 0
    finally:
        dist.destroy_process_group()


def test_a_size_not_measured_is_never_fixed_by_running_the_configuration_that_ran():
    """On a CPU node the sweep never adds the floor's size, so "run again with this configuration"
    would measure the same; on a GPU node whose sweep lacked it (facts judged with another size), it would."""
    again = CollectivesLocal.fixes["threshold-size-not-measured"]
    cpu = evaluate(load_facts("collectives/cpu_gloo_2ranks.json"), min_busbw_gbps=460.0, busbw_size_bytes=16 << 30)
    [cpu_finding] = [f for f in cpu.findings if f.id.endswith("threshold-size-not-measured")]
    assert cpu_finding.fix and cpu_finding.fix != again
    gpu = evaluate(load_facts("collectives/gpu_8x_h100_nccl_built.json"), min_busbw_gbps=460.0,
                   busbw_size_bytes=16 << 30)
    [gpu_finding] = [f for f in gpu.findings if f.id.endswith("threshold-size-not-measured")]
    assert gpu_finding.fix == again  # that sweep did not plan 16 GiB: this configuration adds it
    planned = load_facts("collectives/gpu_8x_h100_nccl_built.json")
    planned["runs"][0]["sizes"] = sorted(set(planned["runs"][0]["sizes"]) | {16 << 30})
    [lost] = [f for f in evaluate(planned, min_busbw_gbps=460.0, busbw_size_bytes=16 << 30).findings
              if f.id.endswith("threshold-size-not-measured")]
    assert lost.fix != again and "evidence" in lost.fix
