"""Every configuration value knows where it came from: the profile, the config file, --set, a flag,
the run level or the check's default; the record of a run and its reports read that, not the files."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core import config as config_mod, origin
from preflight.core.model import RunReport
from preflight.core.origin import Origin, OriginKind
from preflight.core.registry import discover
from preflight.reporters import renderer
from preflight.reporters.glance import at_a_glance
from preflight.run.judging import record_judging
from tests.unit.run.test_rejudge import NODE, recorded_run

CHECKS = discover().checks
FLOOR = "collectives.local.min_busbw_gbps"


def layered(tmp_path, settings=()):
    path = tmp_path / "preflight.toml"
    path.write_text('[expect]\nnodes = 2\n[checks."collectives.local"]\nbusbw_size_bytes = 1073741824\n'
                    '[run]\nfail_on = "warn"\n')
    config = config_mod.load(path, CHECKS, profile="h100-8x")
    config_mod.apply_cli_settings(config, list(settings), CHECKS)
    return config, path


def test_each_layer_is_the_origin_of_what_it_sets(tmp_path):
    config, path = layered(tmp_path, [f"{FLOOR}=100"])
    assert config.origins[FLOOR] == origin.SET  # over the profile's floor
    assert config.origins["collectives.local.busbw_size_bytes"] == origin.config_file(path)  # over the profile's size
    assert config.origins["expect.nodes"] == origin.config_file(path)
    assert config.origins["expect.gpus_per_node"] == origin.profile("h100-8x")
    assert config.origins["run.fail_on"] == origin.config_file(path)
    check = CHECKS["collectives.local"]
    assert config.origin_of(check, "collectives.local.warmup").kind in (OriginKind.DEFAULT, OriginKind.LEVEL)
    config.set_run("level", "quick", origin.flag("--level"))
    assert config.origins["run.level"] == origin.flag("--level") and config.level == "quick"


def test_an_origin_is_a_value_written_and_read_back_as_the_report_records_it(tmp_path):
    config, path = layered(tmp_path, [f"{FLOOR}=100"])
    assert str(config.origins["expect.gpus_per_node"]) == "--profile h100-8x"
    assert str(config.origins["expect.nodes"]) == f"--config {path}"
    for value in (origin.SET, origin.PREPARED, origin.DEFAULT, origin.RUN, origin.profile("h100-8x"),
                  origin.config_file(path), origin.flag("--fail-on"), origin.command("healthcheck"),
                  origin.level("quick"), origin.profile("h100-8x").as_recorded(), origin.SET.as_recorded()):
        assert Origin.from_text(str(value)) == value
    assert str(origin.SET.as_recorded()) == "the run (--set)"
    assert origin.profile("h100-8x").as_recorded().shown == "profile h100-8x"


def test_the_recorded_run_is_the_bottom_layer_and_what_is_given_goes_on_top(tmp_path):
    """`report --rejudge` is `load` with one more layer under the profile and the file: the run's."""
    run = config_mod.Config(params={"collectives.local": {"min_busbw_gbps": 600, "max_latency_us": 70}},
                            origins={FLOOR: origin.SET.as_recorded(),
                                     "collectives.local.max_latency_us": origin.profile("x").as_recorded()})
    path = tmp_path / "preflight.toml"
    path.write_text('[checks."collectives.local"]\nmax_latency_us = 90\n')
    config = config_mod.load(path, CHECKS, under=run)
    assert config.params["collectives.local"] == {"min_busbw_gbps": 600, "max_latency_us": 90}
    assert config.origins[FLOOR] == origin.SET.as_recorded()
    assert config.origins["collectives.local.max_latency_us"] == origin.config_file(path)
    assert config_mod.load(None, CHECKS, under=run).params == run.params


def test_the_record_of_a_run_comes_from_the_origins_not_from_reading_the_files_again(tmp_path):
    config, path = layered(tmp_path, [f"{FLOOR}=100"])
    text = path.read_text()
    path.unlink()  # whatever happens to the file once read, the record is of what was read
    recorded = record_judging(config, CHECKS)
    assert recorded["config_text"] == text and recorded["config_file"] == str(path)
    assert recorded["sources"][FLOOR] == "--set"
    assert recorded["sources"]["collectives.local.busbw_size_bytes"] == f"--config {path}"
    assert recorded["sources"]["run.fail_on"] == f"--config {path}"
    assert recorded["settings"] == [f"{FLOOR}=100"]


