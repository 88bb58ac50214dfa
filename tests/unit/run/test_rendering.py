"""The report files rendered on two cores: the HTML report in a forked child, the same bytes either way."""

from __future__ import annotations

import json
import os
import threading
import time

import psutil

from preflight.core.config import Config
from preflight.core.model import RunReport
from preflight.reporters import view
from preflight.run import finish as steps
from preflight.run.rendering import can_fork_aside, rendered
from preflight.run.request import HISTORY_OFF, RunRequest
from preflight.transport.process_fork import Forked
from tests.conftest import DATA

FILES = ["md", "html", "junit", "json", "prometheus"]


def cluster_run() -> RunReport:
    """A 3-node run from each check's real evaluate(): every format, the charts included, has content."""
    data = json.loads((DATA / "reports" / "cluster_run.json").read_text())
    data.pop("_source")
    return RunReport.from_dict(data)


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children()}


def test_the_html_report_rendered_by_a_child_is_the_same_bytes_and_comes_last():
    report, before = cluster_run(), children()
    with view.shared():
        here = list(rendered(report, FILES, aside=False))
    with view.shared():
        aside = list(rendered(report, FILES, aside=True))
    assert [fmt for fmt, _ in here] == FILES
    assert [fmt for fmt, _ in aside] == ["md", "junit", "json", "prometheus", "html"]
    assert dict(aside) == dict(here)
    assert "<svg" in dict(aside)["html"]  # the charts were drawn, in the child
    assert children() == before


def test_a_child_that_dies_fails_or_hangs_gives_nothing_and_is_gone():
    before = children()
    assert Forked(lambda: b"report", 30).result() == b"report"
    assert Forked(lambda: os._exit(0), 30).result() is None  # type: ignore[arg-type,return-value]
    assert Forked(lambda: 1 / 0, 30).result() is None  # type: ignore[arg-type,return-value]
    big = bytes(range(256)) * 20_000  # more than a pipe holds: read while the child writes
    assert Forked(lambda: big, 30).result() == big
    started = time.monotonic()
    assert Forked(lambda: time.sleep(60) or b"late", 0.5).result() is None
    assert time.monotonic() - started < 30
    assert children() == before


def test_a_child_ends_by_its_own_exit_even_where_a_command_made_os_exit_raise():
    """`preflight report` and `run` turn os._exit into a SystemExit while they work: the child must not
    raise it and go on to run the rest of the command as a second copy."""
    real, before = os._exit, children()

    def no_exit(code=0):
        raise SystemExit(code)

    os._exit = no_exit  # type: ignore[assignment]
    try:
        assert Forked(lambda: b"once", 30).result() == b"once"
    finally:
        os._exit = real  # type: ignore[assignment]
    assert children() == before


def test_a_reader_that_stops_early_ends_the_child():
    report, before = cluster_run(), children()
    with view.shared():
        texts = rendered(report, FILES, aside=True)
        assert next(texts)[0] == "md"
        child = children() - before
        assert len(child) == 1
        texts.close()
    assert children() == before and not psutil.pid_exists(child.pop())


def test_the_child_is_used_only_where_forking_is_safe_and_a_second_core_is_ours():
    cpus = len(os.sched_getaffinity(0))
    assert can_fork_aside() is (cpus >= 2 and threading.active_count() == 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert can_fork_aside() is False  # a lock another thread holds could stay held in the child
    finally:
        stop.set()
        other.join()


def test_the_reports_step_writes_every_format_in_the_order_asked(tmp_path):
    request = RunRequest(history=HISTORY_OFF, formats=("html", "json", "md"))
    run = steps.Finishing(request, Config(), tmp_path, lambda kind, text: None)
    report = cluster_run()
    steps.reports(report, run)
    assert [p.name for p in run.written] == ["report.html", "results.json", "report.md"] and run.problems == []
    with view.shared():
        expected = dict(rendered(report, ["html", "json", "md"], aside=False))
    assert (tmp_path / "report.html").read_text() == expected["html"]
    assert (tmp_path / "report.md").read_text() == expected["md"]
