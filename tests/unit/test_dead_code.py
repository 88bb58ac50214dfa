"""What is written is used: no unused import (ruff's F401) and no dead code vulture is sure of (80%
confidence and above: unused imports, variables, unreachable code) in preflight/ and checks/. Both
tools come with the `test` extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PATHS = ["preflight", "checks"]


def _tool(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: it is part of the test extra (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_no_unused_import():
    # The tests, benches and scripts too: an unused import there is as stale as anywhere.
    done = _tool("ruff", "check", "--isolated", "--select", "F401", "--no-cache", "--output-format", "concise", *PATHS,
                 "tests", "bench", "scripts")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_dead_code_vulture_is_sure_of():
    done = _tool("vulture", "--min-confidence", "80", *PATHS)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("module,args,dead", [
    ("ruff", ["check", "--isolated", "--select", "F401", "--no-cache"], "import os\n"),
    ("vulture", ["--min-confidence", "80"], "import os\n\ndef f():\n    return 1\n    print('never')\n"),
])
def test_each_tool_fails_on_what_it_should_find(module, args, dead, tmp_path):
    (tmp_path / "dead.py").write_text(dead)
    done = _tool(module, *args, str(tmp_path / "dead.py"))
    assert done.returncode != 0 and "dead.py" in done.stdout
