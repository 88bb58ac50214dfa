"""versions.pinned: reading requirement files, and judging pins against given installed versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.core.check import CannotMeasure, Expect
from preflight.core.model import Status
from preflight_checks.versions.pinned import VersionsPinned, describe_stack, read_requirements
from tests.conftest import TESTS, finding_ids

DATA = TESTS / "data" / "versions"
CHECK = VersionsPinned()
STACK = json.loads((DATA / "stack_recorded.json").read_text(encoding="utf-8"))["stack"]

# What a GPU node of the fixtures has installed; None is "not installed".
INSTALLED = {"torch": "2.5.1+cu124", "torchvision": "0.20.1+cu124", "torchaudio": None, "tensorflow": None,
             "tensorflow-cpu": None, "jax": None, "jaxlib": None, "numpy": "1.26.4", "click": "8.1.7", "rich": "13.9.4"}


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def judge(paths: list[Path], installed: dict | None = None, **params):
    """Parse real files, then judge them against the given installed versions (no venv involved)."""
    p = CHECK.params_from({"requirements": [str(x) for x in paths], **params})
    pins = read_requirements(p.requirements)
    have = dict(INSTALLED if installed is None else installed)
    for entry in pins["entries"]:
        have.setdefault(entry["name"], None)
    facts = {"stack": STACK, "requirements_files": p.requirements, "pins": pins, "installed": have}
    return CHECK.evaluate(facts, p, Expect())


LOCKED = "torch==2.5.1\ntorchvision==0.20.1\nnumpy==1.26.4\n"


# ----------------------------------------------------------------------------------- parsing


def test_requirements_syntax(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_PIN", "2.5.1")
    req = write(tmp_path, "requirements.txt", "\n".join([
        "# a comment line",
        "torch==${TORCH_PIN}  # pinned for the cluster",
        "numpy>=1.26 \\",
        "    --hash=sha256:0123",
        "--extra-index-url https://index.example/whl/cu124",
        "-e ./vendored/tool",
        "https://files.example.org/tensorflow_cpu-2.17.0-cp311-cp311-manylinux_2_17_x86_64.whl",
        "mylib @ git+https://example.org/mylib.git@v1",
        "jax==0.4.30 ; sys_platform == 'win32'",
        "click===8.1.7",
        "rich==13.*",
        "",
    ]))
    pins = read_requirements([str(req)])
    entries = {e["name"]: e for e in pins["entries"]}
    assert entries["torch"]["exact"] == "2.5.1" and entries["torch"]["where"] == f"{req}:2"
    assert entries["numpy"]["kind"] == "range" and entries["numpy"]["where"] == f"{req}:3"
    assert entries["tensorflow-cpu"]["exact"] == "2.17.0"  # a wheel URL pins its version
    assert entries["mylib"]["kind"] == "url"
    assert entries["jax"]["applies"] is False
    assert entries["click"]["kind"] == "exact"
    assert entries["rich"]["kind"] == "range"  # a wildcard is not an exact pin
    reasons = {s["where"]: s["reason"] for s in pins["skipped"]}
    assert "pip option" in reasons[f"{req}:5"]
    assert "editable" in reasons[f"{req}:6"]


def test_includes_and_constraints_follow_pip(tmp_path):
    sub = tmp_path / "reqs"
    sub.mkdir()
    write(sub, "base.txt", "torch==2.5.1\n-c constraints.txt\n-r requirements.txt\n")  # a cycle back
    write(sub, "constraints.txt", "numpy==1.26.4\n")
    main = write(sub, "requirements.txt", "-r base.txt\nnumpy\n")
    pins = read_requirements([str(main)])
    assert pins["files"] == [str(main), str(sub / "base.txt"), str(sub / "constraints.txt")]
    sources = {(e["name"], e["source"]) for e in pins["entries"]}
    assert sources == {("torch", "requirement"), ("numpy", "constraint"), ("numpy", "requirement")}


def test_missing_file_and_missing_include_name_where(tmp_path):
    with pytest.raises(CannotMeasure, match="nope.txt does not exist"):
        read_requirements([str(tmp_path / "nope.txt")])
    main = write(tmp_path, "requirements.txt", "torch==2.5.1\n-r missing.txt\n")
    with pytest.raises(CannotMeasure, match=rf"missing.txt does not exist \(included from {main}:2\)"):
        read_requirements([str(main)])


def test_unparsable_line_names_file_and_line(tmp_path):
    req = write(tmp_path, "requirements.txt", "torch==2.5.1\nnumpy=>1.0\n")
    with pytest.raises(CannotMeasure, match=rf"{req}:2: cannot parse 'numpy=>1.0'"):
        read_requirements([str(req)])


def test_pyproject_dependencies_extras_and_groups(tmp_path):
    pyproject = write(tmp_path, "pyproject.toml", "\n".join([
        "[project]",
        'name = "trainer"',
        "dependencies = [",
        '  "torch==2.5.1",',
        '  "numpy>=1.26",',
        "]",
        "[project.optional-dependencies]",
        'tf = ["tensorflow==2.17.0"]',
        "[dependency-groups]",
        'dev = ["pytest==8.3.3", {include-group = "lint"}]',
        'lint = ["ruff"]',
    ]))
    entries = {e["name"]: e for e in read_requirements([str(pyproject)])["entries"]}
    assert entries["torch"]["where"] == f"{pyproject}:4" and entries["torch"]["optional"] is None
    assert entries["numpy"]["where"] == f"{pyproject}:5"
    assert entries["tensorflow"]["optional"] == "extra tf" and entries["tensorflow"]["where"] == f"{pyproject}:8"
    assert entries["pytest"]["optional"] == "group dev"


def test_pyproject_without_project_dependencies_or_broken(tmp_path):
    # Poetry's [tool.poetry.dependencies] are read ("2.5.1" alone is ==2.5.1 in Poetry); a file of
    # tool settings only has nothing to read.
    poetry = write(tmp_path, "pyproject.toml", '[tool.poetry.dependencies]\ntorch = "2.5.1"\n')
    entries = read_requirements([str(poetry)])["entries"]
    assert [(e["name"], e["specifier"], e["where"]) for e in entries] == [("torch", "==2.5.1", f"{poetry}:2")]
    settings = tmp_path / "settings"
    settings.mkdir()
    tools = write(settings, "pyproject.toml", "[tool.black]\nline-length = 120\n")
    with pytest.raises(CannotMeasure, match="no \\[project\\] dependencies"):
        read_requirements([str(tools)])
    broken = tmp_path / "other"
    broken.mkdir()
    bad = write(broken, "pyproject.toml", "[project\n")
    with pytest.raises(CannotMeasure, match=f"{bad}: cannot parse"):
        read_requirements([str(bad)])


# ---------------------------------------------------------------------------------- judging


def test_exact_pins_matching_pass_local_version_labels_included(tmp_path):
    outcome = judge([write(tmp_path, "requirements.txt", LOCKED)])
    # torch==2.5.1 accepts 2.5.1+cu124, as pip does (PEP 440 local versions).
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    mismatched = next(m for m in outcome.measurements if m.name == "pins not matching the installed version")
    assert mismatched.value == 0 and mismatched.ok


def test_unpinned_framework_warns_listing_each_line(tmp_path):
    req = write(tmp_path, "requirements.txt", "torch>=2.4\ntorchvision==0.20.1\nnumpy==1.26.4\n")
    outcome = judge([req])
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["versions.pinned.framework-not-exact"]
    assert f"{req}:1 'torch>=2.4'" in outcome.findings[0].message  # the line at fault is named
    assert "torch==" in outcome.remediation[0]  # its fix names the package


def test_installed_framework_missing_from_every_file_warns(tmp_path):
    req = write(tmp_path, "requirements.txt", "torch==2.5.1\nnumpy==1.26.4\n")
    outcome = judge([req])
    assert outcome.status is Status.WARN and finding_ids(outcome) == ["versions.pinned.framework-unpinned"]
    assert "torchvision==0.20.1+cu124" in outcome.remediation[0]  # its fix is the line to add
    assert judge([req], require_installed_frameworks_pinned=False).status is Status.PASS


def test_framework_pin_mismatch_fails_with_pin_and_installed(tmp_path):
    req = write(tmp_path, "requirements.txt", "torch==2.4.0\ntorchvision==0.20.1\nnumpy==1.26.4\n")
    outcome = judge([req])
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["versions.pinned.framework-mismatch"]
    assert outcome.findings[0].message.startswith("torch:")


def test_framework_outside_its_range_fails(tmp_path):
    req = write(tmp_path, "requirements.txt", LOCKED + "numpy<1.26\n")
    assert finding_ids(judge([req])) == ["versions.pinned.framework-mismatch"]


def test_pinned_framework_not_installed_fails(tmp_path):
    req = write(tmp_path, "requirements.txt", LOCKED + "torchaudio==2.5.1\n")
    outcome = judge([req])
    assert outcome.status is Status.FAIL and finding_ids(outcome) == ["versions.pinned.framework-not-installed"]
    assert outcome.findings[0].message.startswith("torchaudio ")


def test_other_packages_that_differ_only_warn(tmp_path):
    req = write(tmp_path, "requirements.txt", LOCKED + "click==8.0.0\nnot-installed-lib==1.0\n")
    outcome = judge([req])
    assert outcome.status is Status.WARN
    assert [(f.id, f.message.split(" ")[0]) for f in outcome.findings] == [
        ("versions.pinned.package-mismatch", "click:"), ("versions.pinned.package-not-installed", "not-installed-lib")]
    assert judge([req], frameworks=["torch", "torchvision", "numpy", "click"]).status is Status.FAIL


def test_constraints_pin_and_uninstalled_extras_are_normal(tmp_path):
    write(tmp_path, "constraints.txt", "torch==2.5.1\ntorchvision==0.20.1\nnumpy==1.26.4\ntorchaudio==2.5.1\n")
    req = write(tmp_path, "requirements.txt", "-c constraints.txt\ntorch\ntorchvision\nnumpy\n")
    outcome = judge([req])
    assert outcome.status is Status.PASS, outcome.details
    assert any("torchaudio is not installed (constraint" in d for d in outcome.details)
    pyproject = write(tmp_path, "pyproject.toml", '[project]\nname = "t"\ndependencies = ["torch==2.5.1", '
                      '"torchvision==0.20.1", "numpy==1.26.4"]\n[project.optional-dependencies]\ntf = ["tensorflow==2.17.0"]\n')
    outcome = judge([pyproject])
    assert outcome.status is Status.PASS, outcome.details
    assert any("tensorflow is not installed (extra tf" in d for d in outcome.details)


def test_markers_that_do_not_apply_are_reported_not_judged(tmp_path):
    req = write(tmp_path, "requirements.txt", LOCKED + "torchaudio==2.5.1 ; sys_platform == 'win32'\n")
    outcome = judge([req])
    assert outcome.status is Status.PASS
    assert any("does not apply here" in d for d in outcome.details)


def test_requirements_error_is_error_and_keeps_the_stack(tmp_path):
    p = CHECK.params_from({"requirements": [str(tmp_path / "missing.txt")]})
    facts = {"stack": STACK, "requirements_files": p.requirements, "requirements_error": f"requirements file {tmp_path / 'missing.txt'} does not exist",
             "pins": {"entries": [], "skipped": [], "files": []}, "installed": {}}
    outcome = CHECK.evaluate(facts, p, Expect())
    assert outcome.status is Status.ERROR and finding_ids(outcome) == ["versions.pinned.unreadable"]
    assert "missing.txt" in outcome.summary  # the file is named
    assert any(f"torch {STACK['torch']}" in d for d in outcome.details)


def test_no_pins_anywhere_warns_with_the_fix_and_keeps_the_stack():
    # A check that compared nothing does not PASS.
    p = CHECK.params_from()
    outcome = CHECK.evaluate({"stack": STACK, "requirements_files": [], "pins": {}, "installed": {}}, p, Expect())
    assert outcome.status is Status.WARN
    assert [f.id for f in outcome.findings] == ["versions.pinned.not-pinned"]
    assert any("pip freeze > requirements.txt" in fix for fix in outcome.remediation)
    assert any(f"torch {STACK['torch']}" in d for d in outcome.details)


# ------------------------------------------------------------------- lock files, read where preflight starts

UV_LOCK = """version = 1
requires-python = ">=3.10"

