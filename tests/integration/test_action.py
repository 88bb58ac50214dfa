"""The GitHub Action's steps (scripts/action/preflight-action.sh), end to end against real runs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "action" / "preflight-action.sh"
pytest.importorskip("preflight_example", reason="install tests/plugins/preflight-example (pip install -e)")


def action(mode: str, tmp_path: Path, **inputs: str) -> subprocess.CompletedProcess:
    env = {
        # Nothing from around the test run stands in for an input: only what the test passes.
        **{k: v for k, v in os.environ.items()
           if not k.startswith(("INPUT_", "GITHUB_", "PREFLIGHT_EXIT_CODE", "PREFLIGHT_VERDICT"))},
        "PREFLIGHT_SKIP_INSTALL": "1",  # preflight is already installed in this interpreter
        "INPUT_PYTHON": sys.executable,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
        "RUNNER_TEMP": str(tmp_path),
        **{(k.upper() if k.startswith("preflight_") else f"INPUT_{k.upper()}"): v for k, v in inputs.items()},
    }
    return subprocess.run(["bash", str(SCRIPT), mode], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def outputs(tmp_path: Path) -> dict:
    return dict(line.split("=", 1) for line in (tmp_path / "output.txt").read_text().splitlines())


def gate(tmp_path: Path) -> subprocess.CompletedProcess:
    """The gate step, given the run step's outputs as action.yml passes them."""
    out = outputs(tmp_path)
    return action("gate", tmp_path, **{"preflight_exit_code": out["exit-code"], "preflight_verdict": out["verdict"]})


@pytest.mark.parametrize("status, verdict, code", [("PASS", "GO", 0), ("FAIL", "NO-GO", 1)])
def test_action_runs_writes_summary_and_gates_on_the_verdict(tmp_path, status, verdict, code):
    run = action("run", tmp_path, args=f"--checks example.echo --set example.echo.status={status} "
                                       "--set 'example.echo.text=\"a check with spaces\"'")
    assert run.returncode == 0, run.stdout + run.stderr  # the upload step must still run
    out = outputs(tmp_path)
    assert out == {"exit-code": str(code), "report-dir": "preflight-report", "verdict": verdict,
                   "results-json": "preflight-report/results.json"}
    summary = (tmp_path / "summary.md").read_text()
    assert f"**{verdict}**" in summary
    report_dir = tmp_path / "preflight-report"
    assert "a check with spaces" in (report_dir / "report.html").read_text()
    assert sorted(p.name for p in report_dir.iterdir()) == sorted(
        ["results.jsonl", "results.json", "report.md", "report.html", "junit.xml"])
    assert json.loads((report_dir / "results.json").read_text())["verdict"]["verdict"] == verdict
    gated = gate(tmp_path)
    assert gated.returncode == code
    if code:
        assert "::error::preflight: NO-GO" in gated.stdout


def test_action_reports_a_usage_error_and_fails_the_job(tmp_path):
    run = action("run", tmp_path, args="--checks no.such.check")
    assert run.returncode == 0
    assert outputs(tmp_path)["exit-code"] == "2" and outputs(tmp_path)["verdict"] == "ERROR"
    assert outputs(tmp_path)["results-json"] == ""
    assert "did not produce a report" in (tmp_path / "summary.md").read_text()
    assert gate(tmp_path).returncode == 2


def test_action_input_is_not_expanded_by_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    run = action("run", tmp_path, args=f"--checks example.echo --set 'example.echo.text=$(touch {marker})'")
    assert run.returncode == 0
    assert not marker.exists()
    assert f"$(touch {marker})" in (tmp_path / "preflight-report" / "report.html").read_text()


def fresh_outputs(tmp_path: Path) -> None:
    """A new step: GitHub gives every step its own, empty, output file."""
    (tmp_path / "output.txt").unlink(missing_ok=True)


def test_a_stale_go_report_is_never_this_invocations_verdict(tmp_path):
    assert action("run", tmp_path, args="--checks example.echo").returncode == 0
    assert outputs(tmp_path)["verdict"] == "GO"
    report_dir = tmp_path / "preflight-report"
    (report_dir / "preflight.prom").write_text("preflight_verdict 1\n")
    (report_dir / "notes.txt").write_text("not preflight's")
    fresh_outputs(tmp_path)
    run = action("run", tmp_path, args="--checks no.such.check")  # exits 2 before writing anything
    assert run.returncode == 0, run.stdout + run.stderr
    out = outputs(tmp_path)
    assert out["exit-code"] == "2" and out["verdict"] == "ERROR" and out["results-json"] == ""
    # The earlier run's reports are gone, so neither the artifact nor a later step can take them for this run's.
    assert sorted(p.name for p in report_dir.iterdir()) == ["notes.txt"]
    assert gate(tmp_path).returncode == 2


