"""Bounded work on any pin file: a huge one is refused before it is parsed, a huge line is named
without being quoted, and the slow YAML reader only ever sees a small file."""

from __future__ import annotations

import time

import pytest

from preflight.core.check import CannotMeasure
from preflight_checks.versions.pins import MAX_LINE_CHARS, MAX_YAML_BYTES, discover, gather, read_requirements


@pytest.mark.parametrize("name, head", [("uv.lock", b"version = 1 # "), ("poetry.lock", b"# "),
                                        ("Pipfile.lock", b'{"default": {'), ("requirements.txt", b"torch==2.0 "),
                                        ("environment.yml", b"dependencies: [")])
def test_a_25_mb_one_line_pin_file_is_refused_at_once(tmp_path, name, head):
    path = tmp_path / name
    path.write_bytes(head + b"x" * (25 << 20))
    start = time.monotonic()
    with pytest.raises(CannotMeasure, match="the most preflight reads of a pin file") as caught:
        read_requirements([str(path)])
    assert time.monotonic() - start < 1 and len(str(caught.value)) < 500
    found = gather([], tmp_path)  # found, not configured: an error for the check to report
    assert time.monotonic() - start < 2 and (found["errors"] or path not in discover(tmp_path))


def test_a_very_long_requirement_line_is_named_not_quoted(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("numpy==2.0\ntorch==2.0 " + "x" * (MAX_LINE_CHARS * 4) + "\n")
    with pytest.raises(CannotMeasure, match="requirements.txt:2") as caught:
        read_requirements([str(path)])
    assert len(str(caught.value)) < 500


def test_a_conda_file_past_the_yaml_limit_is_not_discovered(tmp_path):
    (tmp_path / "env.yml").write_text("dependencies:\n" + "  - a\n" * (MAX_YAML_BYTES // 6 + 10))
    assert discover(tmp_path) == []
