"""How launch_local's account of its ranks is read (preflight.launch.ranks.interpret_launch). Pure."""

from __future__ import annotations

from preflight.launch.ranks import LaunchResult, RankRun, interpret_launch


def rank(number: int, returncode: int | None, stdout: str = "", killed: bool = False) -> RankRun:
    return RankRun(rank=number, pid=1000 + number, argv=["python"], env={}, returncode=returncode, stdout=stdout,
                   killed=killed)


def test_a_rank_that_went_silent_inside_a_collective_is_named():
    failed = '{"ok": false, "rank": 0, "error": "RuntimeError: Timed out waiting 5000ms for recv operation"}\n'
    launch = LaunchResult(ranks=[rank(0, 1, failed), rank(1, -9, killed=True)], master_addr="127.0.0.1",
                          master_port=1)
    outcome = interpret_launch(launch)
    assert not outcome["ok"]
    assert outcome["error"].startswith("rank 1 stopped inside a collective")
    assert "rank 0: RuntimeError: Timed out" in outcome["error"]


def test_ranks_that_all_report_their_errors_are_listed_as_before():
    errors = [rank(r, 1, '{"ok": false, "rank": %d, "error": "boom %d"}\n' % (r, r)) for r in (0, 1)]
    outcome = interpret_launch(LaunchResult(ranks=errors, master_addr="127.0.0.1", master_port=1))
    assert outcome["error"] == "rank 0: boom 0; rank 1: boom 1"