def test_a_planted_go_results_json_does_not_outlive_a_no_go_run(tmp_path):
    report_dir = tmp_path / "preflight-report"
    report_dir.mkdir()
    (report_dir / "results.json").write_text(json.dumps({"verdict": {"verdict": "GO", "exit_code": 0}}))
    run = action("run", tmp_path, args="--checks example.echo --set example.echo.status=FAIL")
    assert run.returncode == 0, run.stdout + run.stderr
    assert outputs(tmp_path)["verdict"] == "NO-GO" and outputs(tmp_path)["exit-code"] == "1"
    assert json.loads((report_dir / "results.json").read_text())["verdict"]["verdict"] == "NO-GO"
    assert gate(tmp_path).returncode == 1


@pytest.mark.parametrize("args", ["--checks example.echo --out elsewhere", "--checks example.echo --out=elsewhere",
                                  "--checks example.echo --format html,md", "--checks example.echo --format=junit"])
def test_args_that_would_hide_the_report_from_the_action_are_refused(tmp_path, args):
    run = action("run", tmp_path, args=args)
    assert run.returncode == 0
    assert outputs(tmp_path)["verdict"] == "ERROR" and outputs(tmp_path)["exit-code"] == "2"
    assert "::error::" in run.stdout
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "preflight-report").exists()
    assert gate(tmp_path).returncode == 2


def test_a_baseline_inside_the_report_dir_is_refused_not_deleted(tmp_path):
    assert action("run", tmp_path, args="--checks example.echo").returncode == 0
    baseline = tmp_path / "preflight-report" / "results.json"
    kept = baseline.read_text()
    fresh_outputs(tmp_path)
    run = action("run", tmp_path, args="--checks example.echo", baseline=str(baseline))
    assert run.returncode == 0
    assert outputs(tmp_path)["verdict"] == "ERROR" and baseline.read_text() == kept
    assert "baseline" in run.stdout


def test_the_exit_code_and_a_results_json_that_disagree_are_an_error(tmp_path):
    assert action("run", tmp_path, args="--checks example.echo --set example.echo.status=FAIL").returncode == 0
    results = str(tmp_path / "preflight-report" / "results.json")

    def judge(code: int, path: str = results) -> list[str]:
        done = subprocess.run([sys.executable, str(SCRIPT.parent / "action_lib.py"), "judge", str(code), path],
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.split("\n")[:2]

    assert judge(1) == ["NO-GO", ""]
    for code in (0, 2, 3):  # a NO-GO report under another exit code
        verdict, problem = judge(code)
        assert verdict == "ERROR" and problem, code
    assert judge(0, "")[0] == "ERROR" and judge(0, "")[1]  # a verdict promised, no report to back it
    assert judge(0, str(tmp_path / "absent.json"))[1]
    assert judge(2, "") == ["ERROR", ""]
    assert judge(130, results) == ["INTERRUPTED", ""] and judge(130, "") == ["INTERRUPTED", ""]
    assert judge(137, "") == ["ERROR", ""]
    assert judge(4)[0] == "ERROR" and judge(4, "")[0] == "ERROR"  # a subset GO that results.json does not back
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps({"verdict": {"verdict": "NO-GO", "exit_code": 4, "subset_go": True}}))
    assert judge(4, str(subset)) == ["SUBSET-GO", ""]


def test_gate_fails_without_an_exit_code_or_with_one_its_verdict_contradicts(tmp_path):
    assert action("gate", tmp_path).returncode != 0
    assert action("gate", tmp_path, preflight_exit_code="0", preflight_verdict="ERROR").returncode != 0
    assert action("gate", tmp_path, preflight_exit_code="0", preflight_verdict="GO").returncode == 0
    assert action("gate", tmp_path, preflight_exit_code="130", preflight_verdict="INTERRUPTED").returncode == 130
    assert action("gate", tmp_path, preflight_exit_code="4", preflight_verdict="SUBSET-GO").returncode == 4


