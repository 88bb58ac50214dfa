"""The real runner, agent and worker processes, driven through the real `preflight run`.

The example plugin in tests/plugins/preflight-example supplies checks that hang, crash or report a
chosen status; it must be installed (`.ci/run` installs it).
"""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import pids_alive, preflight_cmd, run_preflight

pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def by_id(data: dict) -> dict:
    return {r["check_id"]: r for r in data["results"]}


def test_a_hanging_check_is_killed_with_its_tree_and_the_run_goes_on(tmp_path):
    pid_file = tmp_path / "pids"
    (tmp_path / "preflight.toml").write_text(
        f'[checks."example.sleep"]\nseconds = 600\ntimeout = 3\npid_file = "{pid_file}"\n')
    start = time.monotonic()
    proc = run_preflight("run", "--config", "preflight.toml", "--checks", "example.sleep,example.echo",
                         "--out", "out", cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert elapsed < 30
    data = by_id(results(tmp_path / "out"))
    assert data["example.sleep"]["status"] == "ERROR"
    assert "timed out after 3s" in data["example.sleep"]["summary"]
    assert data["example.echo"]["status"] == "PASS"  # the rest completes
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2  # the check's process and the grandchild it started
    assert pids_alive(pids) == []


def test_a_crashing_check_is_error_with_its_traceback(tmp_path):
    proc = run_preflight("run", "--checks", "example.crash,example.echo", "--set", "example.crash.message=boom",
                         "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1
    data = by_id(results(tmp_path / "out"))
    crash = data["example.crash"]
    assert crash["status"] == "ERROR" and crash["summary"] == "crashed: RuntimeError: boom"
    assert "Traceback" in crash["evidence"][-1]["output_tail"] and "RuntimeError: boom" in crash["evidence"][-1]["output_tail"]
    assert data["example.echo"]["status"] == "PASS"


@pytest.mark.parametrize("status, extra, code, verdict", [
    ("PASS", [], 0, "GO"),
    ("WARN", [], 0, "GO"),
    ("WARN", ["--fail-on", "warn"], 1, "NO-GO"),
    ("FAIL", [], 1, "NO-GO"),
    ("ERROR", [], 1, "NO-GO"),
    ("SKIP", [], 3, "INCOMPLETE"),  # nothing measured is never GO
])
def test_exit_code_matches_the_verdict(tmp_path, status, extra, code, verdict):
    proc = run_preflight("run", "--checks", "example.echo", "--set", f"example.echo.status={status}",
                         "--format", "json", "--out", "out", *extra, cwd=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert results(tmp_path / "out")["verdict"]["verdict"] == verdict
    assert f"preflight: {verdict}" in proc.stdout


def test_incomplete_results_exit_3(tmp_path):
    proc = run_preflight("run", "--checks", "example.echo", "--format", "json", "--out", "out", cwd=tmp_path)
    data = results(tmp_path / "out")
    data["planned"].append("example.sleep")  # a planned check whose result never arrived
    (tmp_path / "partial.json").write_text(json.dumps(data))
    proc = run_preflight("report", "partial.json", "--out", "again", cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "INCOMPLETE" in proc.stdout


def test_plain_output_without_a_terminal_has_no_control_codes(tmp_path):
    proc = run_preflight("run", "--checks", "example.echo", "--out", "out", cwd=tmp_path)
    assert "\x1b" not in proc.stdout
    assert proc.stdout.splitlines()[0].startswith("PASS  example.echo")


def start_run_until_sleeping(tmp_path, pid_file, out):
    """Start `preflight run` of example.echo then a 120 s example.sleep; return once the sleep has begun."""
    proc = subprocess.Popen(
        preflight_cmd("run", "--checks", "example.echo,example.sleep", "--set", "example.sleep.seconds=120",
                      "--set", f'example.sleep.pid_file="{pid_file}"', "--out", str(out)),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    try:
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the sleeping check never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def test_sigint_writes_partial_reports_and_exits_130(tmp_path):
    pid_file, out = tmp_path / "pids", tmp_path / "out"
    proc = start_run_until_sleeping(tmp_path, pid_file, out)
    try:
        # Results are on disk the moment they are known, before the run ends.
        streamed = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert streamed[0]["preflight_plan"]["planned"] == ["example.echo", "example.sleep"]
        assert [r["check_id"] for r in streamed[1:]] == ["example.echo"]
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    data = results(out)
    assert data["incomplete"] is True and data["interrupted"] is True
    assert [r["check_id"] for r in data["results"]] == ["example.echo"]
    assert "interrupted" in (out / "report.md").read_text()
    assert (out / "report.html").is_file() and (out / "junit.xml").is_file()
    assert pids_alive([int(p) for p in pid_file.read_text().split()]) == []


def test_a_killed_run_rerendered_from_results_jsonl_is_incomplete_naming_what_is_missing(tmp_path):
    import os

    pid_file, out = tmp_path / "pids", tmp_path / "out"
    proc = start_run_until_sleeping(tmp_path, pid_file, out)
    try:
        proc.kill()  # SIGKILL: no reports, only what results.jsonl holds
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The agent sees its stdin close and ends the sleeping check with its tree.
    deadline = time.monotonic() + 30
    pids = [int(p) for p in pid_file.read_text().split()]
    while pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids_alive(pids):  # only if the agent did not: processes this test started
        os.kill(pid, signal.SIGKILL)
    with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"check_id": "example.sleep", "node": ')  # and a write cut short
    again = run_preflight("report", str(out / "results.jsonl"), "--out", "again", "--format", "md,json", cwd=tmp_path)
    assert again.returncode == 3, again.stdout + again.stderr
    assert "dropped line 3" in again.stderr
    data = results(tmp_path / "again")
    assert data["verdict"]["verdict"] == "INCOMPLETE"
    assert "example.sleep on " in data["verdict"]["reason"]
    assert [r["check_id"] for r in data["results"]] == ["example.echo"]
