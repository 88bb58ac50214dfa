"""The action and the workflows pass zizmor's audits (pinned actions, least privilege, no template
injection, no persisted credentials), offline so that the result depends only on these files."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# pip puts zizmor's binary next to the interpreter; a zizmor on PATH will do as well.
ZIZMOR = shutil.which("zizmor", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


@pytest.mark.skipif(ZIZMOR is None, reason="zizmor is not installed (pip install zizmor, in the test extra)")
def test_action_and_workflows_have_no_zizmor_findings():
    inputs = [".github/", "action.yml"]
    assert all((ROOT / p).exists() for p in inputs)
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    run = subprocess.run([ZIZMOR, "--offline", "--no-progress", *inputs], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.skipif(ZIZMOR is None, reason="zizmor is not installed (pip install zizmor, in the test extra)")
def test_zizmor_fails_a_workflow_like_the_ones_these_replaced(tmp_path):
    """The audit above passing means something: a tag-pinned checkout that keeps its credentials fails."""
    workflow = tmp_path / ".github" / "workflows" / "ci.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text("name: ci\non: push\njobs:\n  test:\n    runs-on: ubuntu-24.04\n    steps:\n"
                        "      - uses: actions/checkout@v4\n")
    run = subprocess.run([ZIZMOR, "--offline", "--no-progress", "--format", "plain", ".github/"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "unpinned-uses" in run.stdout and "artipacked" in run.stdout
