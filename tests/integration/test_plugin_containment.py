"""A plugin's import runs third-party code: whatever it does while being imported (sys.exit(),
KeyboardInterrupt, any BaseException, a hang), the run goes on, names the plugin and its
distribution as a load error, and is never GO; a healthcheck never drains for it and keeps to its
--budget; `--skip` of such a plugin does not import it. The plugins are real distributions found by
importlib.metadata (a .dist-info folder on the path), not mocks."""

from __future__ import annotations

import json
import os
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import run_preflight

CHECK = """
from preflight.core.check import Check


class Plugged(Check):
    id = "{id}"
    title = "a plugin"
"""


def make_distribution(site: Path, name: str, groups: dict[str, dict[str, str]], modules: dict[str, str]) -> None:
    dist_info = site / f"{name.replace('-', '_')}-0.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in groups.items()))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


def _env(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _hostile_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    marker = tmp_path / "imported"
    make_distribution(site, "acme-hostile", {
        "preflight.checks": {"acme.exit": "acme_exit:Plugged", "acme.interrupt": "acme_interrupt:Plugged",
                             "acme.base": "acme_base:Plugged"},
        "preflight.reporters": {"acme-fmt": "acme_fmt"},
    }, {
        "acme_exit": f"import pathlib, sys\npathlib.Path({str(marker)!r}).write_text('x')\nsys.exit(0)\n",
        "acme_interrupt": "raise KeyboardInterrupt\n",
        "acme_base": "class Odd(BaseException):\n    pass\nraise Odd('odd')\n",
        "acme_fmt": "import sys\nsys.exit(1)\n",
    })
    return site


def test_plugins_that_exit_or_raise_at_import_are_named_and_the_run_is_incomplete(tmp_path):
    site = _hostile_site(tmp_path)
    run = run_preflight("run", "--checks", "node.environment", "--format", "json,md,junit", "--out", "out",
                        cwd=tmp_path, env=_env(site))
    assert run.returncode == 3, run.stdout + run.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["verdict"]["verdict"] == "INCOMPLETE"
    named = {e["entry_point"].split(" =")[0]: e for e in data["load_errors"]}
    assert {"acme.exit", "acme.interrupt", "acme.base", "acme-fmt"} <= set(named)
    assert {named[n]["distribution"] for n in ("acme.exit", "acme.interrupt", "acme.base", "acme-fmt")} == {
        "acme-hostile 0.3"}
    assert "SystemExit" in named["acme.exit"]["error"] and "KeyboardInterrupt" in named["acme.interrupt"]["error"]
    assert "Odd" in named["acme.base"]["error"]
    assert "acme-hostile 0.3" in (tmp_path / "out" / "report.md").read_text()
    ET.parse(tmp_path / "out" / "junit.xml")


def test_a_skipped_plugin_is_not_imported(tmp_path):
    site = _hostile_site(tmp_path)
    # What a config says of a skipped plugin's checks cannot be checked without importing it: passed over.
    (tmp_path / "preflight.toml").write_text('[checks."acme.exit"]\nfoo = 1\n\n[acme]\nbar = 2\n\n'
                                             '[silence]\n"acme.base.odd" = {reason = "r"}\n')
    run = run_preflight("run", "--config", "preflight.toml", "--checks", "node.environment", "--skip",
                        "acme.exit,acme.interrupt,acme.base", "--set", "acme.interrupt.x=1",
                        "--format", "json", "--out", "out", cwd=tmp_path, env=_env(site))
    assert run.returncode in (0, 1, 3), run.stdout + run.stderr
    assert not (tmp_path / "imported").exists()
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {e["entry_point"].split(" =")[0] for e in data["load_errors"]} == {"acme-fmt"}


def test_a_healthcheck_neither_drains_nor_overruns_its_budget_for_a_plugin_that_hangs(tmp_path):
    site = tmp_path / "site"
    make_distribution(site, "acme-slow", {"preflight.checks": {"acme.hang": "acme_hang:Plugged",
                                                               "acme.exit": "acme_exit:Plugged"}},
                      {"acme_hang": "import time\ntime.sleep(600)\n" + CHECK.format(id="acme.hang"),
                       "acme_exit": "raise SystemExit(1)\n"})
    start = time.monotonic()
    hook = run_preflight("healthcheck", "--budget", "9", "--checks", "node.environment", cwd=tmp_path,
                         env=_env(site), timeout=60)
    took = time.monotonic() - start
    assert hook.returncode == 0, hook.stdout + hook.stderr  # never a drain
    assert took < 9 + 6, took  # the budget, plus starting Python
    # Without --checks, a plugin that did not load counts: it could have been a hook check.
    bare = run_preflight("healthcheck", "--budget", "9", "--skip", "acme.hang", cwd=tmp_path, env=_env(site),
                         timeout=60)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert "acme.exit" in bare.stdout + bare.stderr and "acme-slow 0.3" in bare.stdout + bare.stderr
    assert f": GO (" not in bare.stdout + bare.stderr



def test_sigterm_while_a_plugin_import_hangs_ends_the_run_within_seconds(tmp_path):
    import signal
    import subprocess
    import sys

    site = tmp_path / "site"
    make_distribution(site, "acme-slow", {"preflight.checks": {"acme.hang": "acme_hang:Plugged"}},
                      {"acme_hang": f"import pathlib, time\npathlib.Path({str(tmp_path / 'importing')!r}).touch()\n"
                                    "time.sleep(600)\n"})
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "run", "--checks", "node.environment", "--out", "out"],
                            cwd=tmp_path, env={**os.environ, **_env(site), "CI": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "importing").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the plugin's import is under way
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert took < 3, took
    assert "Traceback" not in stderr and "nothing ran" in stderr
