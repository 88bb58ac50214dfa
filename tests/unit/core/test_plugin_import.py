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
    (site / f"{module}.py").write_text(body)
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
