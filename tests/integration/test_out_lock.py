"""One run, one folder: a run holds a lock on its --out folder, so a second run at the same moment
is refused before it touches anything of the first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import run_preflight


def test_two_runs_into_one_out_never_mix_and_the_second_is_refused_naming_the_holder(tmp_path):
    """Two real processes: the second run into the same --out is exit 2 naming the folder and the
    process holding it, and touches nothing; the first run's journal and report are its own."""
    pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")
    out = tmp_path / "out"
    go = tmp_path / "go"  # the first run holds its folder until the test has seen the second refused
    first = subprocess.Popen([sys.executable, "-m", "preflight", "run", "--checks", "example.sleep", "--set",
                              "example.sleep.seconds=25", "--set", "example.sleep.with_child=false", "--set",
                              f"example.sleep.until_file={go}", "--format", "json", "--out", str(out),
                              "--no-history"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "CI": "1"})
    try:
        deadline = time.monotonic() + 30
        while not (out / "results.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        journal = (out / "results.jsonl").read_text()
        second = run_preflight("run", "--checks", "example.echo", "--format", "json", "--out", str(out),
                               "--no-history", cwd=tmp_path)
        assert second.returncode == 2, second.stdout + second.stderr
        assert str(out) in second.stderr and f"pid {first.pid}" in second.stderr
        assert (out / "results.jsonl").read_text().startswith(journal)  # untouched, still growing
        assert first.poll() is None, "the first run ended before the second was refused"
        go.touch()
        stdout, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stdout + stderr
    data = json.loads((out / "results.json").read_text())
    journal_checks = {json.loads(line).get("check_id") for line in (out / "results.jsonl").read_text().splitlines()}
    assert [r["check_id"] for r in data["results"]] == ["example.sleep"] and "example.echo" not in journal_checks
    after = run_preflight("run", "--checks", "example.echo", "--format", "json", "--out", str(out), "--no-history",
                          cwd=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr  # the lock ends with the process that held it
