"""SIGINT and SIGTERM, any number in any gap: exit 130, the reports written once and marked interrupted.

A real `preflight run` of example.echo then a long example.sleep (the example plugin, installed by
.ci/run), signalled once the sleep has begun: a burst of five SIGTERMs 10 ms apart (a CI cancel),
signals spread over the time the run takes to stop, and mixed SIGINT and SIGTERM.
"""

import json
import signal
import time

import pytest

from tests.conftest import pids_alive
from tests.integration.test_runner import start_run_until_sleeping

pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")

REPORTS = ("results.json", "report.md", "report.html", "junit.xml")


def signal_and_wait(proc, signals: list[int], gap_s: float) -> tuple[str, str]:
    try:
        for signum in signals:
            if proc.poll() is not None:
                break
            proc.send_signal(signum)
            time.sleep(gap_s)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("signals, gap_s", [
    ([signal.SIGTERM] * 5, 0.01),  # a burst, as CI runners cancel
    ([signal.SIGTERM] * 5, 0.3),  # spread over the time the run takes to stop
    ([signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM], 0.05),  # Ctrl-C, then a cancel
], ids=["burst", "spread", "mixed"])
def test_any_number_of_signals_ends_in_exit_130_with_the_reports_written_once(tmp_path, signals, gap_s):
    pid_file, out = tmp_path / "pids", tmp_path / "out"
    proc = start_run_until_sleeping(tmp_path, pid_file, out)
    stdout, stderr = signal_and_wait(proc, signals, gap_s)
    assert proc.returncode == 130, stdout + stderr
    assert "Aborted!" not in stdout + stderr and "Traceback" not in stderr
    assert stdout.count("Reports: ") == 1  # written once
    data = json.loads((out / "results.json").read_text())
    assert data["interrupted"] is True and data["incomplete"] is True
    assert data["verdict"]["exit_code"] == 130 and data["verdict"]["verdict"] == "INCOMPLETE"
    assert [r["check_id"] for r in data["results"]] == ["example.echo"]
    for name in REPORTS:
        assert (out / name).stat().st_size > 0
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary or scratch file left
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line).get("check_id") for line in lines[1:]] == ["example.echo"]
    assert pids_alive([int(p) for p in pid_file.read_text().split()]) == []
