"""What every command shares, defined once: the usage error, the options, loading checks and results.

Commands import this module, never `preflight.cli.main` (which only assembles the group).
"""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path
from typing import Any, Callable

import click

from preflight import __version__
from preflight.core.verdict import EXIT_USAGE

DEFAULT_OUT = "preflight-report"


class UsageProblem(click.ClickException):
    """Bad input: exit 2 with a message that names the problem, before anything runs."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        from preflight.core.redact import redact_text

        click.echo(f"preflight: error: {redact_text(self.format_message())}", err=True)


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


def split_ids(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


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


def config_option(f: Callable) -> Callable:
    return click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                        help="preflight.toml with expectations and per-check parameters.")(f)


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


def plugin_name(error: Any) -> str:
    """The check id a plugin that failed to load would have had (its entry point's name)."""
    return str(error.entry_point).split(" =")[0]


def check_ids_known(found: Any, wanted: list[str], skipped: set[str]) -> None:
    """Exit 2 for an id in --checks or --skip that no check has (naming its plugin when it failed to load)."""
    for check_id in [*wanted, *skipped]:
        if check_id not in found.checks:
            hint = ""
            broken = [e for e in found.errors if plugin_name(e) == check_id]
            if check_id in skipped and check_id in getattr(found, "not_imported", {}):
                continue  # --skip of a third party's plugin: never imported
            if broken and check_id in skipped:
                continue  # --skip of a plugin that failed to load: the user knows, its absence is no gap
            if broken:
                hint = f" (its plugin failed to load: {broken[0].error})"
            from preflight.core.suggest import suggest

            hint = hint or suggest(check_id, found.checks)
            raise UsageProblem(f"unknown check id {check_id!r}{hint}; `preflight list` shows the known ones")


class Duration(click.ParamType):
    """Seconds, written as `300`, `90s`, `5m`, `1h` or `1h30m`, for every time option."""

    name = "duration"
    UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        import re

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
            if not math.isfinite(seconds):
                self.fail(f"{value!r} is not a finite duration", param, ctx)
        else:
            text = str(value).strip().lower()
            parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?", text)
            if not text or re.sub(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?", "", text).strip() or not parts \
                    or (len(parts) > 1 and any(not unit for _, unit in parts)):
                self.fail(f"{value!r} is not a finite duration (e.g. 300, 90s, 5m, 1h30m)", param, ctx)
            seconds = sum(float(n) * self.UNITS[unit or "s"] for n, unit in parts)
        if not seconds > self.minimum:
            self.fail(f"{value!r} must be more than {self.minimum:g} s", param, ctx)
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


def registry() -> Any:
    """The checks, less the third-party plugins the command's --skip names (never imported)."""
    from preflight.core.registry import discover

    ctx = click.get_current_context(silent=True)
    skip = (ctx.params.get("skip") if ctx is not None else None) or ""
    return discover(skip=set(split_ids(skip)))


def check_formats(formats: str) -> list[str]:
    from preflight.reporters import available, refused

    chosen = split_ids(formats)
    for fmt in chosen:
        if fmt in refused():
            raise UsageProblem(refused()[fmt])
    unknown = [f for f in chosen if f not in available()]
    if unknown:
        raise UsageProblem(f"unknown report format {', '.join(unknown)}; choose from {', '.join(available())} "
                           "(formats are plugins of the preflight.reporters entry-point group)")
    return chosen


def writable_dir(path: str | None, inputs: list[tuple[str, str | None]] | None = None,
                 formats: list[str] | None = None) -> Path:
    """The run's own directory (see preflight/cli/outdir.py): a new one per run without --out.

    `inputs` are the (flag, path) of the files the command reads: an --out whose report files would
    replace one of them is a usage error. `formats` are the formats to be written."""
    from preflight.cli.outdir import RESULTS_LOG, OutputDirError, run_directory
    from preflight.reporters import filename

    if path is not None:
        nonempty("--out", path)
    if path == "-":
        raise UsageProblem("--out - prints one report and is for `preflight report`; a run writes a directory")
    try:
        return run_directory(path or DEFAULT_OUT, per_run=path is None,
                             inputs=[(flag, given) for flag, given in inputs or [] if given],
                             writes=[RESULTS_LOG, *(filename(f) for f in formats or [])])
    except OutputDirError as exc:
        raise UsageProblem(str(exc)) from None


def nonempty(flag: str, value: str) -> None:
    if not value.strip() or (flag == "--checks" and not split_ids(value)):
        raise UsageProblem(f"{flag} is empty; give {'a directory' if flag == '--out' else 'check ids'} or leave "
                           f"{flag} out")


VERDICT_COLOURS = {"GO": {"fg": "green", "bold": True}, "NO-GO": {"fg": "red", "bold": True},
                   "INCOMPLETE": {"fg": "yellow", "bold": True}}


def finish(report: Any, out: Path, formats: list[str], announce: bool = True, keep: Path | None = None,
           as_json: bool = False) -> None:
    """Write each report (through a temporary file and a rename: never through a link planted at its
    name) and print the summary. A report that cannot be written (disk full, a read-only directory)
    is exit 2 naming it, after the others were tried; results.jsonl is never touched here. `keep`: a
    file never written over (the results `preflight report` reads)."""
    # The report is complete: keep the garbage collector from walking its objects (a million at
    # 1,000 nodes) again on every collection that the reporters' allocations trigger.
    from preflight.core.redact import scrub
    from preflight.reporters import view

    scrub(report)  # no URL password or token reaches a report file (preflight.core.redact)
    gc.freeze()
    try:
        with view.shared():  # one view of the report for every reporter that draws one
            _write_reports(report, out, formats, announce, keep, as_json)
    finally:
        gc.unfreeze()


def _write_reports(report: Any, out: Path, formats: list[str], announce: bool, keep: Path | None,
                   as_json: bool) -> None:
    from preflight.core.files import FileWriteError, write_atomic
    from preflight.reporters import filename, renderer
    from preflight.reporters.terminal import render as render_terminal

    written, failed = [], []
    for fmt in formats:
        path = out / filename(fmt)
        if keep is not None and path.resolve() == keep.resolve():
            continue  # the input itself: it already holds this run
        try:
            write_atomic(path, renderer(fmt)(report))
            written.append(path)
        except FileWriteError as exc:
            failed.append(str(exc))
    if announce:
        text = render_terminal(report)
        verdict_line, _, rest = text.partition("\n")
        click.echo("", err=as_json)
        # The verdict line in the verdict's colour on a terminal; click drops the colour elsewhere.
        click.secho(verdict_line, err=as_json, **VERDICT_COLOURS.get(verdict_line.split(" ", 2)[1], {}))
        click.echo(rest, nl=False, err=as_json)
        if written:
            click.echo("Reports: " + ", ".join(str(p) for p in written), err=as_json)
    if as_json:
        import json

        from preflight.reporters.json_report import summary

        click.echo(json.dumps({**summary(report), "output_dir": str(out), "reports": [str(p) for p in written]},
                              indent=2, allow_nan=False))
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(renderer("md")(report) + "\n")
        except OSError as exc:
            click.echo(f"preflight: warning: cannot append to GITHUB_STEP_SUMMARY: {exc}", err=True)
    if failed:
        raise UsageProblem("; ".join(failed) + (f" (the results so far are in {out / 'results.jsonl'})"
                                                if (out / "results.jsonl").is_file() else ""))


def textfile_option(f: Callable) -> Callable:
    return click.option("--textfile-dir", type=click.Path(file_okay=False), default=None,
                        help="Also write preflight.prom into this directory, atomically and always by that name: "
                             "node_exporter's --collector.textfile.directory.")(f)


def write_textfile(report: Any, directory: str | None) -> None:
    if not directory:
        return
    from preflight.core.files import FileWriteError, write_atomic
    from preflight.reporters import renderer

    path = Path(directory) / "preflight.prom"
    try:
        write_atomic(path, renderer("prometheus")(report))
    except (FileWriteError, OSError) as exc:
        raise UsageProblem(f"cannot write {path}: {exc.strerror or exc}") from None


def load_results(path: str) -> Any:
    """The run report of a results.json or results.jsonl; exit 2 naming the file and field when it is not one."""
    from preflight.core.results_file import ResultsFileError, read_results

    try:
        report, notes = read_results(path, __version__)
    except ResultsFileError as exc:
        raise UsageProblem(str(exc)) from None
    for note in notes:
        click.echo(f"preflight: note: {note}", err=True)
    from preflight.run.plan import fill_declarations

    fill_declarations(report, registry().checks)  # a results file older than the recorded declarations
    return report


def load_baseline(path: str | None, tolerance: float, fail_on_regression: bool) -> Any:
    if path is None:
        if fail_on_regression:
            raise UsageProblem("--fail-on-regression needs --baseline FILE")
        return None
    if not tolerance >= 0:
        raise UsageProblem("--baseline-tolerance must be zero or more")
    return load_results(path)


