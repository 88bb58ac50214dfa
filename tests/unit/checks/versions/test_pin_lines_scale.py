"""Finding the line of each pin is linear in the file: every key of a table and every quoted string
is found in one pass and looked up after, never searched for from the top once per pin (a Poetry
table of 20,000 dependencies took minutes). bench/pin_lines.py measures the before and after."""

from __future__ import annotations

import json

from preflight_checks.versions.pin_files import TomlLines
from preflight_checks.versions.pins import read_requirements

N = 2000


class CountingLines(list):
    """A list of lines that counts how often a line is read by index."""

    reads = 0

    def __getitem__(self, index):
        CountingLines.reads += 1
        return super().__getitem__(index)


def test_every_poetry_key_is_found_in_one_pass_over_its_table():
    text = "[tool.poetry.dependencies]\n" + "".join(f'pkg{i} = "1.0"\n' for i in range(N)) + "[tool.other]\nx = 1\n"
    where = TomlLines(text)
    where.lines = CountingLines(where.lines)
    CountingLines.reads = 0
    numbers = [where.key("tool.poetry.dependencies", f"pkg{i}") for i in range(N)]
    assert numbers == list(range(2, N + 2))
    assert where.key("tool.poetry.dependencies", "x") == 0 and where.key("tool.other", "x") == N + 3
    assert CountingLines.reads <= 2 * (N + 4), CountingLines.reads  # once per line, not once per line per key


def test_pins_on_one_line_and_in_long_files_get_their_own_lines(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    deps = ", ".join(f'"pkg{i}==1.{i}"' for i in range(N))
    pyproject.write_text(f'[project]\nname = "x"\ndependencies = [{deps}]\n[project.optional-dependencies]\n'
                         f'dev = ["pkg0==1.0"]\n')
    entries = read_requirements([str(pyproject)])["entries"]
    assert [e["where"].rsplit(":", 1)[1] for e in entries] == ["3"] * N + ["5"]
    lock = tmp_path / "Pipfile.lock"
    lock.write_text(json.dumps({"default": {f"pkg{i}": {"version": f"==1.{i}"} for i in range(N)},
                                "develop": {"pkg0": {"version": "==1.0"}}}, separators=(",", ":")))
    assert {e["where"] for e in read_requirements([str(lock)])["entries"]} == {f"{lock}:1"}
    lock.write_text(json.dumps({"default": {f"pkg{i}": {"version": f"==1.{i}"} for i in range(N)},
                                "develop": {"pkg0": {"version": "==1.0"}}}, indent=4))
    text = lock.read_text().splitlines()
    entries = read_requirements([str(lock)])["entries"]
    assert len(entries) == N + 1
    for entry in entries:
        number = int(entry["where"].rsplit(":", 1)[1])
        assert f'"{entry["name"]}"' in text[number - 1], (entry, text[number - 1])
    assert int(entries[-1]["where"].rsplit(":", 1)[1]) > text.index('    "develop": {')