[[package]]
name = "numpy"
version = "1.26.4"
source = { registry = "https://index.example/simple" }

[[package]]
name = "torch"
version = "2.5.1"
source = { registry = "https://index.example/simple" }

[[package]]
name = "torch"
version = "2.5.0"
source = { registry = "https://index.example/simple" }

[[package]]
name = "trainer"
version = "0.1.0"
source = { editable = "." }
"""

POETRY_LOCK = """[[package]]
name = "torch"
version = "2.5.1"
optional = false

[[package]]
name = "numpy"
version = "1.26.4"
optional = false
"""

PIPFILE_LOCK = json.dumps({"_meta": {}, "default": {"torch": {"version": "==2.5.1"}, "numpy": {"version": "==1.26.4"}},
                           "develop": {"mylib": {"git": "https://example.org/mylib.git"}}}, indent=4)

CONDA_ENV = """name: train
channels: [pytorch, conda-forge]
dependencies:
  - python=3.11
  - pytorch::pytorch=2.5.1=py3.11_cuda12.4_cudnn9.1.0_0
  - numpy==1.26.4
  - pandas=2.2
  - cudatoolkit>=11
  - pip
  - pip:
    - torchvision==0.20.1
"""


@pytest.mark.parametrize("name, text", [("uv.lock", UV_LOCK), ("poetry.lock", POETRY_LOCK),
                                        ("Pipfile.lock", PIPFILE_LOCK), ("environment.yml", CONDA_ENV)])
def test_lock_files_in_the_working_directory_are_found_and_compared(tmp_path, name, text):
    from preflight_checks.versions.pins import gather

    write(tmp_path, name, text)
    pins = gather([], tmp_path)
    assert pins["discovered"] and pins["files"] == [str(tmp_path / name)] and not pins["errors"]
    names = {e["name"] for e in pins["entries"]}
    assert {"torch", "numpy"} <= names and "trainer" not in names
    facts = {"stack": STACK, "requirements_files": pins["files"], "pins": pins,
             "installed": {**INSTALLED, "torchvision": None, **{n: INSTALLED.get(n) for n in names}}}
    outcome = CHECK.evaluate(facts, CHECK.params_from({"pins": pins}), Expect())
    assert outcome.status is Status.PASS, (outcome.summary, outcome.details)
    drifted = dict(facts, installed={**facts["installed"], "torch": "2.4.0"})
    failed = CHECK.evaluate(drifted, CHECK.params_from({"pins": pins}), Expect())
    assert failed.status is Status.FAIL and "versions.pinned.framework-mismatch" in {f.id for f in failed.findings}


def test_conda_environment_names_and_skipped_specs(tmp_path):
    from preflight_checks.versions.pins import gather

    write(tmp_path, "environment.yml", CONDA_ENV)
    pins = gather([], tmp_path)
    by_name = {e["name"]: e for e in pins["entries"]}
    assert by_name["torch"]["exact"] == "2.5.1" and by_name["torchvision"]["exact"] == "0.20.1"
    assert by_name["torch"]["where"] == f"{tmp_path / 'environment.yml'}:5"
    assert by_name["torchvision"]["where"] == f"{tmp_path / 'environment.yml'}:11"
    # conda's match specs: "==1.26.4" is exact, "=2.2" means 2.2.* (conda/models/match_spec.py),
    # "pytorch=2.5.1=<build>" pins 2.5.1 exactly; a range on a conda-only library is kept, as optional.
    assert by_name["numpy"]["exact"] == "1.26.4" and by_name["pandas"]["specifier"] == "==2.2.*"
    assert by_name["pandas"]["exact"] is None and by_name["cudatoolkit"]["optional"] == "conda"
    assert "python" not in by_name and "pip" not in by_name


def test_requirements_files_and_a_library_pyproject_are_found(tmp_path):
    from preflight_checks.versions.pins import discover, gather

    write(tmp_path, "requirements-gpu.txt", LOCKED)
    write(tmp_path, "pyproject.toml", "[project]\nname = 'lib'\n")  # no dependencies: passed over
    write(tmp_path, "notes.txt", "torch==1.0\n")
    assert [p.name for p in discover(tmp_path)] == ["requirements-gpu.txt", "pyproject.toml"]
    assert gather([], tmp_path)["files"] == [str(tmp_path / "requirements-gpu.txt")]
    assert gather([], tmp_path / "empty" if (tmp_path / "empty").mkdir() is None else tmp_path)["files"] == []


def test_pins_are_read_on_the_coordinator_and_travel_in_the_params(tmp_path, monkeypatch):
    write(tmp_path, "requirements.txt", LOCKED)
    overrides = VersionsPinned.prepare_on_coordinator({"requirements": ["requirements.txt"]}, tmp_path)
    assert overrides["pins"]["files"] == [str(tmp_path / "requirements.txt")]
    # On a node the file does not exist: the pins come from the params, not from a path.
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    monkeypatch.chdir(node_dir)
    from preflight_checks.versions.pinned import collect_pins

    facts = collect_pins(CHECK.params_from(json.loads(json.dumps(overrides))))
    assert {e["name"] for e in facts["pins"]["entries"]} == {"torch", "torchvision", "numpy"}
    assert "requirements_error" not in facts


def test_a_configured_file_that_does_not_exist_is_the_users_mistake(tmp_path):
    with pytest.raises(ValueError, match="requirements file .*missing.txt does not exist"):
        VersionsPinned.prepare_on_coordinator({"requirements": ["missing.txt"]}, tmp_path)


def test_a_found_file_that_cannot_be_read_is_error(tmp_path):
    write(tmp_path, "poetry.lock", "[[package]\nname =")
    pins = VersionsPinned.prepare_on_coordinator({}, tmp_path)["pins"]
    facts = {"stack": STACK, "requirements_files": pins["files"], "pins": pins, "installed": {}}
    outcome = CHECK.evaluate(facts, CHECK.params_from({"pins": pins}), Expect())
    assert outcome.status is Status.ERROR and [f.id for f in outcome.findings] == ["versions.pinned.unreadable"]


def test_pins_that_name_nothing_installed_compared_nothing_and_warn(tmp_path):
    outcome = judge([write(tmp_path, "r.txt", "leftpad==1.0 ; extra == 'docs'\n")],
                    installed={"torch": None})
    assert outcome.status is Status.WARN
    assert [f.id for f in outcome.findings] == ["versions.pinned.nothing-compared"]


def test_describe_stack_of_a_gpu_node():
    stack = dict(STACK, torch="2.5.1+cu124", torch_cuda="12.4", cudnn="9.1.0", nccl="2.21.5", driver="550.54.15")
    text = describe_stack(stack)
    assert "torch 2.5.1+cu124 (CUDA 12.4, cuDNN 9.1.0, NCCL 2.21.5)" in text
    assert "driver 550.54.15" in text


def test_a_poetry_caret_or_tilde_on_a_local_version_admits_that_build():
    from packaging.specifiers import SpecifierSet

    from preflight_checks.versions.pin_files import poetry_specifier

    caret, tilde = SpecifierSet(poetry_specifier("^0.5.0+cu124")), SpecifierSet(poetry_specifier("~0.5.0+cu124"))
    for spec in (caret, tilde):
        assert "0.5.0+cu124" in spec and "0.5.3+cu124" in spec and "0.6.0+cu124" not in spec
    torch = SpecifierSet(poetry_specifier("^2.3.1+cu121"))
    assert "2.3.1+cu121" in torch and "2.4.0" in torch and "3.0.0+cu121" not in torch and "2.3.0+cu121" not in torch


def test_preflights_own_pyproject_is_not_the_teams_pins():
    """Started inside the preflight clone, versions.pinned does not judge preflight's own pyproject.toml
    (its torch>=2.1 extra is not the team's lock file)."""
    from preflight_checks.versions.pins import discover, gather
    from tests.conftest import ROOT

    assert (ROOT / "pyproject.toml").is_file()
    assert all(p.name != "pyproject.toml" for p in discover(ROOT))
    pins = gather([], ROOT)
    assert str(ROOT / "pyproject.toml") not in pins["files"]
    # The warning says the file was there, ignored, and why: not "no pyproject.toml" in a folder that has one.
    outcome = CHECK.evaluate({"stack": STACK, "requirements_files": pins["files"], "pins": pins, "installed": {}},
                             CHECK.params_from({"pins": pins}), Expect())
    if not pins["files"]:
        (message,) = [f.message for f in outcome.findings if f.id.endswith("not-pinned")]
        assert "pyproject.toml there was ignored: it is preflight's own" in message
    assert pins["ignored"] == [{"where": str(ROOT / "pyproject.toml"), "reason": pins["ignored"][0]["reason"]}]


def test_a_locked_package_not_installed_and_a_version_not_comparable_are_notes(tmp_path):
    from preflight_checks.versions.pins import gather

    write(tmp_path, "uv.lock", UV_LOCK)
    pins = gather([], tmp_path)
    facts = {"stack": STACK, "requirements_files": pins["files"], "pins": pins,
             "installed": {**INSTALLED, "torchvision": None, "numpy": None}}
    outcome = CHECK.evaluate(facts, CHECK.params_from({"pins": pins}), Expect())
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    assert any(d.startswith("numpy is locked (") and d.endswith("but not installed here") for d in outcome.details)
    outcome = judge([write(tmp_path, "requirements.txt", "torch==2.5.1\nnumpy==1.26.4\nclick>=8\n")],
                    {**INSTALLED, "torchvision": None, "click": "not a version"})
    assert outcome.status is Status.PASS and finding_ids(outcome) == []
    assert any(d.startswith("click not a version: version not comparable") for d in outcome.details)
