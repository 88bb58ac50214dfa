"""Run levels and --fail-fast through the real CLI on this machine."""

from __future__ import annotations

import json

from preflight.core import config as config_mod
from preflight.core.registry import discover
from tests.conftest import run_preflight


def test_quick_run_stays_within_its_budget_and_says_what_it_left_out(tmp_path):
    out = tmp_path / "out"
    proc = run_preflight("run", "--level", "quick", "--format", "json,md", "--out", str(out), cwd=tmp_path,
                         timeout=180, env={"PREFLIGHT_PROGRESS_INTERVAL_S": "1"})
    assert proc.returncode in (0, 1, 3), proc.stderr
    report = json.loads((out / "results.json").read_text())
    assert report["level"] == "quick" and report["level_budget_s"] == 30
    checks = discover().checks
    quick = config_mod.Config(level="quick")
    per_node: dict[str, float] = {}
    for result in report["results"]:
        check = checks[result["check_id"]]
        if quick.skipped_at_level(check):
            assert result["status"] == "SKIP"
            assert [f["id"] for f in result["findings"]] == [f"{check.id}.skipped-at-level"]
            continue
        # Each check's own recorded time is within its quick timeout ...
        assert result["duration_s"] <= quick.timeout_for(check), result["check_id"]
        if result["scope"] == "node":
            per_node[result["node"]] = per_node.get(result["node"], 0.0) + result["duration_s"]
        if result["check_id"] == "versions.pinned":
            assert result["facts"]["stack"]["builds_probed"] is False  # the level's override reached it
    # ... and a node's checks together within the level's budget.
    assert per_node and all(total <= 30 for total in per_node.values()), per_node
    assert "quick: probes and small measurements only" in (out / "report.md").read_text()
    # Without a terminal, a line for a check still running (gpu.visibility's probe takes seconds).
    assert "still running " in proc.stdout, proc.stdout


def test_fail_fast_stops_at_the_first_no_go_and_says_so(tmp_path):
    out = tmp_path / "out"
    proc = run_preflight("run", "--fail-fast", "--checks", "node.environment,checkpoint.roundtrip",
                         "--set", "node.environment.min_cpus=100000", "--format", "json,md", "--out", str(out),
                         cwd=tmp_path, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((out / "results.json").read_text())
    assert report["stopped_early"].startswith("--fail-fast")
    assert report["verdict"]["verdict"] == "NO-GO"
    assert [r["check_id"] for r in report["results"]] == ["node.environment"]
    text = (out / "report.md").read_text()
    assert "NO-GO" in text and "stopped early" in text and "INCOMPLETE" not in text.splitlines()[0]
