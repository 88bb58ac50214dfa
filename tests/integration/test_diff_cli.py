"""`preflight diff` and `preflight run --baseline`, through the real command line."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import DATA, run_preflight

CLUSTER_RUN = DATA / "reports" / "cluster_run.json"


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def planted(data: dict) -> dict:
    """The cluster run a week later: a slower link, a newer torch on every node, a GPU lost on gpu02."""
    later = copy.deepcopy(data)
    later["started_at"] = "2026-12-06T10:00:00+00:00"
    for result in later["results"]:
        if result["check_id"] == "net.bandwidth":
            for m in result["measurements"]:
                if m["node"] == "gpu01 -> gpu02":
                    m["value"], m["samples"] = 70.0, [69.8, 70.0, 70.3]
        elif result["check_id"] == "versions.pinned":
            result["facts"]["stack"]["torch"] = "2.5.0"
        elif result["check_id"] == "gpu.visibility" and result["node"] == "gpu02":
            result["status"], result["summary"] = "FAIL", "7 GPUs visible, 8 expected"
    return later


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    old = json.loads(CLUSTER_RUN.read_text())
    return write(tmp_path / "old.json", old), write(tmp_path / "new.json", planted(old))


def test_diff_finds_each_planted_regression_and_exits_1(tmp_path, runs):
    old, new = runs
    proc = run_preflight("diff", str(old), str(new), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    regressions = proc.stdout.split("Regressions:\n")[1]
    assert "gpu.visibility on gpu02: PASS -> FAIL" in regressions
    assert "net.bandwidth gpu01 -> gpu02: 93.6 Gbit/s -> 70 Gbit/s (-25%)" in regressions
    assert "torch 2.4.1 -> 2.5.0 on gpu[01-03]" in regressions


def test_each_regression_alone_is_enough(tmp_path):
    old = json.loads(CLUSTER_RUN.read_text())
    write(tmp_path / "old.json", old)
    for name, change in [
        ("bandwidth", lambda r: r["check_id"] == "net.bandwidth" and r["measurements"][0].update(value=1.0)),
        ("version", lambda r: r["check_id"] == "versions.pinned" and r["facts"]["stack"].update(numpy="2.0.0")),
        ("status", lambda r: r["check_id"] == "node.environment" and r["node"] == "gpu01" and r.update(status="FAIL")),
    ]:
        new = copy.deepcopy(old)
        for result in new["results"]:
            change(result)
        write(tmp_path / f"{name}.json", new)
        proc = run_preflight("diff", "old.json", f"{name}.json", cwd=tmp_path)
        assert proc.returncode == 1, (name, proc.stdout)


def test_two_equal_runs_exit_0(tmp_path, runs):
    old, _ = runs
    proc = run_preflight("diff", str(old), str(old), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no regression against the baseline run of 2026-11-29 10:00" in proc.stdout


def test_formats_and_options(tmp_path, runs):
    old, new = runs
    as_json = run_preflight("diff", "--format", "json", str(old), str(new), cwd=tmp_path)
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and data["regressions"] == 3 and data["exit_code"] == 1
    as_md = run_preflight("diff", "--format", "md", str(old), str(new), cwd=tmp_path)
    assert as_md.stdout.startswith("### ❌ Against the baseline run") and "**Regressions**" in as_md.stdout
    # Versions as information, and a tolerance wider than the bandwidth drop: only the status is left.
    relaxed = run_preflight("diff", "--ignore-versions", "--tolerance", "0.3", "--format", "json", str(old), str(new),
                            cwd=tmp_path)
    data = json.loads(relaxed.stdout)
    assert relaxed.returncode == 1 and data["regressions"] == 1
    assert [c["kind"] for c in data["versions"]] == ["info"]


@pytest.mark.parametrize("args, message", [
    (["old.json", "missing.json"], "cannot read missing.json"),
    (["old.json", "not-a-report.json"], "not-a-report.json is not a preflight results file"),
    (["old.json", "list.json"], "list.json is not a preflight results file"),
    (["--tolerance", "-1", "old.json", "old.json"], "--tolerance must be zero or more"),
    (["--format", "pdf", "old.json", "old.json"], "Invalid value for '--format'"),
])
def test_bad_input_exits_2(tmp_path, runs, args, message):
    assert runs[0] == tmp_path / "old.json"
    (tmp_path / "not-a-report.json").write_text('{"hello": "world"}')
    (tmp_path / "list.json").write_text("[1, 2]")
    proc = run_preflight("diff", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


# -- preflight run --baseline: real runs on this machine ----------------------------------------------

def test_run_with_a_baseline_shows_regressions_and_blocks_only_when_asked(tmp_path):
    first = run_preflight("run", "--checks", "node.environment", "--out", "base", "--format", "json", cwd=tmp_path)
    assert first.returncode in (0, 1), first.stdout + first.stderr
    # Plant a regression in a figure that does not move between runs: the known-good machine had ten
    # times the CPUs this one has.
    base = json.loads((tmp_path / "base" / "results.json").read_text())
    (cpus,) = [m for m in base["results"][0]["measurements"] if m["name"] == "usable CPUs"]
    cpus["value"] *= 10
    write(tmp_path / "base" / "results.json", base)

    shown = run_preflight("run", "--checks", "node.environment", "--baseline", "base/results.json", "--out", "new",
                          cwd=tmp_path)
    data = json.loads((tmp_path / "new" / "results.json").read_text())
    assert not any(r["check_id"] == "baseline.comparison" for r in data["results"])  # a field, not a result
    assert any(c["name"] == "usable CPUs" and c["kind"] == "regression" for c in data["baseline"]["figures"])
    assert data["baseline"]["old_label"] == "base/results.json" and not data["baseline"]["fail_on_regression"]
    assert shown.returncode == data["verdict"]["exit_code"]  # the regression alone does not block
    assert "Baseline:" in shown.stdout and "regression: node.environment usable CPUs" in shown.stdout
    assert 'id="baseline"' in (tmp_path / "new" / "report.html").read_text()
    assert "Against the baseline run" in (tmp_path / "new" / "report.md").read_text()
    assert 'name="baseline.comparison"' in (tmp_path / "new" / "junit.xml").read_text()

    blocked = run_preflight("run", "--checks", "node.environment", "--baseline", "base/results.json",
                            "--fail-on-regression", "--out", "blocked", "--format", "json", cwd=tmp_path)
    data = json.loads((tmp_path / "blocked" / "results.json").read_text())
    assert blocked.returncode == 1 and data["verdict"]["verdict"] == "NO-GO"
    assert {"check_id": "baseline.comparison", "node": "cluster", "status": "FAIL"} in data["verdict"]["blocking"]


@pytest.mark.parametrize("args, message", [
    (["--baseline", "missing.json"], "cannot read missing.json"),
    (["--fail-on-regression"], "--fail-on-regression needs --baseline FILE"),
    (["--baseline", "old.json", "--baseline-tolerance", "-0.5"], "--baseline-tolerance must be zero or more"),
])
def test_run_with_a_bad_baseline_is_exit_2_before_anything_runs(tmp_path, args, message):
    shutil.copy(CLUSTER_RUN, tmp_path / "old.json")
    proc = run_preflight("run", "--checks", "node.environment", "--out", "out", *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "out").exists()
