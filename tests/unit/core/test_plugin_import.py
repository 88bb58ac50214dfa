"""Discovery contains what a plugin does while it is imported: a real distribution (a .dist-info
folder on sys.path, found by importlib.metadata) whose module exits, raises any BaseException or
hangs is a load error naming it and its distribution, within the time limit."""

from __future__ import annotations

import importlib
import itertools
import time

import pytest

from preflight.core import registry as registry_mod

HOSTILE = {
    "exit": "import sys\nsys.exit(0)\n",
    "exit-code": "raise SystemExit(3)\n",
    "interrupt": "raise KeyboardInterrupt\n",
    "generator-exit": "raise GeneratorExit('bye')\n",
    "base": "class Odd(BaseException):\n    pass\nraise Odd()\n",
    "hang": "import time\ntime.sleep(120)\n",
    "os-exit": "import os\nos._exit(0)\n",  # imported here, it would end the test run itself
}
_names = itertools.count()


def plant(site, body: str) -> str:
    """A distribution with one check plugin whose module runs `body`; returns the check id."""
    n = next(_names)
    check_id, module = f"hostile.p{n}", f"hostile_plugin_{n}_{time.monotonic_ns()}"
    dist_info = site / f"hostile_{n}-0.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hostile-{n}\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text(f"[preflight.checks]\n{check_id} = {module}:Check\n")
    (site / f"{module}.py").write_text(body.replace("__ID__", repr(check_id)))
    importlib.invalidate_caches()
    return check_id


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_what_a_plugin_does_at_import_is_a_load_error(tmp_path, monkeypatch, kind):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_mod, "PLUGIN_IMPORT_LIMIT_S", 0.5)
    check_id = plant(tmp_path, HOSTILE[kind])
    start = time.monotonic()
    found = registry_mod.discover(only={check_id})
    assert time.monotonic() - start < 5
    assert check_id not in found.checks
    [error] = found.errors
    assert error.entry_point.startswith(check_id + " =") and error.distribution.endswith(" 0.3")
    assert error.distribution.startswith("hostile-")


def test_the_limit_bounds_all_imports_together(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_mod, "PLUGIN_IMPORT_LIMIT_S", 0.6)
    ids = {plant(tmp_path, HOSTILE["hang"]) for _ in range(4)}
    start = time.monotonic()
    found = registry_mod.discover(only=ids, limit_s=1.0)
    assert time.monotonic() - start < 2.5
    assert {e.entry_point.split(" =")[0] for e in found.errors} == ids


def test_a_skipped_third_party_plugin_is_not_imported(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "imported"
    check_id = plant(tmp_path, f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    found = registry_mod.discover(only={check_id, "node.environment"}, skip={check_id, "node.environment"})
    assert not marker.exists() and check_id in found.not_imported
    assert "node.environment" in found.checks  # preflight's own are imported: others may read them


@pytest.mark.parametrize("body", [HOSTILE["hang"], HOSTILE["exit"], HOSTILE["interrupt"]])
def test_a_report_format_whose_import_exits_or_hangs_is_left_out_as_a_load_error(tmp_path, monkeypatch, body):
    from preflight import reporters

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_mod, "PLUGIN_IMPORT_LIMIT_S", 0.5)
    n = next(_names)
    module = f"hostile_format_{n}_{time.monotonic_ns()}"
    dist_info = tmp_path / f"hostile_format_{n}-0.3.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hostile-format-{n}\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text(f"[preflight.reporters]\nhostile{n} = {module}\n")
    (tmp_path / f"{module}.py").write_text(body + "FILENAME = 'h.txt'\n")
    importlib.invalidate_caches()
    reporters._discovered.cache_clear()
    try:
        start = time.monotonic()
        assert f"hostile{n}" not in reporters.available() and f"hostile{n}" in reporters.refused()
        assert time.monotonic() - start < 5
        [error] = [e for e in reporters.load_errors() if e["entry_point"].startswith(f"hostile{n} =")]
        assert error["distribution"] == f"hostile-format-{n} 0.3"
        assert "json" in reporters.available()  # the others load
    finally:
        reporters._discovered.cache_clear()


def test_a_plugin_prints_and_chdirs_at_import_without_effect(tmp_path, monkeypatch, capfd):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    check_id = plant(tmp_path, "import os\nprint('GO from a plugin')\nos.write(1, b'GO by fd\\n')\nos.chdir('elsewhere')\n"
                               "from preflight.core.check import Check as Base\nclass Check(Base):\n    id = __ID__\n")
    found = registry_mod.discover(only={check_id})
    assert check_id in found.checks, found.errors
    assert __import__("os").getcwd() == str(tmp_path)  # taken back: the reports stay where they were asked for
    captured = capfd.readouterr()
    assert "GO from a plugin" not in captured.out and "GO from a plugin" in captured.err
    assert "GO by fd" not in captured.out and "GO by fd" in captured.err


def test_the_child_names_the_plugin_that_ended_it_and_says_what_the_others_are(tmp_path, monkeypatch):
    from preflight.transport.plugins import probe

    monkeypatch.syspath_prepend(str(tmp_path))
    killer = plant(tmp_path, "import os\nos._exit(0)\n")
    hang = plant(tmp_path, HOSTILE["hang"])
    fine = plant(tmp_path, "print('@@ok fake {}')\nfrom preflight.core.check import Check as Base\n"
                           "class Check(Base):\n    id = __ID__\n    tags = ('gpu',)\n    hook = True\n")
    raises = plant(tmp_path, HOSTILE["interrupt"])
    probed = probe(registry_mod.GROUP, [killer, fine, raises], 60.0)
    assert "ended the process" in probed[killer].error and "exit code 0" in probed[killer].error
    assert "did not finish" in probe(registry_mod.GROUP, [hang], 2.0)[hang].error
    assert "KeyboardInterrupt" in probed[raises].error
    assert not probed[fine].error and probed[fine].info["tags"] == ["gpu"] and probed[fine].info["hook"] is True


def test_only_the_plugins_a_run_needs_are_imported_after_the_child(tmp_path, monkeypatch):
    from preflight.transport.plugins import discover

    monkeypatch.syspath_prepend(str(tmp_path))
    killer = plant(tmp_path, "import os\nos._exit(1)\n")
    marker = tmp_path / "imported-here"
    other = plant(tmp_path, "import __main__, pathlib, sys\n"
                            f"pathlib.Path({str(marker)!r}).write_text('x') if 'pytest' in sys.modules else None\n"
                            "from preflight.core.check import Check as Base\nclass Check(Base):\n    id = __ID__\n")
    found = discover(only={killer, other, "node.environment"}, need=registry_mod.needed_by(["node.environment"]))
    assert {e.entry_point.split(" =")[0] for e in found.errors} == {killer}, found.errors
    assert other in found.not_imported and not marker.exists()
    assert "node.environment" in found.checks


def test_needed_by_follows_what_the_chosen_checks_run_after():
    infos = {"a.x": {"tags": ["t"], "run_after": ["a.y"], "scope": "node"}, "a.y": {"run_after": ["a.z"]},
             "a.z": {}, "a.h": {"hook": True, "scope": "node"}, "a.c": {"hook": True, "scope": "cluster"}}
    assert registry_mod.needed_by(["a.x"])(infos) == {"a.x", "a.y", "a.z"}
    assert registry_mod.needed_by(None, ["t"])(infos) == {"a.x", "a.y", "a.z"}
    assert registry_mod.needed_by(None, hook=True)(infos) == {"a.h"}
    assert registry_mod.needed_by([])(infos) == set() and registry_mod.needed_by()(infos) is None
