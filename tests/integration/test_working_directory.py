"""Real runs started in a directory that holds a planted `torch/` folder or a fake `torch.py`
(and the same for tensorflow): what preflight reports is the installed framework, and the fake is
never imported, neither by framework detection nor by a check or its ranks."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from tests.conftest import run_preflight

pytest.importorskip("torch")
FAKE = ("import pathlib; pathlib.Path(__file__).with_name('MARKER-' + __name__).write_text('imported')\n"
        "__version__ = '0.0-fake'\n")


def plant(where, kind: str) -> None:
    for name in ("torch", "tensorflow"):
        if kind == "folder":
            (where / name).mkdir()
        else:
            (where / f"{name}.py").write_text(FAKE)


def results(where) -> dict:
    data = json.loads((where / "out" / "results.json").read_text())
    return {r["check_id"]: r for r in data["results"]}


@pytest.mark.parametrize("kind", ["folder", "module"])
def test_detection_reports_the_installed_frameworks_not_the_planted_ones(tmp_path, kind):
    plant(tmp_path, kind)
    run = run_preflight("run", "--checks", "node.environment,versions.pinned", "--format", "json", "--out", "out",
                        cwd=tmp_path, timeout=180)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    found = results(tmp_path)
    assert found["node.environment"]["facts"]["frameworks"]["torch"] is True
    stack = found["versions.pinned"]["facts"]["stack"]
    assert stack["torch"] == metadata.version("torch")
    assert "torch" not in stack.get("errors", {}), stack["errors"]  # the build probe ran and found the real one
    assert not list(tmp_path.glob("MARKER-*"))


def test_a_check_that_imports_torch_gets_the_installed_one(tmp_path):
    plant(tmp_path, "module")
    run = run_preflight("run", "--checks", "collectives.local", "--format", "json", "--out", "out",
                        "--set", "collectives.local.iters=1", "--set", "collectives.local.warmup=0",
                        "--set", "collectives.local.sizes_bytes=[1024]", "--set", "collectives.local.gloo_ranks=2",
                        cwd=tmp_path, timeout=240)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    facts = results(tmp_path)["collectives.local"]["facts"]
    assert facts["torch_version"] == metadata.version("torch")
    assert [r.get("ok") for r in facts["runs"]] == [True], facts["runs"]  # the ranks imported the real torch too
    assert not list(tmp_path.glob("MARKER-*"))


WORKING_DIRECTORY_TOML = """
[checks."canary.training"]
entry = "team_model:build"

[checks."node.environment"]
min_shm_gib = 0.001
min_free_disk_gib = 0.001

[history]
url = "{history}"

[silence]
"node.environment.nofile-low" = {{reason = "the image sets it later"}}
"""


def test_a_run_says_what_the_working_directory_s_preflight_toml_changes_before_it_starts(tmp_path):
    history = tmp_path / "elsewhere.sqlite"
    (tmp_path / "preflight.toml").write_text(WORKING_DIRECTORY_TOML.format(history=history))
    run = run_preflight("run", "--checks", "node.environment", "--format", "json,md", "--out", "out", cwd=tmp_path)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    before = run.stderr.split("preflight: ", 1)[1]  # said on stderr, before the run's own output
    for said in ("runs your code: canary.training.entry = 'team_model:build'", f"history at {history}",
                 "silences node.environment.nofile-low (the image sets it later)",
                 "node.environment.min_shm_gib = 0.001, over 1.0 (default)"):
        assert said in before, run.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    changed = data["judged_with"]["working_directory"]
    assert any("runs your code" in line for line in changed) and any("silences" in line for line in changed)
    assert "runs your code: canary.training.entry" in (tmp_path / "out" / "report.md").read_text()


def test_a_healthcheck_never_reads_the_preflight_toml_of_the_directory_it_starts_in(tmp_path):
    (tmp_path / "preflight.toml").write_text('[silence]\n"node.environment.disk-unreadable" = {reason = "planted"}\n'
                                             f'[checks."node.environment"]\ndisk_paths = ["{tmp_path / "none"}"]\n')
    hook = run_preflight("healthcheck", "--checks", "node.environment", "--out", "out", "--set",
                         "node.environment.min_free_disk_gib=0.001", cwd=tmp_path, timeout=120)
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["silenced"] == {} and "preflight.toml" not in hook.stderr, hook.stderr
    assert not data["config_path"] and "disk-unreadable" not in json.dumps(data["results"]), hook.stdout
