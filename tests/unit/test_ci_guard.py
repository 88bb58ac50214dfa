"""The CI guard (tests/conftest.py): with PREFLIGHT_REQUIRE_ALL_TESTS=1 every skip fails the run,
at run time and at collection, except tests marked gpu or nogpu."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401
"""
INI = """[pytest]
markers =
    gpu: needs a GPU
    nogpu: needs no driver
"""


def run_planted(tmp_path: Path, files: dict[str, str], require: bool) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(INI)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_REQUIRE_ALL_TESTS"}
    if require:
        env["PREFLIGHT_REQUIRE_ALL_TESTS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


COLLECTION_SKIP = """import pytest
pytest.importorskip("surely_not_installed_xyz")

def test_never_runs():
    assert True
"""


@pytest.mark.parametrize("require", [False, True])
def test_a_module_level_importorskip_fails_only_in_ci_mode(tmp_path, require):
    result = run_planted(tmp_path, {"test_planted.py": COLLECTION_SKIP, "test_ok.py": "def test_ok():\n    pass\n"},
                         require)
    assert (result.returncode != 0) is require, result.stdout + result.stderr
    if require:
        assert "skipped at collection where every test must run" in result.stdout
        assert "surely_not_installed_xyz" in result.stdout


def test_a_run_time_skip_fails_in_ci_mode_but_not_a_gpu_or_nogpu_one(tmp_path):
    files = {"test_planted.py": """import pytest

def test_skips():
    pytest.skip("no chromium")

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no GPU here")

@pytest.mark.nogpu
def test_needs_no_driver():
    pytest.skip("a driver is present")
"""}
    result = run_planted(tmp_path, files, require=True)
    assert result.returncode == 1
    assert "1 failed, 2 skipped" in result.stdout, result.stdout
    assert "skipped where every test must run" in result.stdout
