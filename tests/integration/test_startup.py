"""The CLI starts without importing the frameworks it tests."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from click.testing import CliRunner
from preflight.cli.main import cli
for args in (["--help"], ["list"], ["explain", "node.environment"], ["run", "--help"]):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (args, result.output)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "numpy", "matplotlib", "pynvml"))
print(",".join(heavy))
"""


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_cli_start_up_imports_no_framework(framework):
    pytest.importorskip(framework)  # only meaningful where the framework could be imported
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"imported at start-up: {proc.stdout.strip()}"
