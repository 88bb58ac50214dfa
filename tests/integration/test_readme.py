"""The README runs as written: its ```sh blocks, in order, in a fresh directory, with this tree's
`preflight` on PATH. A command may exit non-zero only where the README says so on its line, as
`(exit N)` or `(exit N or M)`.

What cannot run here is listed in SKIP with the reason, and a full-length run is shortened as
LEVEL_QUICK says; nothing else is changed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"

# Lines (by their start) that cannot run in a test, and why.
SKIP = {
    "python3 -m venv": "installs preflight from the package index into a new venv; the test runs this tree's instead",
    ".venv/bin/preflight run": "the quickstart's venv; the README's `preflight run` below is the same run with this tree's",
    "bash scripts/test.sh": "the whole test suite (and, as root, apt-get installs)",
    "preflight run --nodes hosts.txt": "needs other nodes reachable over SSH",
    "preflight run --level thorough": "about an hour of measurements by design",
    "salloc ": "needs a Slurm cluster",
    "sbatch ": "needs a Slurm cluster",
    "preflight run --checks monitoring.alarms": "needs the team's Prometheus at http://prometheus:9090",
}
# `preflight run` lines that measure everything at the standard level take minutes on a CI machine:
# the test runs them at --level quick (which still measures, and writes the reports the next lines read).
LEVEL_QUICK = "preflight run"
ANNOUNCED = re.compile(r"\(exit (\d+(?: or \d+)*)")  # "(exit 1)", "(exit 1 or 3 ...)"


def toml_reader():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib


def sh_lines(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line.strip() == "```sh":
            inside = True
        elif line.strip() == "```":
            inside = False
        elif inside and line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    return lines


def announced(line: str) -> set[int]:
    comment = line.partition("  #")[2]
    match = ANNOUNCED.search(comment)
    return {0} | ({int(n) for n in match.group(1).split(" or ")} if match else set())


def skipped(line: str) -> str:
    if line.startswith("promtool ") and shutil.which("promtool") is None:
        return "promtool (Prometheus) is not installed"
    return next((why for start, why in SKIP.items() if line.startswith(start)), "")


def foreign_checks() -> list[str]:
    """Checks installed in this environment that a fresh clone does not have (the example plugin of
    tests/plugins, another checkout's): a run in the test skips them, as a newcomer would not have them."""
    tomllib = toml_reader()

    from preflight.core.registry import discover

    built_in = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["preflight.checks"]
    return sorted(cid for cid in discover().checks if cid not in built_in)


def shortened(line: str, foreign: list[str] = ()) -> str:
    command = line.partition("  #")[0].strip()
    if command.startswith(LEVEL_QUICK) and "--level" not in command and "--checks" not in command:
        command += " --level quick"
    if command.startswith("preflight run") and foreign and "--checks" not in command:
        command += " --skip " + ",".join(foreign)
    return command


def test_every_line_of_the_readme_is_either_run_or_skipped_with_a_reason():
    lines = sh_lines(README.read_text())
    assert len(lines) > 15
    assert all(skipped(line) or line.startswith(("preflight ", "cp ", "promtool ")) for line in lines), lines


def test_the_quickstart_installs_a_cpu_build_of_each_framework():
    """torch comes from the index the user names (PyTorch's CPU index: the default index's torch is
    the CUDA build), tensorflow-cpu from the `cpu` extra; the venv is a new one, so nothing an image
    has is replaced."""
    tomllib = toml_reader()

    text = README.read_text()
    block = text[text.index("## Quickstart"):]
    install, run = sh_lines(block[:block.index("### ")])
    assert install.startswith("python3 -m venv .venv && ") and run == ".venv/bin/preflight run"
    torch_step, preflight_step = install.split(" && ")[1:]
    assert re.fullmatch(r'\.venv/bin/pip install torch --index-url "\$\{TORCH_CPU_INDEX:\?[^}]+\}"', torch_step)
    assert preflight_step == ".venv/bin/pip install -e '.[cpu]'"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["cpu"]] == ["tensorflow-cpu"]
    assert "TORCH_CPU_INDEX" in block[block.index("```\n", block.index("```sh")):]  # and the text says what it is


def test_the_example_preflight_toml_is_valid_and_its_checkpoint_dir_reaches_storage_shared():
    from preflight.core import config as cfg
    from preflight.core.registry import discover

    text = README.read_text()
    example = text[text.index("```toml\n[run]") + len("```toml\n"):]
    example = example[:example.index("```")]
    checks = discover().checks
    config = cfg.parse(example, checks)
    shared = config.params_for(checks["storage.shared"]).dir
    assert shared and shared == config.params_for(checks["checkpoint.roundtrip"]).dir
    silence = text[text.index("```toml\n[silence]") + len("```toml\n"):]
    assert cfg.parse(silence[:silence.index("```")], checks).silence


def test_the_excerpt_comes_from_a_run_of_the_built_in_checks():
    tomllib = toml_reader()

    text = README.read_text()
    start = text.index("<!-- excerpt: scripts/readme_excerpt.py -->")
    excerpt = text[start:text.index("<!-- /excerpt -->")]
    built_in = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["preflight.checks"]
    from preflight.core.registry import discover

    checks = discover().checks  # a check about one transport only (kubernetes.gpus) is not in a local run
    local = [cid for cid in built_in if cid in checks and not checks[cid].transports]
    counts = re.findall(r"of (\d+) checks", excerpt)
    assert counts and all(int(n) == len(local) for n in counts), counts


@pytest.mark.torch
def test_the_readme_commands_run_in_order(tmp_path):
    pytest.importorskip("torch")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "preflight"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m preflight "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "CI": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    ran = []
    foreign = foreign_checks()
    for line in sh_lines(README.read_text()):
        if skipped(line):
            continue
        command = shortened(line, foreign)
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=900)
        ran.append((command, done.returncode))
        assert done.returncode in announced(line), (
            f"`{command}` exited {done.returncode}; the README announces {sorted(announced(line))}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    assert len(ran) >= 12, ran
    # `report` wrote beside its input (--rejudge into rejudged/ there) and made no run directory of its own.
    runs = [p for p in (work / "preflight-report").iterdir() if p.name != "latest"]
    assert len(runs) == sum(1 for c, _ in ran if c.startswith("preflight run"))
    assert sum((run / "rejudged" / "results.json").exists() for run in runs) == 1