@pytest.mark.parametrize("inputs, spec", [
    ({}, str(SCRIPT.parents[2])),
    ({"version": "0.1.0"}, "preflight-cluster==0.1.0"),
    ({"install": "dist/preflight_cluster-0.1.0-py3-none-any.whl"}, "dist/preflight_cluster-0.1.0-py3-none-any.whl"),
])
def test_install_defaults_to_the_actions_own_checkout(tmp_path, inputs, spec):
    done = action("install-spec", tmp_path, **inputs)
    assert done.returncode == 0 and done.stdout.strip() == spec


@pytest.mark.parametrize("inputs", [{"version": "0.1.0", "install": "."}, {"version": "0.2 --pre"},
                                    {"version": ">=0"}, {"install": "--index-url=http://127.0.0.1/"}])
def test_install_inputs_that_do_not_name_one_release_are_refused(tmp_path, monkeypatch, inputs):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # should the refusal ever let pip run, it stays off the network
    assert action("install-spec", tmp_path, **inputs).returncode == 2
    run = action("run", tmp_path, preflight_skip_install="0", args="--checks example.echo", **inputs)
    assert run.returncode == 0 and outputs(tmp_path)["verdict"] == "ERROR"
    assert not (tmp_path / "preflight-report").exists()  # refused before anything was installed or run


def test_an_interrupted_run_is_interrupted_not_its_partial_verdict(tmp_path):
    pid_file = tmp_path / "pids"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))},
           "PREFLIGHT_SKIP_INSTALL": "1", "INPUT_PYTHON": sys.executable,
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
           "RUNNER_TEMP": str(tmp_path),
           "INPUT_ARGS": f"--checks example.echo,example.sleep --set example.sleep.seconds=120 "
                         f"--set 'example.sleep.pid_file=\"{pid_file}\"'"}
    proc = subprocess.Popen(["bash", str(SCRIPT), "run"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the sleeping check never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a cancelled job gets it
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in pid_file.read_text().split() if pid_file.exists() else []:
            try:  # only processes this test started, should the run have left one behind
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, stdout + stderr
    out = outputs(tmp_path)
    assert out["exit-code"] == "130" and out["verdict"] == "INTERRUPTED", stdout + stderr
    assert json.loads((tmp_path / "preflight-report" / "results.json").read_text())["interrupted"] is True
    assert gate(tmp_path).returncode == 130


def externally_managed(python: str) -> bool:
    """PEP 668: the interpreter's pip refuses to install outside a virtual environment."""
    done = subprocess.run([python, "-c", "import os, sys, sysconfig; print(sys.prefix == sys.base_prefix and "
                                         "os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"],
                          capture_output=True, text=True)
    return done.stdout.strip() == "True"


def test_the_action_installs_into_a_venv_of_its_own_so_a_debian_system_python_works(tmp_path):
    system = "/usr/bin/python3"
    if not (Path(system).exists() and externally_managed(system)):
        pytest.skip("no externally managed (PEP 668) system Python at /usr/bin/python3")
    from preflight.run.ship import build_wheel

    wheel = build_wheel(tmp_path)
    had = subprocess.run([system, "-c", "import preflight"], capture_output=True, cwd=tmp_path).returncode == 0
    run = action("run", tmp_path, preflight_skip_install="0", python=system, install=str(wheel),
                 args="--checks node.environment")
    assert run.returncode == 0, run.stdout + run.stderr
    out = outputs(tmp_path)
    assert out["verdict"] in ("GO", "NO-GO", "INCOMPLETE"), run.stdout + run.stderr
    assert out["results-json"] == "preflight-report/results.json"
    assert (tmp_path / "preflight-venv" / "bin" / "preflight").exists()
    # The system Python itself is left as it was.
    assert (subprocess.run([system, "-c", "import preflight"], capture_output=True, cwd=tmp_path).returncode == 0) == had


def test_a_failed_install_says_what_failed_in_the_step_summary(tmp_path):
    missing = tmp_path / "nowhere" / "preflight_cluster-0.1.0-py3-none-any.whl"
    run = action("run", tmp_path, preflight_skip_install="0", install=str(missing), args="--checks example.echo")
    assert run.returncode == 0
    assert outputs(tmp_path)["verdict"] == "ERROR"
    summary = (tmp_path / "summary.md").read_text()
    assert "could not install preflight" in summary and str(missing) in summary
    fenced = summary[summary.index("```"):]
    assert "nowhere" in fenced and fenced.rstrip().endswith("```")  # pip's own words, in a block
    assert not (tmp_path / "preflight-report").exists()
