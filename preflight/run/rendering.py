"""Every report format of a run, rendered on two cores where the machine has them.

The HTML report costs about a third of a second whatever the run's size (matplotlib draws its
charts, and its import is paid by the first one), while the other formats grow with the results.
Where the process may fork safely (one thread: nothing another thread holds can be left locked in
the child) and at least two CPUs are ours, the HTML report is rendered in a forked child while this
process renders the others; the child hands back the text through a pipe and exits. The child
starts from this process's memory, the report and its shared view included, so it renders the
same bytes. A child that dies, fails or takes longer than ASIDE_TIMEOUT_S is killed (by its PID)
and the HTML is rendered here instead: the reports come out the same either way, only later
(preflight.transport.process_fork).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence

from preflight.core.model import RunReport
from preflight.transport.process_fork import Forked

ASIDE_FORMAT = "html"  # the format with a fixed cost: what a second core takes
ASIDE_TIMEOUT_S = 120.0


def rendered(report: RunReport, formats: Sequence[str], aside: bool | None = None) -> Iterator[tuple[str, str]]:
    """(format, text) for every format asked, each as soon as it is rendered: in the order asked, but
    for the HTML report, which comes last when a child renders it. Call within `view.shared()`, so
    that the child renders from the view this process built. `aside`: render the HTML report in a
    child (None: where it is safe and pays, see `can_fork_aside`)."""
    from preflight.reporters import renderer, view

    view.build_view(report)  # built before the child starts, so that neither builds it again
    if aside is None:
        aside = len(formats) > 1 and can_fork_aside()
    child = None
    if aside and ASIDE_FORMAT in formats:
        try:
            child = Forked(lambda: renderer(ASIDE_FORMAT)(report).encode(), ASIDE_TIMEOUT_S)
        except OSError:
            child = None  # no process to be had (a limit on processes or memory): rendered here
    try:
        for fmt in formats:
            if child is None or fmt != ASIDE_FORMAT:
                yield fmt, renderer(fmt)(report)
        if child is not None:
            text, child = child.result(), None
            yield ASIDE_FORMAT, renderer(ASIDE_FORMAT)(report) if text is None else text.decode()
    finally:
        if child is not None:  # a format failed here, or the reader stopped early: the child goes too
            child.stop()


def can_fork_aside() -> bool:
    """True when forking is safe (this process runs one thread) and pays (two CPUs or more are ours)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2 and threading.active_count() == 1 and hasattr(os, "fork")
