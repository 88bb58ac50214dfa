"""Framework detection is not fooled by the working directory: a planted empty `torch/` folder (a
namespace package to Python) or a planted `torch.py` there does not make a node without torch look
like one with it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.machine.frameworks import installed
from preflight.transport.module_argv import _BOOTSTRAP, isolated_module_argv
from preflight_checks.node.environment import NodeEnvironment, Params, importable
from tests.conftest import ROOT, load_facts

FAKE = "import pathlib; pathlib.Path(__file__).with_name('MARKER').write_text('imported')\n__version__ = '0.0-fake'\n"


def plant(where, kind: str, names=("torch", "tensorflow")) -> None:
    for name in names:
        if kind == "folder":
            (where / name).mkdir()
        else:
            (where / f"{name}.py").write_text(FAKE)


@pytest.mark.parametrize("kind", ["folder", "module"])
def test_a_plant_in_the_working_directory_is_not_a_framework(tmp_path, monkeypatch, kind):
    names = ("fw_not_installed_a", "fw_not_installed_b")
    plant(tmp_path, kind, names)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # as `python -m` puts it
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importable(list(names)) == dict.fromkeys(names, False)
    assert not (tmp_path / "MARKER").exists()


def test_a_bare_folder_anywhere_on_the_path_is_not_a_framework_but_a_real_module_is(tmp_path, monkeypatch):
    (tmp_path / "fw_folder_only").mkdir()
    (tmp_path / "fw_real").mkdir()
    (tmp_path / "fw_real" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not installed("fw_folder_only") and installed("fw_real") and installed("json")


@pytest.mark.parametrize("kind", ["folder", "module"])
def test_without_torch_installed_the_facts_say_no_framework_whatever_is_planted(tmp_path, kind):
    """A node with neither framework installed: an interpreter without site-packages (-S -I), started
    the way `python -m` would leave it (the working directory first on sys.path), holding the plants."""
    import psutil

    site = tmp_path / "site-without-frameworks"  # what this node has installed: no torch, no tensorflow
    site.mkdir()
    (site / "psutil").symlink_to(Path(psutil.__file__).parent, target_is_directory=True)
    (site / "preflight_checks").symlink_to(ROOT / "checks", target_is_directory=True)  # as installed
    work = tmp_path / "work"
    work.mkdir()
    plant(work, kind)
    code = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = ["", {str(ROOT)!r}, {str(site)!r}]
        from preflight_checks.node.environment import importable
        from preflight.launch.gpu_probe import framework_installed
        print(json.dumps({{"frameworks": importable(["torch", "tensorflow"]),
                          "probe": framework_installed("torch")}}))
    """)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=work, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"frameworks": {"torch": False, "tensorflow": False}, "probe": False}
    assert not (work / "MARKER").exists()
    facts = load_facts("node_environment/healthy_gpu_node.json")
    facts.update(nvidia_gpus=[], frameworks=seen["frameworks"])
    outcome = NodeEnvironment().evaluate(facts, Params(), Expect())
    assert "node.environment.no-framework" in {f.id for f in outcome.findings}


def test_child_processes_start_without_the_working_directory_on_their_import_path(tmp_path):
    lib, work = tmp_path / "lib", tmp_path / "work"
    lib.mkdir()
    work.mkdir()
    (lib / "cwd_probe.py").write_text("import importlib.util\nprint(importlib.util.find_spec('planted_mod') is not None)\n")
    (work / "planted_mod.py").write_text(FAKE)
    env = {"PYTHONPATH": f"{lib}:{ROOT}"}

    def sees_plant(argv):
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip() == "True"

    assert sees_plant([sys.executable, "-m", "cwd_probe"])  # what a plain `python -m` child would see
    assert not sees_plant(isolated_module_argv("cwd_probe"))
    assert not sees_plant([sys.executable, "-c", _BOOTSTRAP, "-", "cwd_probe"])  # the form before 3.11
    assert not (work / "MARKER").exists()
