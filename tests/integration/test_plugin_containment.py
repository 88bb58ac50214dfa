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


def _killer_site(tmp_path: Path, code: int = 0) -> Path:
    """A plugin that ends its importer with os._exit(code), one that prints and changes directory at
    import, and a format that ends its importer too; beside them a check that is fine."""
    site = tmp_path / "site"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    make_distribution(site, "acme-killer", {
        "preflight.checks": {"acme.kill": "acme_kill:Plugged", "acme.noisy": "acme_noisy:Plugged",
                             "acme.fine": "acme_fine:Plugged"},
        "preflight.reporters": {"acme-killfmt": "acme_killfmt"},
    }, {
        "acme_kill": f"import os\nos._exit({code})\n",
        "acme_noisy": f"import os\nprint('GO (noise from a plugin)')\nos.chdir({str(elsewhere)!r})\n"
                      + CHECK.format(id="acme.noisy"),
        # Says which program imported it: the child that imports plugins apart, or the command itself.
        "acme_fine": f"import __main__\nwith open({str(tmp_path / 'fine-imported')!r}, 'a') as fh:\n"
                     "    fh.write(getattr(__main__.__spec__, 'name', '?') + '\\n')\n" + CHECK.format(id="acme.fine"),
        "acme_killfmt": "import os\nos._exit(0)\n",
    })
    return site


def test_a_plugin_that_ends_its_importer_is_a_named_load_error_and_never_a_go(tmp_path):
    site = _killer_site(tmp_path)
    run = run_preflight("run", "--checks", "node.environment", "--format", "json,md", "--out", "out", "--json",
                        cwd=tmp_path, env=_env(site))
    assert run.returncode == 3, run.stdout + run.stderr
    summary = json.loads(run.stdout)  # nothing a plugin printed reaches --json's stdout
    assert summary["verdict"] == "INCOMPLETE"
    data = json.loads((tmp_path / "out" / "results.json").read_text())  # the chdir moved no report
    named = {e["entry_point"].split(" =")[0]: e for e in data["load_errors"]}
    assert {"acme.kill", "acme-killfmt"} <= set(named), named
    assert "ended the process" in named["acme.kill"]["error"] and named["acme.kill"]["distribution"] == \
        "acme-killer 0.3"
    assert not (tmp_path / "elsewhere" / "out").exists()
    # Only the plugins the run needs are imported by the command itself: acme.fine only in the child.
    assert (tmp_path / "fine-imported").read_text().split() == ["preflight.workers.plugin_import"]
    # A plugin the run needs is imported here too: its print stays off --json's stdout, its chdir moves nothing.
    noisy = run_preflight("run", "--checks", "node.environment,acme.noisy", "--format", "json", "--out", "out2",
                          "--json", cwd=tmp_path, env=_env(site))
    assert json.loads(noisy.stdout)["verdict"] != "GO", noisy.stdout + noisy.stderr
    assert "noise from a plugin" in noisy.stderr and (tmp_path / "out2" / "results.json").is_file()


def test_a_plugin_that_ends_its_importer_cannot_make_report_list_or_healthcheck_exit_0_silently(tmp_path):
    site = _killer_site(tmp_path, code=1)
    run = run_preflight("run", "--checks", "node.environment", "--format", "json", "--out", "out", cwd=tmp_path)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    report = run_preflight("report", "out/results.json", "--format", "md", "--out", "again", cwd=tmp_path,
                           env=_env(site))
    assert (tmp_path / "again" / "report.md").is_file(), report.stdout + report.stderr
    assert report.returncode == run.returncode or report.returncode == 3, report.stdout + report.stderr
    listed = run_preflight("list", cwd=tmp_path, env=_env(site))
    assert listed.returncode == 0 and "node.environment" in listed.stdout, listed.stdout + listed.stderr
    assert "acme.kill" in listed.stderr and "acme.fine" in listed.stdout
    hook = run_preflight("healthcheck", "--budget", "30", cwd=tmp_path, env=_env(site), timeout=90)
    assert hook.returncode == 0, hook.stdout + hook.stderr  # os._exit(1) at import drains nothing
    assert "acme.kill" in hook.stdout + hook.stderr and ": GO (" not in hook.stdout
    # A plugin not imported by the command itself does not print into the verdict lines either.
    assert "noise from a plugin" not in hook.stdout
