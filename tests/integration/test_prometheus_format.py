"""`preflight report --format prometheus` on a real run's results, checked by promtool."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import run_preflight


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
def test_textfile_of_a_run_passes_promtool_check_metrics(tmp_path, sample_report):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(sample_report.to_dict()))
    proc = run_preflight("report", str(results), "--format", "prometheus", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    text = (tmp_path / "out" / "preflight.prom").read_text()
    assert "preflight_check_status{" in text and "preflight_figure{" in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
