"""What every command shares, defined once: the usage error, the options, loading checks and results.

Commands import this module, never `preflight.cli.main` (which only assembles the group).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import click

from preflight.core.verdict import EXIT_USAGE
from preflight.run.inputs import (
    DEFAULT_OUT, formats_known, nonempty as check_nonempty, output_dir, read_report, split_ids,
)
from preflight.run.config_changes import WORKING_DIRECTORY_CONFIG
from preflight.run.request import RunProblem


class UsageProblem(click.ClickException):
    """Bad input: exit 2 with a message that names the problem, before anything runs."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        from preflight.core.redact import redact_text
        from preflight.reporters.safe_text import block

        # a message quotes names and lines from the user's files: no escape sequence of theirs reaches the terminal
        click.echo(f"preflight: error: {block(redact_text(self.format_message()))}", err=True)


class FiniteFloat(click.FloatRange):
    """A number option that must be finite: `nan`, `inf` and `-inf` are usage errors naming the flag.

    Every float option of every command uses it (a NaN timeout never fires, a NaN threshold turns its
    comparison into a pass, an infinite tolerance hides every change). Optionally also a range, as
    click.FloatRange takes it."""

    name = "number"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = value if isinstance(value, float) else click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


FINITE = FiniteFloat()


# Options shared by `run` and `report`, defined once.
def format_option(f: Callable) -> Callable:
    return click.option("--format", "formats", default="html,md,json,junit", show_default=True,
                        help="Comma-separated report formats to write: html, md, json, junit, prometheus, or one a plugin adds.")(f)


def out_option(f: Callable) -> Callable:
    return click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
                        help=f"Directory for results.jsonl and the reports; it replaces the report files an earlier "
                             f"run left there (default: a new {DEFAULT_OUT}/<UTC time>/ per run, with "
                             f"{DEFAULT_OUT}/latest pointing at it).")(f)


def fail_on_option(f: Callable) -> Callable:
    return click.option("--fail-on", type=click.Choice(["fail", "warn"]), default=None,
                        help="Lowest status that blocks the verdict (default: fail; warn makes WARN block too).")(f)


# The file `preflight init` writes, read by `run` when --config names none (run.config_changes says what it
# changes). Never by `healthcheck`, a Slurm prolog that starts in whatever directory slurmd gives it; and
# `report --rejudge` keeps what the run was judged with.
READS_WORKING_DIRECTORY_CONFIG = {"run"}


def working_directory_config(ctx: click.Context, _param: Any, value: str | None) -> str | None:
    """--config, or ./preflight.toml where it exists (said on stderr, so a run never reads it unseen)."""
    if value is not None or ctx.info_name not in READS_WORKING_DIRECTORY_CONFIG:
        return value
    if Path(WORKING_DIRECTORY_CONFIG).is_file():
        click.echo(f"preflight: reading ./{WORKING_DIRECTORY_CONFIG} (the working directory's; --config FILE "
                   "reads another)", err=True)
        return WORKING_DIRECTORY_CONFIG
    return None


def config_option(f: Callable) -> Callable:
    return click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                        callback=working_directory_config,
                        help=f"preflight.toml with expectations and per-check parameters (default for `run`: "
                             f"./{WORKING_DIRECTORY_CONFIG} when there is one; `healthcheck` reads only this).")(f)


def set_option(f: Callable) -> Callable:
    return click.option("--set", "settings", multiple=True, metavar="ID.KEY=VALUE",
                        help="Override a check parameter or expectation, e.g. --set net.bandwidth.min_gbps=100.")(f)


def profile_option(f: Callable) -> Callable:
    return click.option("--profile", default=None, metavar="NAME|FILE",
                        help="Thresholds for a node type (h100-8x, h200-8x, a100-8x) or a profile TOML of your own; "
                             "the config file and --set override it.")(f)


def checks_option(f: Callable) -> Callable:
    return click.option("--checks", "only", default=None, help="Comma-separated check ids to run (default: all).")(f)


def skip_option(f: Callable) -> Callable:
    return click.option("--skip", default=None, help="Comma-separated check ids not to run.")(f)


