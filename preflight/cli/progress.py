"""What a run prints while it runs.

On a terminal: one coloured line per result, and a live table with one row per check running: the
node set running it (`gpu[001-064]`) and how long it has been at it. Elsewhere (CI logs, a pipe): one plain line per result, and a line
every `interval_s` for a check still running ("still running checkpoint.roundtrip on gpu03, 60 s of
300 s"), so a log never sits silent for minutes.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from preflight.core.model import CLUSTER_NODE
from preflight.core.nodeset import fold
from preflight.engine.protocol import Result, Started

STILL_RUNNING_INTERVAL_S = 30.0


def colour_off() -> bool:
    """True when --no-color was given (the command's click context says so) or NO_COLOR is set."""
    import os

    import click

    ctx = click.get_current_context(silent=True)
    return bool(os.environ.get("NO_COLOR")) or (ctx is not None and ctx.find_root().color is False)


class Progress:
    """Receives the runner's events: Started and Result (preflight.engine.protocol)."""

    def __init__(self, total: int, timeouts: dict[str, float], *, interactive: bool,
                 interval_s: float = STILL_RUNNING_INTERVAL_S, echo: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.timeouts, self.interactive = total, dict(timeouts), interactive
        self.interval_s = interval_s
        self.echo = echo or print
        self.clock = clock
        self.done = 0
        self.began = clock()
        self.running: dict[str, tuple[str, float, int]] = {}  # node -> (check id, started, lines said)
        self._lock = threading.RLock()  # __call__ refreshes the status, which reads under the lock
        self._stopped = threading.Event()
        self._status: Any = None
        self._console: Any = None
        if interactive:
            from rich.console import Console
            from rich.live import Live

            # --no-color (click's context) and NO_COLOR reach the live line as they reach the verdict line.
            self._console = Console(no_color=colour_off())
            # One row per check running and the node set running it, not one line listing every node.
            self._status = Live(self._table(), console=self._console, refresh_per_second=4, transient=True)
            self._status.start()
        tick = 1.0 if interactive else max(0.01, min(1.0, interval_s / 10))
        self._ticker = threading.Thread(target=self._tick_loop, args=(tick,), name="progress", daemon=True)
        self._ticker.start()

    def __call__(self, event: Started | Result) -> None:
        with self._lock:
            if isinstance(event, Started):
                self.running[event.node] = (event.check_id, self.clock(), 0)
            elif isinstance(event, Result):
                result = event.result
                self.done += 1
                if self.running.get(result.node, ("",))[0] == result.check_id:
                    self.running.pop(result.node, None)
                self._show_result(result)
            self._refresh()

    def _show_result(self, result: Any) -> None:
        from preflight.reporters.terminal import STYLES, result_line

        if not self.interactive:
            self.echo(result_line(result))
            return
        from rich.markup import escape

        from preflight.reporters.safe_text import single_line

        style = STYLES.get(result.status.value, "")
        # The summary is machine text: no rich markup of its own, no escape sequence, one line.
        text = escape(single_line(f"{result.check_id:<24} {result.node:<16} {result.summary}"))
        # Wrapped between words to the terminal's width by rich, never cut mid-word by the terminal.
        self._console.print(f"[{style}]{result.status.value:<5}[/] {text}", highlight=False, markup=True,
                            soft_wrap=False)

    def still_running_lines(self) -> list[str]:
        """Lines due now for checks still running (each check once per interval), plain text."""
        now = self.clock()
        lines = []
        with self._lock:
            for node, (check_id, started, said) in list(self.running.items()):
                elapsed = now - started
                due = int(elapsed // self.interval_s)
                if due > said:
                    self.running[node] = (check_id, started, due)
                    lines.append(f"still running {check_id} {_where(node)}, {due * self.interval_s:.0f} s"
                                 + _of(self.timeouts.get(check_id)) + f"; {self.pace_text(now)}")
        return lines

    def pace_text(self, now: float | None = None) -> str:
        """'2m 10s into the run, about 3m 05s left': the time so far, and what is left at the pace so far
        (results left times the time per result until now); no estimate before the first result."""
        from preflight.reporters.numbers import duration

        elapsed = (self.clock() if now is None else now) - self.began
        with self._lock:
            done, total = self.done, self.total
        text = f"{duration(elapsed)} into the run"
        if 0 < done < total:
            text += f", about {duration(elapsed / done * (total - done))} left"
        return text

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(check, where, elapsed) per check running: the nodes running it as one node set, and the
        shortest and longest time they have been at it."""
        now = self.clock()
        with self._lock:
            items = list(self.running.items())
        by_check: dict[str, list[tuple[str, float]]] = {}
        for node, (check, started, _) in items:
            by_check.setdefault(check, []).append((node, now - started))
        rows = []
        for check, running in by_check.items():
            nodes = [node for node, _ in running]
            where = _where(nodes[0]) if len(nodes) == 1 else f"on {fold(nodes)}"
            low, high = min(e for _, e in running), max(e for _, e in running)
            span = f"{high:.0f} s" if round(low) == round(high) else f"{low:.0f}-{high:.0f} s"
            count = f"{len(nodes)} nodes, " if len(nodes) > 1 else ""
            rows.append((check, where, count + span + _of(self.timeouts.get(check))))
        return rows

    def status_text(self) -> str:
        with self._lock:
            done = self.done
        shown = ", ".join(f"{check} {where} ({elapsed})" for check, where, elapsed in self.status_rows())
        return f"[{done}/{self.total}] {self.pace_text()}: {shown or 'waiting ...'}"

    def _table(self) -> Any:
        from rich.table import Table

        with self._lock:
            done = self.done
        table = Table(box=None, show_header=False, padding=(0, 1),
                      title=f"[{done}/{self.total}] results, {self.pace_text()}", title_justify="left")
        rows = self.status_rows()
        for check, where, elapsed in rows:
            table.add_row(check, where, elapsed)
        if not rows:
            table.add_row("waiting ...", "", "")
        return table

    def _refresh(self) -> None:
        if self._status is None:
            return
        if self.done >= self.total:
            self._status.stop()
            return
        self._status.update(self._table())

    def _tick_loop(self, tick: float) -> None:
        while not self._stopped.wait(tick):
            if self.interactive:
                if self.done < self.total:
                    with self._lock:
                        self._status.update(self._table())
            else:
                for line in self.still_running_lines():
                    self.echo(line)

    def stop(self) -> None:
        self._stopped.set()
        if self._status is not None:
            self._status.stop()


def _where(node: str) -> str:
    return "across the cluster" if node == CLUSTER_NODE else f"on {node}"


def _of(timeout: float | None) -> str:
    return f" of {timeout:.0f} s" if timeout else ""
