"""Every version the repository names for preflight is the one pyproject.toml builds, and a node
without preflight is told to install this project, not the unrelated package called `preflight`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import SimpleNamespace

from preflight.core.findings import NOT_INSTALLED, UNREACHABLE_FIX, findings_of
from preflight.core.model import CheckResult, Status
from preflight.engine.agent_stream import unreachable_words

ROOT = Path(__file__).resolve().parents[2]
# A version next to the distribution's name (`preflight-cluster==X`, `preflight_cluster-X-py3...whl`,
# `preflight-cluster X`), or an example of a release number in the action.
NAMED = [re.compile(r"preflight[-_]cluster(?:\[[^\]]*\])?(?:==|-| )v?(\d+(?:\.\d+)+)"),
         re.compile(r"release number \(e\.g\. (\d+(?:\.\d+)+)\)"),
         re.compile(r"preflight==(\d+(?:\.\d+)+)")]
SCANNED = ["README.md", "action.yml", "docs", "scripts", "preflight", "examples", "tests/integration/test_action.py"]


def pyproject_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version = project["project"].get("version")
    if version:
        return version
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]  # module.__version__
    module, name = attr.rsplit(".", 1)
    source = (ROOT / (module.replace(".", "/") + "/__init__.py")).read_text()
    return re.search(rf"^{name}\s*=\s*['\"]([^'\"]+)['\"]", source, re.M).group(1)


def scanned_files():
    for name in SCANNED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in {".py", ".md", ".yml", ".yaml", ".sh", ".toml", ".txt", ".html", ".j2"}:
                yield file


def test_every_version_named_in_the_repository_is_pyprojects():
    version = pyproject_version()
    found, wrong = 0, []
    for file in scanned_files():
        for n, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            for pattern in NAMED:
                for match in pattern.finditer(line):
                    found += 1
                    if match.group(1) != version:
                        wrong.append(f"{file.relative_to(ROOT)}:{n}: {match.group(0)}")
    assert found, "the scan found no version at all: its patterns no longer fit the repository"
    assert not wrong, f"versions other than pyproject.toml's {version}: {wrong}"


def test_a_node_without_preflight_is_told_to_install_this_project_with_an_install_fix():
    import preflight

    transport = SimpleNamespace(name="node1", python="python3")
    said = unreachable_words(transport, 1, False, "/usr/bin/python3: No module named preflight")
    assert "preflight-cluster" in said and "preflight==" not in said
    result = CheckResult("node.environment", "node1", Status.ERROR, said)
    [finding] = findings_of(result, unreachable=True)
    assert finding.id.endswith(NOT_INSTALLED)
    assert finding.fix != UNREACHABLE_FIX and "ssh" not in finding.fix.lower()
    assert f"preflight_cluster-{preflight.__version__}-py3-none-any.whl" in finding.fix
    assert pyproject_version() == preflight.__version__
