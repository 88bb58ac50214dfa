"""`preflight healthcheck` for real on this node, as a Slurm Prolog would run it: only what it
measured here drains (exit 1); a broken plugin, a budget too small for a probe, a probe given no
time and a cluster-wide expectation drain nothing (exit 0)."""

from __future__ import annotations

import json
import os

import pytest

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Status
from preflight.launch.gpu_probe import PROBE_FLOOR_S, run_probe
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight_checks.gpu.visibility import GpuVisibility
from tests.conftest import run_preflight
from tests.integration.test_plugins import make_distribution

ROOMY = ("--set", "node.environment.min_free_disk_gib=0.001", "--set", "node.environment.min_shm_gib=0.001")


def healthcheck(tmp_path, *args, env=None):
    run = run_preflight("healthcheck", "--out", "out", *args, cwd=tmp_path, timeout=120,
                        env={"SLURMD_NODENAME": "hc-node", **(env or {})})
    data = json.loads((tmp_path / "out" / "results.json").read_text()) if (tmp_path / "out" / "results.json").exists() \
        else None
    return run, data


def statuses(data):
    return {r["check_id"]: r["status"] for r in data["results"]}


@pytest.fixture
def broken_plugins(tmp_path):
    site = tmp_path / "site"
    make_distribution(site, "acme-node-checks", {"acme.unrelated": "acme_unrelated:Check",
                                                 "versions.acme": "acme_versions:Check"},
                      {"acme_unrelated": "import does_not_exist_anywhere\n",
                       "acme_versions": "import does_not_exist_either\n"})
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_an_unrelated_broken_plugin_does_not_make_every_node_incomplete(tmp_path, broken_plugins):
    run, data = healthcheck(tmp_path, "--checks", "node.environment", *ROOMY, env=broken_plugins)
    assert run.returncode == 0, run.stdout + run.stderr
    assert data["verdict"]["verdict"] != "INCOMPLETE" and data["load_errors"] == []
    asked = run_preflight("healthcheck", "--checks", "acme.unrelated", cwd=tmp_path, env=broken_plugins)
    assert asked.returncode == 2 and "its plugin failed to load" in asked.stderr


def test_a_broken_third_party_plugin_is_named_and_drains_nothing(tmp_path, broken_plugins):
    # A plugin that did not load cannot say whether it is a hook check (Check.hook): without --checks
    # it counts (INCOMPLETE, named with its distribution), and drains nothing; --skip leaves it out,
    # and then it is not even imported.
    run, data = healthcheck(tmp_path, "--skip", "gpu.visibility", *ROOMY, env=broken_plugins)
    assert {e["distribution"] for e in data["load_errors"]} == {"acme-node-checks 0.3"}
    assert data["verdict"]["verdict"] in ("INCOMPLETE", "NO-GO") and "acme.unrelated" in run.stdout
    assert run.returncode == 0, run.stdout + run.stderr
    run, data = healthcheck(tmp_path, "--skip", "gpu.visibility,acme.unrelated,versions.acme", *ROOMY,
                            env=broken_plugins)
    assert data["load_errors"] == [] and data["verdict"]["verdict"] != "INCOMPLETE"
    assert run.returncode == 0, run.stdout + run.stderr


def test_what_it_measured_on_this_node_drains(tmp_path):
    run, data = healthcheck(tmp_path, "--checks", "node.environment", "--set", "node.environment.min_shm_gib=100000")
    assert statuses(data) == {"node.environment": "FAIL"}
    assert run.returncode == 1, run.stdout + run.stderr


def test_a_budget_too_small_for_a_check_is_error_for_it_and_drains_nothing(tmp_path):
    run, data = healthcheck(tmp_path, "--budget", "12", *ROOMY)
    found = statuses(data)
    assert found["gpu.visibility"] == "ERROR" and "--budget" in next(
        r["summary"] for r in data["results"] if r["check_id"] == "gpu.visibility")
    assert found["node.environment"] in ("PASS", "WARN")
    assert "gpu.visibility" in data["planned"]
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_cluster_wide_expectation_is_not_a_node_finding(tmp_path):
    config = tmp_path / "preflight.toml"
    config.write_text("[expect]\nnodes = 4\n")
    run, data = healthcheck(tmp_path, "--config", str(config), "--checks", "node.environment", *ROOMY)
    assert data["verdict"]["verdict"] == "GO", data["verdict"]
    assert run.returncode == 0


def test_skip_of_what_the_profile_needs_is_a_usage_error(tmp_path):
    run = run_preflight("healthcheck", "--profile", "h100-8x", "--skip", "gpu.visibility", cwd=tmp_path)
    assert run.returncode == 2 and "gpu.visibility" in run.stderr and "h100-8x" in run.stderr


def test_a_framework_probe_given_no_time_is_not_measured(tmp_path):
    ctx = NodeContext(node="n1", output_dir=tmp_path, scratch_dir=tmp_path, expect=Expect(), timeout_s=30)
    with pytest.raises(CannotMeasure, match="probe"):
        run_probe(ctx, "torch", [], PROBE_FLOOR_S / 10)
    check = GpuVisibility()
    result = execute(check, ctx, check.params_from({"probe_timeout_s": 0.001, "probe_tensorflow": False}), Expect(),
                     node="n1")
    assert result.status is Status.ERROR and "probe" in result.summary


def test_a_silenced_blocker_says_go_and_drains_nothing(tmp_path):
    unreadable = ("--set", f'node.environment.disk_paths=["{tmp_path / "no-such-dir"}"]')
    loud, _ = healthcheck(tmp_path, "--checks", "node.environment", *ROOMY, *unreadable)
    assert loud.returncode == 1 and "free space" in loud.stdout, loud.stdout + loud.stderr
    (tmp_path / "accepted.toml").write_text('[silence]\n"node.environment.disk-unreadable" = {reason = "known"}\n')
    quiet, data = healthcheck(tmp_path, "--config", "accepted.toml", "--checks", "node.environment", *ROOMY,
                              *unreadable)
    assert data["verdict"]["verdict"] == "GO", quiet.stdout
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr  # the GO it prints is what it does: no drain