class Duration(click.ParamType):
    """Seconds, written as `300`, `90s`, `5m`, `1h` or `1h30m`, for every time option."""

    name = "duration"
    UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}

    def __init__(self, minimum: float = 0.0, maximum: float | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        import re

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
            if not math.isfinite(seconds):
                self.fail(f"{value!r} is not a finite duration", param, ctx)
        else:
            text = str(value).strip().lower()
            parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?", text)
            if not text or re.sub(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?", "", text).strip() or not parts \
                    or (len(parts) > 1 and any(not unit for _, unit in parts)):
                self.fail(f"{value!r} is not a finite duration (e.g. 300, 90s, 5m, 1h30m)", param, ctx)
            seconds = sum(float(n) * self.UNITS[unit or "s"] for n, unit in parts)
        if not seconds > self.minimum:
            self.fail(f"{value!r} must be more than {self.minimum:g} s", param, ctx)
        if self.maximum is not None and seconds > self.maximum:
            self.fail(f"{value!r} must be at most {self.maximum:g} s", param, ctx)
        return seconds


def color_option(f: Callable) -> Callable:
    """--no-color; NO_COLOR (https://no-color.org) in the environment does the same."""
    def turn_off(ctx: click.Context, _param: Any, value: bool) -> bool:
        if value or os.environ.get("NO_COLOR"):
            ctx.color = False
            root = ctx.find_root()
            root.color = False
        return value

    return click.option("--no-color", is_flag=True, expose_value=False, is_eager=True, callback=turn_off,
                        help="No colour in the output (also when NO_COLOR is set).")(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print a machine-readable summary as JSON on stdout (everything else goes to stderr).")(f)


def registry(needs: Any = None) -> Any:
    """The checks, less the third-party plugins the command's --skip names (never imported); each third
    party's plugin imported in a child first (preflight.transport.plugins); with `needs` (check ids), only
    the third parties' plugins among them are imported."""
    from preflight.core.registry import needed_by
    from preflight.transport.plugins import discover

    ctx = click.get_current_context(silent=True)
    skip = (ctx.params.get("skip") if ctx is not None else None) or ""
    key = (skip, None if needs is None else frozenset(needs))
    if key not in _REGISTRIES:  # one child per command, however often it asks
        _REGISTRIES[key] = discover(skip=set(split_ids(skip)),
                                    need=None if needs is None else needed_by(named=sorted(needs)))
    return _REGISTRIES[key]


_REGISTRIES: dict[Any, Any] = {}


def exit_with_verdict(work: Callable[[], int]) -> None:
    """sys.exit() with the code of the verdict `work()` returns, for a command that judges (run,
    healthcheck, report). Such a command never exits 0 without its verdict: a SystemExit before it (a
    plugin's sys.exit() in the main thread, or its os._exit(), which becomes one while this runs) with
    code 0 is exit 3 (INCOMPLETE) with a line that says so; another code is kept (never a GO)."""
    from preflight.core.verdict import EXIT_CODES, Verdict

    real_exit = os._exit

    def no_exit(code: Any = 0) -> None:
        raise SystemExit(code)

    os._exit = no_exit  # type: ignore[assignment]
    try:
        code = work()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
        click.echo("preflight: error: the command was ended before its verdict was written (a plugin's sys.exit() "
                   "or os._exit()?): no verdict", err=True)
        code = EXIT_CODES[Verdict.INCOMPLETE]
    finally:
        os._exit = real_exit  # type: ignore[assignment]
    sys.exit(code)


@contextlib.contextmanager
def run_problems() -> Iterator[None]:
    """A RunProblem of the run layer is a usage problem here: exit 2 with its message."""
    from preflight.core.config import ConfigError

    try:
        yield
    except (RunProblem, ConfigError) as exc:
        raise UsageProblem(str(exc)) from None


def check_formats(formats: str) -> list[str]:
    with run_problems():
        return formats_known(split_ids(formats))


def writable_dir(path: str | None, inputs: list[tuple[str, str | None]] | None = None,
                 formats: list[str] | None = None) -> Path:
    """The run's own directory (preflight.run.inputs.output_dir): a new one per run without --out."""
    with run_problems():
        return output_dir(path, inputs, formats)


def nonempty(flag: str, value: str) -> None:
    with run_problems():
        check_nonempty(flag, value)


VERDICT_COLOURS = {"GO": {"fg": "green", "bold": True}, "NO-GO": {"fg": "red", "bold": True},
                   "INCOMPLETE": {"fg": "yellow", "bold": True}}


def print_summary(report: Any, out: Path, written: list[Path], as_json: bool = False) -> None:
    """The verdict and the terminal summary, the reports written, and with --json the summary as JSON."""
    from preflight.reporters.terminal import render as render_terminal

    stream = sys.stderr if as_json else sys.stdout
    # On a terminal, lines are wrapped between words to its width, never by the terminal mid-word.
    text = render_terminal(report, width=shutil.get_terminal_size().columns if stream.isatty() else None)
    verdict_line, _, rest = text.partition("\n")
    click.echo("", err=as_json)
    # The verdict line in the verdict's colour on a terminal; click drops the colour elsewhere.
    click.secho(verdict_line, err=as_json, **VERDICT_COLOURS.get(verdict_line.split(" ", 2)[1], {}))
    click.echo(rest, nl=False, err=as_json)
    if written:
        click.echo("Reports: " + ", ".join(str(p) for p in written), err=as_json)
    if as_json:
        from preflight.core.finite import dumps
        from preflight.reporters.json_report import summary

        click.echo(dumps({**summary(report), "output_dir": str(out), "reports": [str(p) for p in written]}, indent=2))


def summary_step(as_json: bool = False) -> Callable[[Any, Any], None]:
    """The after-run step that prints the summary, once the reports are written."""
    def step(report: Any, run: Any) -> None:
        print_summary(report, run.out, run.written, as_json=as_json)

    return step


def sayer(as_json: bool = False) -> Callable[[str, str], None]:
    """How the command line prints what the run layer tells it (preflight.run.service.Say)."""
    def say(kind: str, text: str) -> None:
        if kind == "note":
            click.echo(f"preflight: {text}", err=True)
        elif kind == "warning":
            click.echo(f"preflight: warning: {text}", err=True)
        else:  # status, action, action-failed: the line as it is
            click.echo(text, err=kind != "action" or as_json)

    return say


def finish(report: Any, out: Path, formats: list[str], announce: bool = True, keep: Path | None = None,
           as_json: bool = False) -> None:
    """Write each report and print the summary (the "reports" step of preflight.run.finish, alone);
    a report that cannot be written is exit 2 naming it, after the others were tried."""
    from preflight.run.finish import Finishing, finish as finish_run, reports
    from preflight.run.request import RunRequest

    steps = [("reports", reports)] + ([("summary", summary_step(as_json))] if announce else [])
    with run_problems():
        finish_run(report, Finishing(RunRequest(formats=tuple(formats), history="off"), None, out,
                                     sayer(as_json), keep=keep), steps)


def textfile_option(f: Callable) -> Callable:
    return click.option("--textfile-dir", type=click.Path(file_okay=False), default=None,
                        help="Also write preflight.prom into this directory, atomically and always by that name: "
                             "node_exporter's --collector.textfile.directory.")(f)


class ResultsPath(click.ParamType):
    """A results file, or a run's folder holding one (`preflight-report/latest`): DIR/results.json, else
    DIR/results.jsonl (a run that was stopped)."""

    name = "results"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        path = Path(os.fspath(value))
        if not path.is_dir():
            return str(path)
        for name in ("results.json", "results.jsonl"):
            if (path / name).is_file():
                return str(path / name)
        self.fail(f"{path} holds no results.json or results.jsonl: name a run's folder or its results file",
                  param, ctx)


def load_results(path: str) -> Any:
    """The run report of a results.json or results.jsonl; exit 2 naming the file and field when it is not one."""
    with run_problems():
        # Only the plugins of the checks the run recorded are imported.
        report, notes = read_report(path, lambda ids: registry(needs=ids).checks)
    from preflight.reporters.safe_text import single_line

    for note in notes:
        click.echo(f"preflight: note: {single_line(note)}", err=True)  # a note names the file
    return report
