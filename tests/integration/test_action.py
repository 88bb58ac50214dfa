"""The GitHub Action's steps (scripts/action/preflight-action.sh), end to end against real runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "action" / "preflight-action.sh"
pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")


def action(mode: str, tmp_path: Path, **inputs: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PREFLIGHT_SKIP_INSTALL": "1",  # preflight is already installed in this interpreter
        "INPUT_PYTHON": sys.executable,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
        "RUNNER_TEMP": str(tmp_path),
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    }
    return subprocess.run(["bash", str(SCRIPT), mode], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def outputs(tmp_path: Path) -> dict:
    return dict(line.split("=", 1) for line in (tmp_path / "output.txt").read_text().splitlines())


@pytest.mark.parametrize("status, verdict, code", [("PASS", "GO", 0), ("FAIL", "NO-GO", 1)])
def test_action_runs_writes_summary_and_gates_on_the_verdict(tmp_path, status, verdict, code):
    run = action("run", tmp_path, args=f"--checks example.echo --set example.echo.status={status} "
                                       "--set 'example.echo.text=\"a check with spaces\"'")
    assert run.returncode == 0, run.stdout + run.stderr  # the upload step must still run
    out = outputs(tmp_path)
    assert out == {"exit-code": str(code), "report-dir": "preflight-report", "verdict": verdict}
    summary = (tmp_path / "summary.md").read_text()
    assert f"**{verdict}**" in summary
    report_dir = tmp_path / "preflight-report"
    assert "a check with spaces" in (report_dir / "report.html").read_text()
    assert sorted(p.name for p in report_dir.iterdir()) == sorted(
        ["results.jsonl", "results.json", "report.md", "report.html", "junit.xml"])
    assert json.loads((report_dir / "results.json").read_text())["verdict"]["verdict"] == verdict
    gate = action("gate", tmp_path)
    assert gate.returncode == code
    if code:
        assert "::error::preflight: NO-GO" in gate.stdout


def test_action_reports_a_usage_error_and_fails_the_job(tmp_path):
    run = action("run", tmp_path, args="--checks no.such.check")
    assert run.returncode == 0
    assert outputs(tmp_path)["exit-code"] == "2" and outputs(tmp_path)["verdict"] == "NONE"
    assert "did not produce a report" in (tmp_path / "summary.md").read_text()
    assert action("gate", tmp_path).returncode == 2


def test_action_input_is_not_expanded_by_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    run = action("run", tmp_path, args=f"--checks example.echo --set 'example.echo.text=$(touch {marker})'")
    assert run.returncode == 0
    assert not marker.exists()
    assert f"$(touch {marker})" in (tmp_path / "preflight-report" / "report.html").read_text()
