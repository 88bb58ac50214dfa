"""`preflight report RESULTS --rejudge`: recorded facts judged again, end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.engine.execute import result_from_outcome
from preflight.core.model import NodeInfo, RunReport, Status
from preflight.core.registry import discover
from preflight.core.verdict import decide
from tests.conftest import ROOT, TESTS

DATA = TESTS / "data"
CHECKS = discover().checks
NODE = "gpu01"


def recorded_run() -> RunReport:
    """A run as `preflight run` writes it: each result judged by evaluate() from the facts it keeps."""
    facts = {
        "gpu.visibility": json.loads((DATA / "gpu_visibility" / "healthy_8x_h100.json").read_text()),
        "collectives.local": json.loads((DATA / "collectives" / "healthy_h100-8x_built.json").read_text()),
        "dataloader.throughput": json.loads((DATA / "dataloader" / "synthetic.json").read_text())["facts"],
    }
    report = RunReport(started_at="2026-11-30T09:00:00+00:00", preflight_version="0.0.1",
                       nodes=[NodeInfo(name=NODE, slots=8)],
                       planned=[*facts, "checkpoint.roundtrip"], command="preflight run")
    for check_id, recorded in facts.items():
        check = CHECKS[check_id]
        from preflight.core.check import Expect

        # The busbw floor the run was given (the h100-8x profile's), so that the all-reduce is judged.
        given = {"min_busbw_gbps": 460.0, "busbw_size_bytes": 17179869184} if check_id == "collectives.local" else {}
        outcome = check().evaluate(recorded, check.params_from(given), Expect(gpus_per_node=8))
        report.add(result_from_outcome(check, outcome, node=NODE, facts=recorded))
    # A check that timed out recorded no facts: re-judging keeps it as it was.
    from preflight.engine.execute import error_result

    report.add(error_result(CHECKS["checkpoint.roundtrip"], NODE, "did not finish within 600s"))
    return report


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "run" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(recorded_run().to_dict()))
    return path


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def status_of(data: dict, check_id: str) -> str:
    return next(r["status"] for r in data["results"] if r["check_id"] == check_id)


def test_rejudge_with_a_stricter_threshold_gives_the_other_answer(results):
    before = load(results)
    assert status_of(before, "collectives.local") == "PASS"
    out = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--out", "again", "--format", "json",
                                   "--set", "collectives.local.min_busbw_gbps=600",
                                   "--set", "collectives.local.busbw_size_bytes=17179869184"])
    assert out.exit_code == 1, out.output  # NO-GO: the facts did not change, the threshold did
    after = load(Path("again") / "results.json")
    assert status_of(after, "collectives.local") == "FAIL"
    assert status_of(after, "gpu.visibility") == "PASS"
    assert after["rejudged"]["changed"] == [{"check_id": "collectives.local", "node": NODE, "was": "PASS",
                                             "now": "FAIL"}]
    assert after["rejudged"]["settings"] == ["collectives.local.min_busbw_gbps=600",
                                             "collectives.local.busbw_size_bytes=17179869184"]
    assert after["rejudged"]["from"] == str(results)
    # Facts and evidence are kept, so the re-judged report can be re-judged again.
    old = next(r for r in before["results"] if r["check_id"] == "collectives.local")
    new = next(r for r in after["results"] if r["check_id"] == "collectives.local")
    assert new["facts"] == old["facts"] and new["started_at"] == old["started_at"]
    assert "collectives.local.slow-busbw" in {f["id"] for f in new["findings"]}
    # What recorded no facts stays as recorded.
    assert status_of(after, "checkpoint.roundtrip") == "ERROR"
    assert any("recorded no facts" in k for k in after["rejudged"]["kept"])
    # The original results.json is untouched.
    assert load(results) == before


def test_rejudge_with_a_profile_and_into_the_results_directory(results):
    out = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--profile", "h100-8x",
                                   "--out", str(results.parent), "--format", "json"])
    written = results.parent / "rejudged" / "results.json"
    assert written.exists(), out.output
    after = load(written)
    assert after["profile"] == "h100-8x" and after["profile_sources"]
    assert after["rejudged"]["profile"] == "h100-8x"
    assert status_of(after, "collectives.local") == "PASS"
    judged = next(r for r in after["results"] if r["check_id"] == "collectives.local")
    floors = [m for m in judged["measurements"] if m["threshold"] is not None and "busbw" in m["name"]]
    assert [(m["threshold"], m["at"]) for m in floors] == [(460.0, 17179869184)]
    assert "gpu.visibility" in after["expected"]  # the profile expects 8 GPUs
    assert RunReport.from_dict(after).rejudged["changed"] == []
    assert decide(RunReport.from_dict(after)).exit_code == out.exit_code != 0  # the checkpoint ERROR still blocks


def test_rejudged_report_matches_the_schema(results):
    jsonschema = pytest.importorskip("jsonschema")
    CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--out", "again", "--format", "json"])
    schema = json.loads((ROOT / "preflight" / "schema" / "run-report.schema.json").read_text())
    jsonschema.validate(load(Path("again") / "results.json"), schema)


def test_threshold_options_need_rejudge_and_bad_ones_are_usage_errors(results):
    runner = CliRunner()
    plain = runner.invoke(cli, ["report", str(results), "--profile", "h100-8x", "--out", "x"])
    assert plain.exit_code == 2 and "--rejudge" in plain.output
    bad = runner.invoke(cli, ["report", str(results), "--rejudge", "--set", "collectives.local.nope=1", "--out", "x"])
    assert bad.exit_code == 2 and "nope" in bad.output
    unknown = runner.invoke(cli, ["report", str(results), "--rejudge", "--profile", "tpu-v5", "--out", "x"])
    assert unknown.exit_code == 2 and "unknown profile" in unknown.output


def test_a_judging_fix_is_picked_up_without_touching_the_machine(results):
    # A run recorded before the demand fix: dataloader.throughput judged FAIL against the reference model.
    data = load(results)
    loader = next(r for r in data["results"] if r["check_id"] == "dataloader.throughput")
    loader["facts"].pop("scaling", None)
    loader["facts"]["demand"] = {"samples_per_s": 2126046.0,
                                 "source": "scaling.multi_gpu (training throughput measured on this node on 8 devices)"}
    loader["status"] = Status.FAIL.value
    results.write_text(json.dumps(data))
    out = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--out", "again", "--format", "json"])
    after = load(Path("again") / "results.json")
    # No longer FAIL against the reference model; a WARN that nothing states the demand.
    assert status_of(after, "dataloader.throughput") == "WARN", out.output
    loader = next(r for r in after["results"] if r["check_id"] == "dataloader.throughput")
    assert [f["id"] for f in loader["findings"] if f["level"] != "PASS"] == ["dataloader.throughput.no-demand"]
    assert {"check_id": "dataloader.throughput", "node": NODE, "was": "FAIL", "now": "WARN"} in after["rejudged"]["changed"]


def test_rejudging_records_what_todays_checks_declare():
    from preflight.core.check import ROLE_INVENTORY
    from preflight.run.rejudge import rejudge_report, thresholds

    old = recorded_run()
    old.planned.append("node.environment")  # planned there, its result lost: its declarations still apply
    assert (old.roles, old.headlines) == ({}, [])  # as a run recorded before declarations were
    config = thresholds(discover(), old, None, [], None)
    again = rejudge_report(old, discover(), config, source="results.json", how={})
    assert again.roles == {"node.environment": ROLE_INVENTORY}
    assert "node.environment.no-framework" in again.headlines
    assert again.needs["gpu.visibility"] == ["gpu"]


def test_a_shape_is_answered_again_from_the_rejudged_results(tmp_path, monkeypatch):
    """A recorded run with --shape: re-judged with a floor the pinned node meets, its subset is every node."""
    from preflight.core.shape import Shape
    from preflight.core.verdict import EXIT_SUBSET_GO
    from preflight.run.shape import answer

    check = CHECKS["node.environment"]
    facts = {"cpu_affinity": 2, "cpu_count": 2, "disks": {}, "env": {}, "fqdn": "localhost", "hostname": "n",
             "frameworks": {"tensorflow": False, "torch": True}, "hostname_addresses": ["10.0.0.1"],
             "memlock_hard": -1, "memlock_soft": -1, "memory_available_bytes": 8 << 30,
             "memory_total_bytes": 16 << 30, "nofile_hard": 1 << 20, "nofile_soft": 1 << 20, "nvidia_gpus": [],
             "shm_total_bytes": 8 << 30}
    names = ["n1", "n2", "n3"]
    report = RunReport(started_at="2026-11-30T09:00:00+00:00", preflight_version="0.0.1",
                       nodes=[NodeInfo(name=n) for n in names], planned=["node.environment"])
    from preflight.core.check import Expect

    for name in names:
        recorded = {**facts, "cpu_affinity": 1 if name == "n3" else 2, "hostname": name}
        outcome = check().evaluate(recorded, check.params_from({"min_cpus": 2}), Expect())
        report.add(result_from_outcome(check, outcome, node=name, facts=recorded))
    report.judged_with = {"params": {"node.environment": {"min_cpus": 2}}}
    answer(report, Shape(1))
    assert report.subset["exclude"] == ["n3"] and decide(report).exit_code == EXIT_SUBSET_GO
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(report.to_dict()))
    out = CliRunner().invoke(cli, ["report", str(path), "--rejudge", "--out", "again", "--format", "json",
                                   "--set", "node.environment.min_cpus=1"])
    after = load(Path("again") / "results.json")
    assert after["subset"]["exclude"] == [] and after["subset"]["offered"], after["subset"]
    assert out.exit_code == 0 and after["verdict"]["exit_code"] == 0, out.output