def judged_report(settings):
    config = config_mod.load(None, CHECKS, profile="h100-8x")
    config_mod.apply_cli_settings(config, settings, CHECKS)
    from preflight.run.rejudge import rejudge_report

    judged = rejudge_report(recorded_run(), discover(), config, source="the run", how={})  # as the run judged
    judged.rejudged = None
    judged.judged_with = record_judging(config, CHECKS)
    return judged


def test_a_floor_set_over_a_profile_is_shown_as_set_not_as_the_profile():
    report = judged_report([f"{FLOOR}=600"])
    glance = dict(at_a_glance(report))
    assert glance["Thresholds"].startswith("profile h100-8x") and f"{FLOOR} from --set" in glance["Thresholds"]
    md = renderer("md")(report)
    floor_row = next(line for line in md.splitlines() if line.startswith("| collectives.local") and "600" in line)
    assert "(--set)" in floor_row


def test_a_floor_the_profile_set_is_shown_as_the_profiles():
    report = judged_report([])
    assert dict(at_a_glance(report))["Thresholds"] == "profile h100-8x"
    md = renderer("md")(report)
    assert "(profile h100-8x)" in md and "(--set)" not in md


def test_rejudge_validates_the_merged_thresholds_as_a_run_does(tmp_path):
    report = recorded_run()
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    results.write_text(json.dumps(report.to_dict()))
    done = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--format", "json", "--out",
                                    str(tmp_path / "again"), "--set", "scaling.multi_gpu.min_efficiency=0.5",
                                    "--set", "scaling.multi_gpu.warn_efficiency=0.99"])
    assert done.exit_code == 2, done.output
    assert "scaling.multi_gpu.warn_efficiency" in done.output


def test_rejudge_applies_the_silence_of_the_config_given_and_records_fail_on_as_a_flag(tmp_path):
    report = recorded_run()
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    results.write_text(json.dumps(report.to_dict()))
    config = tmp_path / "preflight.toml"
    config.write_text('[silence]\n"collectives.local.slow-busbw" = { reason = "known: the NCCL upgrade is booked" }\n')
    done = CliRunner().invoke(cli, ["report", str(results), "--rejudge", "--format", "json", "--out",
                                    str(tmp_path / "again"), "--config", str(config), "--fail-on", "warn"])
    assert done.exit_code in (0, 1), done.output
    after = json.loads((tmp_path / "again" / "results.json").read_text())
    assert "collectives.local.slow-busbw" in after["silenced"]
    assert after["rejudged"]["sources"]["run.fail_on"] == "--fail-on" and after["fail_on"] == "warn"
    assert NODE in {r["node"] for r in after["results"]}


def test_two_parameters_with_the_same_value_each_show_their_own_origin():
    """The floor and the latency ceiling both 600: each figure names the origin of its own parameter
    (the measurement records which parameter its threshold is), not "one of two, so neither"."""
    report = judged_report(["collectives.local.max_latency_us=600"])
    report.judged_with["sources"][FLOOR] = "--config site.toml"
    report.judged_with["params"]["collectives.local"][FLOOR.rpartition(".")[2]] = 600
    for result in report.results:
        for m in result.measurements:
            if m.param == "min_busbw_gbps" and m.threshold is not None:
                m.threshold = 600
    md = renderer("md")(report)
    rows = [line for line in md.splitlines() if line.startswith("| collectives.local")]
    assert any("latency" in row and "(--set)" in row for row in rows), rows
    assert any("busbw" in row and "(--config site.toml)" in row for row in rows), rows


def test_a_measurement_names_its_parameter_and_a_report_without_it_still_reads():
    jsonschema = pytest.importorskip("jsonschema")
    from tests.conftest import ROOT

    report = judged_report([f"{FLOOR}=600"])
    data = report.to_dict()
    floors = [m for r in data["results"] for m in r["measurements"] if m.get("param") == "min_busbw_gbps"]
    assert floors and all(m["threshold"] == 600 for m in floors)
    schema = json.loads((ROOT / "preflight" / "schema" / "run-report.schema.json").read_text())
    jsonschema.validate(data, schema)
    for result in data["results"]:  # as a report written before measurements named their parameter
        for m in result["measurements"]:
            m.pop("param", None)
    jsonschema.validate(data, schema)
    older = RunReport.from_dict(data)
    assert all(m.param is None for r in older.results for m in r.measurements)
    assert "(--set)" not in renderer("md")(older)  # no parameter named: no origin guessed from a value
