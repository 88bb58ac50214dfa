"""A run records itself in fleet history by default; --no-history and [history] enabled = false turn it
off; a store that cannot be written is a warning and never changes the exit code."""

from __future__ import annotations

import os

from click.testing import CliRunner

from preflight.cli.main import cli


def _runs(url: str) -> int:
    from preflight.history import open_store
    from preflight.history.queries import list_runs

    store = open_store(url)
    try:
        return len(list_runs(store))
    finally:
        store.close()


def _run(tmp_path, *extra, env=None):
    return CliRunner().invoke(cli, ["run", "--checks", "node.environment", "--level", "quick", "--out",
                                    str(tmp_path / f"out{len(os.listdir(tmp_path))}"), "--format", "json", *extra],
                              env=env)


def test_a_run_is_recorded_unless_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    default = tmp_path / "xdg" / "preflight" / "history.sqlite"
    first = _run(tmp_path)
    assert first.exit_code in (0, 1), first.output
    assert default.exists() and _runs(f"sqlite:///{default}") == 1
    assert _run(tmp_path, "--no-history").exit_code == first.exit_code
    off = tmp_path / "off.toml"
    off.write_text("[history]\nenabled = false\n")
    assert _run(tmp_path, "--config", str(off)).exit_code == first.exit_code
    assert _runs(f"sqlite:///{default}") == 1
    other = tmp_path / "team.sqlite"
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(f'[history]\nurl = "sqlite:///{other}"\n')
    assert _run(tmp_path, "--config", str(elsewhere)).exit_code == first.exit_code
    assert _runs(f"sqlite:///{other}") == 1 and _runs(f"sqlite:///{default}") == 1


def test_a_store_that_cannot_be_written_is_a_warning_not_a_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    reference = _run(tmp_path, "--no-history")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"this is not a database" * 100)
    config = tmp_path / "broken.toml"
    config.write_text(f'[history]\nurl = "sqlite:///{broken}"\n')
    result = _run(tmp_path, "--config", str(config))
    assert result.exit_code == reference.exit_code
    assert "warning" in result.output and "broken.sqlite" in result.output


def test_a_history_section_with_a_bad_value_is_exit_2_naming_the_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[history]\nenabled = "no"\n')
    result = _run(tmp_path, "--config", str(config))
    assert result.exit_code == 2 and "history.enabled" in result.output
