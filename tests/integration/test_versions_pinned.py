"""versions.pinned for real: this virtual environment's pip metadata, real files, real probes."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.engine.context import NodeContext
from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight_checks.versions.pinned import VersionsPinned, collect_pins

CHECK = VersionsPinned()


def run_check(tmp_path: Path, **params):
    ctx = NodeContext(node="local", output_dir=tmp_path, scratch_dir=tmp_path, expect=Expect(), timeout_s=CHECK.timeout_s)
    return execute(CHECK, ctx, CHECK.params_from(params), Expect(), node="local")


def installed_frameworks() -> dict[str, str]:
    found = {}
    for name in CHECK.params_from().frameworks:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def exact_pins() -> str:
    """== pins of every installed framework, as this environment has them right now."""
    return "".join(f"{name}=={version}\n" for name, version in installed_frameworks().items())


def judge_files(paths: list[Path], stack: dict):
    """The real pins of real files against the real installed versions, with the stack already recorded."""
    params = CHECK.params_from({"requirements": [str(p) for p in paths]})
    facts = {"stack": stack, **collect_pins(params)}
    return CHECK.evaluate(facts, params, Expect())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One real run without requirements, started in a directory without pin files: the stack of this machine."""
    where = tmp_path_factory.mktemp("versions")
    before = os.getcwd()
    os.chdir(where)
    try:
        return run_check(where)
    finally:
        os.chdir(before)


def test_without_requirements_records_the_stack_and_warns_nothing_is_pinned(recorded):
    assert recorded.status is Status.WARN
    assert [f.id for f in recorded.findings] == ["versions.pinned.not-pinned"]
    stack = recorded.facts["stack"]
    assert stack["python"] == platform.python_version()
    assert stack["kernel"] == platform.release()
    assert stack["glibc"] == platform.libc_ver()[1]
    assert stack["numpy"] == metadata.version("numpy")
    assert Path("/etc/os-release").exists() is (stack["os"] is not None)


@pytest.mark.torch
def test_stack_has_torch_and_what_it_was_built_with(recorded):
    torch = pytest.importorskip("torch")
    stack = recorded.facts["stack"]
    assert stack["torch"] == metadata.version("torch")
    assert stack["torch_cuda"] == torch.version.cuda
    probes = [e for e in recorded.evidence if "preflight.workers.gpu_probe torch" in e.command]
    assert probes and probes[0].exit_code == 0


@pytest.mark.tensorflow
def test_stack_has_tensorflow_from_its_distribution(recorded):
    tf_dist = metadata.packages_distributions().get("tensorflow")
    if not tf_dist:
        pytest.skip("tensorflow is not installed")
    stack = recorded.facts["stack"]
    assert stack["tensorflow"] == metadata.version(tf_dist[0])
    assert stack["tensorflow_distribution"].replace("-", "_") == tf_dist[0].replace("-", "_").lower()


@pytest.mark.torch
def test_unpinned_torch_line_warns(tmp_path):
    pytest.importorskip("torch")
    req = tmp_path / "requirements.txt"
    req.write_text("# the team's training requirements\ntorch\n", encoding="utf-8")
    result = run_check(tmp_path, requirements=[str(req)])
    assert result.status is Status.WARN
    assert f"torch is not pinned exactly (==): {req}:2 'torch'" in result.summary


@pytest.mark.torch
def test_torch_pin_mismatch_fails_with_pin_and_installed(tmp_path):
    pytest.importorskip("torch")
    req = tmp_path / "requirements.txt"
    req.write_text(exact_pins().replace(f"torch=={metadata.version('torch')}", "torch==2.12.0"), encoding="utf-8")
    result = run_check(tmp_path, requirements=[str(req)])
    assert result.status is Status.FAIL
    assert f"torch: pinned ==2.12.0 ({req}:" in result.summary
    assert f"installed {metadata.version('torch')}" in result.summary


def test_missing_requirements_file_is_error_naming_it(tmp_path):
    missing = tmp_path / "requirements-missing.txt"
    result = run_check(tmp_path, requirements=[str(missing)])
    assert result.status is Status.ERROR
    assert f"requirements file {missing} does not exist" in result.summary
    assert result.facts["stack"]["python"] == platform.python_version()  # still there for versions.consistency


def test_exact_pins_of_what_is_installed_pass(tmp_path, recorded):
    assert installed_frameworks(), "no framework installed to pin"
    req = tmp_path / "requirements.txt"
    req.write_text(exact_pins(), encoding="utf-8")
    outcome = judge_files([req], recorded.facts["stack"])
    assert outcome.status is Status.PASS, outcome.details
    for name, version in installed_frameworks().items():
        assert f"{name} {version}" in outcome.summary


def test_include_is_followed_and_a_mismatch_there_named(tmp_path, recorded):
    (tmp_path / "base.txt").write_text(exact_pins(), encoding="utf-8")
    main = tmp_path / "requirements.txt"
    main.write_text("-r base.txt\n", encoding="utf-8")
    assert judge_files([main], recorded.facts["stack"]).status is Status.PASS
    numpy = metadata.version("numpy")
    (tmp_path / "base.txt").write_text(exact_pins().replace(f"numpy=={numpy}", "numpy==1.21.0"), encoding="utf-8")
    outcome = judge_files([main], recorded.facts["stack"])
    assert outcome.status is Status.FAIL
    assert f"numpy: pinned ==1.21.0 ({tmp_path / 'base.txt'}:" in outcome.summary


def test_pip_freeze_of_this_environment_passes(tmp_path, recorded):
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120, check=True)
    lock = tmp_path / "requirements.lock"
    lock.write_text(frozen.stdout, encoding="utf-8")
    outcome = judge_files([lock], recorded.facts["stack"])
    assert outcome.status is Status.PASS, outcome.details
    compared = next(m for m in outcome.measurements if m.name == "pins compared")
    # pip freeze writes one name==version per installed distribution, besides "-e" lines and comments.
    pinned_lines = [line for line in frozen.stdout.splitlines() if line and not line.startswith(("#", "-"))]
    assert compared.value == len(pinned_lines)
    assert {s["line"] for s in collect_pins(CHECK.params_from({"requirements": [str(lock)]}))["pins"]["skipped"]} == {
        line for line in frozen.stdout.splitlines() if line.startswith("-e")}
