"""Every configuration value knows where it came from: the profile, the config file, --set, a flag,
the run level or the check's default; the record of a run and its reports read that, not the files."""

from __future__ import annotations

import json

from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core import config as config_mod
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
    assert config.origins[FLOOR] == "--set"  # over the profile's floor
    assert config.origins["collectives.local.busbw_size_bytes"] == f"--config {path}"  # over the profile's size
    assert config.origins["expect.nodes"] == f"--config {path}"
    assert config.origins["expect.gpus_per_node"] == "--profile h100-8x"
    assert config.origins["run.fail_on"] == f"--config {path}"
    check = CHECKS["collectives.local"]
    assert config.origin_of(check, "collectives.local.warmup") in ("default", "level standard")
    config.set_run("level", "quick", "--level")
    assert config.origins["run.level"] == "--level" and config.level == "quick"


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
