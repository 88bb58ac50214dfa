"""Progress while a run runs: lines for checks still running without a terminal, elapsed time on one."""

from __future__ import annotations

import threading

from preflight.core.model import CLUSTER_NODE, Status
from preflight.cli.progress import Progress
from preflight.engine.protocol import Result, Started
from tests.conftest import make_result


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_for_a_check_still_running():
    clock, lines = FakeClock(), []
    progress = Progress(3, {"checkpoint.roundtrip": 300.0}, interactive=False, interval_s=30, echo=lines.append,
                        clock=clock)
    try:
        progress(Started("gpu03", "checkpoint.roundtrip"))
        clock.now += 29
        assert progress.still_running_lines() == []
        clock.now += 1
        assert progress.still_running_lines() == ["still running checkpoint.roundtrip on gpu03, 30 s of 300 s; 30s into the run"]
        assert progress.still_running_lines() == []  # once per interval
        clock.now += 30
        assert progress.still_running_lines() == ["still running checkpoint.roundtrip on gpu03, 60 s of 300 s; 1m 00s into the run"]
        progress(Result(make_result("checkpoint.roundtrip", "gpu03", Status.PASS, "fine")))
        clock.now += 300
        assert progress.still_running_lines() == []
        assert any(line.startswith("PASS  checkpoint.roundtrip") for line in lines)
    finally:
        progress.stop()


def test_the_ticker_prints_without_being_asked():
    lines: list[str] = []
    seen = threading.Event()

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("still running"):
            seen.set()

    progress = Progress(1, {"net.bandwidth": 300.0}, interactive=False, interval_s=0.2, echo=echo)
    try:
        progress(Started(CLUSTER_NODE, "net.bandwidth"))
        assert seen.wait(10)
    finally:
        progress.stop()
    assert lines[0].startswith("still running net.bandwidth across the cluster, 0 s of 300 s; ")


def test_terminal_status_names_each_node_with_its_elapsed_time():
    clock = FakeClock()
    progress = Progress(4, {"gpu.visibility": 20.0, "versions.pinned": 5.0}, interactive=False, echo=lambda _: None,
                        clock=clock)
    try:
        progress(Started("gpu01", "gpu.visibility"))
        clock.now += 3
        progress(Started("gpu02", "versions.pinned"))
        clock.now += 2
        text = progress.status_text()
    finally:
        progress.stop()
    assert text == "[0/4] 5.0s into the run: gpu.visibility on gpu01 (5 s of 20 s), versions.pinned on gpu02 (2 s of 5 s)"


def test_stop_ends_the_ticker():
    progress = Progress(1, {}, interactive=False, interval_s=0.05, echo=lambda _: None)
    progress.stop()
    progress._ticker.join(timeout=2)
    assert not progress._ticker.is_alive()


def test_the_terminal_display_takes_events_without_blocking():
    """On a terminal, each event refreshes the live status (which reads under the same lock)."""
    clock = FakeClock()
    done = threading.Event()

    def drive() -> None:
        progress = Progress(2, {"gpu.visibility": 20.0}, interactive=True, clock=clock)
        try:
            progress(Started("gpu01", "gpu.visibility"))
            clock.now += 4
            assert progress.status_text() == "[0/2] 4.0s into the run: gpu.visibility on gpu01 (4 s of 20 s)"
            progress(Result(make_result("gpu.visibility", "gpu01", Status.PASS, "fine")))
        finally:
            progress.stop()
        done.set()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    assert done.wait(20), "the live display blocked on its own lock"


def test_the_live_status_is_one_row_per_check_with_its_node_set():
    clock = FakeClock()
    progress = Progress(200, {"gpu.visibility": 20.0}, interactive=False, echo=lambda _: None, clock=clock)
    try:
        for n in range(1, 65):
            if n != 17:
                progress(Started(f"gpu{n:03d}", "gpu.visibility"))
            clock.now += 0.05
        progress(Started("gpu017", "node.environment"))
        rows = progress.status_rows()
        text = progress.status_text()
    finally:
        progress.stop()
    assert rows == [("gpu.visibility", "on gpu[001-016,018-064]", "63 nodes, 0-3 s of 20 s"),
                    ("node.environment", "on gpu017", "0 s")]
    assert text.startswith("[0/200] 3.2s into the run: gpu.visibility on gpu[001-016,018-064] (63 nodes, 0-3 s of 20 s)")


def test_the_live_table_renders_one_row_per_check():
    from rich.console import Console

    clock = FakeClock()
    progress = Progress(4, {}, interactive=False, echo=lambda _: None, clock=clock)
    try:
        for node in ("a1", "a2", "a3"):
            progress(Started(node, "gpu.visibility"))
        console = Console(width=100, record=True)
        console.print(progress._table())
    finally:
        progress.stop()
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert lines[0].startswith("[0/4] results") and len(lines) == 2 and "on a[1-3]" in lines[1]


def test_no_color_reaches_the_live_line(monkeypatch):
    import click

    monkeypatch.delenv("NO_COLOR", raising=False)
    with click.Context(click.Command("run"), color=False):
        progress = Progress(1, {}, interactive=True)
        try:
            assert progress._console.no_color
        finally:
            progress.stop()
    with click.Context(click.Command("run")):
        progress = Progress(1, {}, interactive=True)
        try:
            assert not progress._console.no_color
        finally:
            progress.stop()


def test_a_live_result_line_wraps_between_words():
    import io

    from rich.console import Console

    progress = Progress(1, {}, interactive=True)
    try:
        out = io.StringIO()
        progress._console = Console(file=out, width=40, no_color=True)
        summary = "locked-memory limit is 8192 KiB, not unlimited: RDMA transports need it unlimited"
        progress(Result(make_result("node.environment", "gpu01", Status.WARN, summary)))
    finally:
        progress.stop()
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) > 1 and all(len(line.rstrip()) <= 40 for line in lines)
    words = set(f"WARN node.environment gpu01 {summary}".split())
    assert all(word in words for line in lines for word in line.split())


def test_the_display_says_how_long_the_run_has_taken_and_about_how_long_is_left():
    clock = FakeClock()
    progress = Progress(4, {"gpu.visibility": 20.0}, interactive=False, echo=lambda _: None, clock=clock)
    try:
        assert progress.pace_text() == "0.0s into the run"  # no estimate before a result
        progress(Started("gpu01", "gpu.visibility"))
        clock.now += 60
        progress(Result(make_result("gpu.visibility", "gpu01", Status.PASS, "fine")))
        assert progress.pace_text() == "1m 00s into the run, about 3m 00s left"  # 3 more at 60 s each
        progress(Started("gpu01", "node.environment"))
        clock.now += 60
        assert progress.status_text().startswith("[1/4] 2m 00s into the run, about 6m 00s left: node.environment")
    finally:
        progress.stop()
