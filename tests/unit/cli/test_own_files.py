"""preflight owns exactly the files it lists: it deletes nothing else, never writes through a link,
never replaces its own input, and a file it cannot write is exit 2 naming it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.cli.options import finish
from preflight.core.config import Config
from preflight.core.files import FileWriteError
from preflight.core.model import Measurement, Status
from preflight.reporters import json_report
from preflight.engine.runner import RunPlan, Runner
from tests.conftest import make_report, make_result

ENV_ONLY = ["--checks", "node.environment", "--set", "node.environment.min_free_disk_gib=0.0001"]


def go_report():
    return make_report([make_result("node.environment", "n1", Status.PASS,
                                    measurements=[Measurement("free", 5.0, "GiB", 1.0, ">=", True)])])


def invoke(*args: str):
    done = CliRunner().invoke(cli, list(args))
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return done


def test_a_run_leaves_the_users_scratch_directory_alone_and_removes_its_own(tmp_path):
    out = tmp_path / "out"
    (out / "scratch" / "node1").mkdir(parents=True)
    (out / "scratch" / "node1" / "notes.txt").write_text("mine")
    done = invoke("run", *ENV_ONLY, "--format", "json", "--out", str(out))
    assert done.exit_code in (0, 1, 3), done.output
    assert (out / "scratch" / "node1" / "notes.txt").read_text() == "mine"
    assert not list(out.glob(".preflight-scratch-*"))  # its own scratch directory is gone after the run
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "results.jsonl", "scratch"]


def test_reports_are_never_written_through_a_link_planted_at_their_name(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious")
    for name in ("report.md", "results.json", "junit.xml"):
        (out / name).symlink_to(victim)  # planted while the run was running, after the cleanup
    finish(go_report(), out, ["md", "json", "junit"], announce=False)
    assert victim.read_text() == "precious"
    for name in ("report.md", "results.json", "junit.xml"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_results_jsonl_is_never_opened_through_a_link(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious")
    (out / "results.jsonl").symlink_to(victim)
    with pytest.raises(FileWriteError, match="results.jsonl"):
        Runner(RunPlan(checks=[], config=Config(), output_dir=out, nodes=[]))
    assert victim.read_text() == "precious"


def test_a_run_refuses_an_out_that_would_replace_its_baseline(tmp_path):
    base = tmp_path / "known-good"
    base.mkdir()
    baseline = base / "results.json"
    baseline.write_text(json_report.render(go_report()))
    before = baseline.read_text()
    done = invoke("run", *ENV_ONLY, "--baseline", str(baseline), "--out", str(base))
    assert done.exit_code == 2 and str(baseline) in done.output and "--baseline" in done.output
    assert baseline.read_text() == before and sorted(p.name for p in base.iterdir()) == ["results.json"]


def test_a_config_file_in_the_out_directory_under_a_report_name_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("[expect]\n")
    done = invoke("run", *ENV_ONLY, "--config", str(out / "report.md"), "--out", str(out))
    assert done.exit_code == 2 and "--config" in done.output
    assert (out / "report.md").read_text() == "[expect]\n"


def test_healthcheck_out_over_an_earlier_run_leaves_one_verdict(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.md", "report.html", "junit.xml", "preflight.prom"):
        (out / name).write_text("an earlier run's GO")
    (out / "mine.txt").write_text("mine")
    done = invoke("healthcheck", "--budget", "20", "--out", str(out))
    assert done.exit_code in (0, 1, 3), done.output
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "results.json", "results.jsonl"]


def test_a_directory_named_like_a_report_file_is_exit_2_naming_it_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    done = invoke("run", *ENV_ONLY, "--out", str(out))
    assert done.exit_code == 2 and str(out / "report.html") in done.output
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # nothing ran, nothing written
    done = invoke("report", str(write_go(tmp_path)), "--out", str(out))
    assert done.exit_code == 2 and str(out / "report.html") in done.output


def write_go(tmp_path: Path) -> Path:
    path = tmp_path / "go" / "results.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json_report.render(go_report()))
    return path


def test_an_out_below_a_file_is_exit_2_naming_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    done = invoke("report", str(write_go(tmp_path)), "--out", str(tmp_path / "afile" / "out"))
    assert done.exit_code == 2 and "afile" in done.output


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True)
    return mounted.returncode == 0


def test_a_full_disk_is_exit_2_naming_the_report_with_results_jsonl_intact(tmp_path):
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "64k"):
        return test_a_full_step_summary_file_is_a_warning_not_a_crash(tmp_path)
    try:
        big = make_report([make_result("node.environment", "n1", Status.PASS, "x" * 40000,
                                       details=["y" * 40000])])
        source = tmp_path / "big" / "results.json"
        source.parent.mkdir()
        source.write_text(json_report.render(big))
        done = invoke("report", str(source), "--format", "json,md,html", "--out", str(small / "out"))
        assert done.exit_code == 2, done.output
        assert "No space left on device" in done.output and str(small / "out") in done.output
        assert "Traceback" not in done.output
        left = {p.name: p.stat().st_size for p in (small / "out").iterdir()}
        assert all(size > 0 for size in left.values()) and not [n for n in left if n.endswith(".tmp")]
        # A run whose disk fills up while it runs: the result that no longer fits is cut back off
        # results.jsonl (every line left is whole), the reports cannot be written: exit 2 naming them.
        run_out = small / "run"
        filler = threading.Thread(target=fill_once_results_arrive, args=(run_out / "results.jsonl", small / "filler"))
        filler.start()
        try:
            done = invoke("run", "--checks", "example.echo", "--set", f'example.echo.output="{"z" * 6000}"',
                          "--out", str(run_out))
        finally:
            filler.join(timeout=90)
        assert done.exit_code == 2 and "No space left on device" in done.output, done.output
        assert str(run_out / "results.jsonl") in done.output
        lines = [json.loads(line) for line in (run_out / "results.jsonl").read_text().splitlines()]
        assert "preflight_plan" in lines[0] and lines[1:] == []  # the plan, whole; the result did not fit
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def fill_once_results_arrive(results: Path, filler: Path, limit_s: float = 60) -> None:
    """Wait until results.jsonl holds the run plan, then fill the filesystem it is on."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if results.is_file() and results.read_text().endswith("\n"):
            break
        time.sleep(0.05)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:  # the filesystem is full
        pass
    finally:
        os.close(fd)


def test_a_full_step_summary_file_is_a_warning_not_a_crash(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.environ["GITHUB_STEP_SUMMARY"] = "/dev/full"
    try:
        finish(go_report(), out, ["md"], announce=False)
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]
    assert (out / "report.md").stat().st_size > 0
