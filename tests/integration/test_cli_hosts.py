"""A hosts file is data: bad lines stop the run before anything is executed."""

import pytest

from tests.conftest import run_preflight


@pytest.mark.parametrize("line", [
    "a;touch {marker}",
    "$(touch {marker})",
    "`touch {marker}`",
    "node1 && touch {marker}",
    "-oProxyCommand=touch {marker}",
    "node|touch {marker}",
])
def test_shell_metacharacters_are_exit_2_and_nothing_runs(tmp_path, line):
    marker = tmp_path / "executed"
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("gpu01\n" + line.format(marker=marker) + "\n")
    proc = run_preflight("run", "--nodes", str(hosts), "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{hosts}:2:" in proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "out").exists()  # nothing ran, not even the output directory


@pytest.mark.parametrize("text, message", [
    ("", "no hosts"),
    ("gpu01\ngpu01\n", "duplicate"),
    ("gpu[03-01]\n", "range"),
])
def test_bad_hosts_files_name_the_problem(tmp_path, text, message):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(text)
    proc = run_preflight("run", "--nodes", str(hosts), "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr.lower(), proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_hosts_file_is_exit_2(tmp_path):
    proc = run_preflight("run", "--nodes", "nope.txt", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2 and "nope.txt" in proc.stderr
