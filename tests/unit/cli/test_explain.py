"""`preflight explain` for people: every parameter has a meaning and unit; test faults are no parameters."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from preflight.engine import faults
from preflight.cli.main import cli
from preflight.core.registry import discover
from tests.conftest import built_in_checks

REGISTRY = discover()
BUILT_IN = sorted(built_in_checks(REGISTRY.checks))  # whatever name the distribution is installed under


def test_the_built_in_checks_are_all_here():
    assert len(BUILT_IN) >= 14 and "net.bandwidth" in BUILT_IN


@pytest.mark.parametrize("check_id", BUILT_IN)
def test_every_parameter_of_every_built_in_check_has_a_meaning(check_id):
    check = REGISTRY.checks[check_id]
    names = [f.name for f in dataclasses.fields(check.Params)]
    docs = check.param_docs()
    assert {n for n in names if not docs.get(n, "").strip()} == set()
    assert set(check.param_help) <= set(names), "a meaning for a parameter that does not exist"
    for text in docs.values():
        assert "\n" not in text and len(text) <= 140


@pytest.mark.parametrize("check_id", BUILT_IN)
def test_no_test_fault_is_a_user_parameter(check_id):
    names = [f.name for f in dataclasses.fields(REGISTRY.checks[check_id].Params)]
    assert [n for n in names if n.startswith(("inject_", "fault_"))] == []


def test_explain_shows_each_parameter_with_its_meaning_and_the_levels():
    result = CliRunner().invoke(cli, ["explain", "net.bandwidth"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    at = lines.index("  min_gbps = 10.0")
    assert lines[at + 1].strip() == "lowest TCP bandwidth of each link between nodes (Gbit/s)"
    assert any(line.startswith("  thorough: ") and 'pattern = "full"' in line for line in lines)
    local = CliRunner().invoke(cli, ["explain", "collectives.local"]).output
    assert "inject" not in local and "  quick: not run (" in local


def test_explain_lists_the_findings_a_check_can_report_by_id():
    result = CliRunner().invoke(cli, ["explain", "net.bandwidth"])
    lines = result.output.splitlines()
    listed = [line.strip() for line in lines if line.startswith("  net.bandwidth.")]
    assert "net.bandwidth.slow-link" in listed and "net.bandwidth.no-iperf3" in listed


@pytest.mark.parametrize("key, value", [("collectives.local.inject_absent_rank", "1"),
                                        ("checkpoint.roundtrip.fault_drop_rng_state", "true")])
def test_setting_a_test_fault_is_an_unknown_key(tmp_path, key, value):
    check_id, _, name = key.rpartition(".")
    config = tmp_path / "preflight.toml"
    config.write_text(f'[checks."{check_id}"]\n{name} = {value}\n')
    result = CliRunner().invoke(cli, ["run", "--config", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "unknown parameter" in result.output
    init = CliRunner().invoke(cli, ["init", "-o", str(tmp_path / "init.toml")])
    assert init.exit_code == 0 and name not in (tmp_path / "init.toml").read_text()


def test_faults_come_from_the_environment(monkeypatch):
    assert faults.fault("collectives.local", "absent_rank") is None
    monkeypatch.setenv(faults.ENV, faults.env_value({"collectives.local": {"absent_rank": 1}}))
    assert faults.fault("collectives.local", "absent_rank") == 1
    assert faults.fault("scaling.multi_gpu", "absent_rank") is None
