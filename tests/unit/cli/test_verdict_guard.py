"""A command that judges never exits 0 without having written its verdict: an exit before it (a
plugin's sys.exit(0) in the main thread, its os._exit(0)) is exit 3, INCOMPLETE, with a line saying so."""

from __future__ import annotations

import os
import sys

import pytest

from preflight.cli.options import exit_with_verdict


@pytest.mark.parametrize("end", [lambda: sys.exit(0), lambda: sys.exit(), lambda: os._exit(0)])
def test_an_exit_0_before_the_verdict_is_incomplete(end, capsys):
    def work() -> int:
        end()
        return 0

    with pytest.raises(SystemExit) as exited:
        exit_with_verdict(work)
    assert exited.value.code == 3
    assert "before its verdict" in capsys.readouterr().err
    assert os._exit.__module__ == "posix"  # given back


def test_the_verdict_s_own_code_and_another_exit_are_kept():
    with pytest.raises(SystemExit) as exited:
        exit_with_verdict(lambda: 0)
    assert exited.value.code == 0

    def fails() -> int:
        raise SystemExit(1)

    with pytest.raises(SystemExit) as exited:
        exit_with_verdict(fails)
    assert exited.value.code == 1
