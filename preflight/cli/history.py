"""`preflight history ...` and `preflight baseline learn`: fleet history from the command line.

Two click groups, `history` and `baseline`, for the main command line to add (`register(cli)`).
Every command takes --url (or $PREFLIGHT_HISTORY_URL): a file path, sqlite:///PATH or
postgresql+psycopg://...; the default is $XDG_DATA_HOME/preflight/history.sqlite. Bad input (an
unknown image, a figure nothing recorded, a store that is corrupt, foreign or unreachable, too few
runs to learn from) exits 2 with a message naming the flag or file. `history compare` exits 1 when
a figure got worse beyond noise, 0 otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import click

from preflight.cli.options import Duration, FiniteFloat, UsageProblem


class HistoryProblem(UsageProblem):
    """Bad input or an unusable store: exit 2 with one line naming it (masked and escaped as every
    usage problem is)."""


class EmptyHistory(Exception):
    """The store a query reads has nothing recorded yet: an answer (none), not a usage error."""


class HistoryGroup(click.Group):
    """`preflight history`: a query of a store that has nothing recorded yet says so and exits 0, with
    an empty answer (`[]` with --json) on stdout."""

    def invoke(self, ctx: click.Context) -> Any:
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        try:
            return super().invoke(ctx)
        except EmptyHistory as empty:
            click.echo(f"preflight: {empty}", err=True)
            if "--json" in args:
                click.echo("[]")
            return None


# -- options, defined once ------------------------------------------------------------------------

def url_option(f: Callable) -> Callable:
    return click.option("--url", envvar="PREFLIGHT_HISTORY_URL", default=None, metavar="URL",
                        help="History store: a file, sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
                             "[default: $XDG_DATA_HOME/preflight/history.sqlite].")(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


def _when(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """ISO date or time (UTC unless it says otherwise), or an age: 30m, 12h, 7d, 2w."""
    if value is None:
        return None
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    if re.fullmatch(r"[\d.\sa-z]+", value.strip().lower()) and not re.fullmatch(r"\s*\d+\s*", value):
        try:  # an age, as every duration option reads it: 30m, 1h30m, 7d, 2w
            return now - timedelta(seconds=Duration().convert(value, param, ctx))
        except click.BadParameter:
            pass
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither an ISO date/time (2026-11-29, 2026-11-29T10:00) "
                                 "nor an age (30m, 12h, 7d, 2w)", ctx=ctx, param=param) from None
    return when.astimezone(timezone.utc).replace(tzinfo=None) if when.tzinfo else when


def time_options(f: Callable) -> Callable:
    f = click.option("--until", callback=_when, metavar="WHEN", help="Runs started at or before WHEN.")(f)
    return click.option("--since", callback=_when, metavar="WHEN",
                        help="Runs started at or after WHEN: an ISO date/time or an age (7d, 12h).")(f)


def _nodes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if not value:
        return None
    from preflight.core.nodeset import NodeSetError, expand

    try:
        return expand(value)
    except NodeSetError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def nodes_option(f: Callable) -> Callable:
    return click.option("--nodes", "nodes_in", callback=_nodes, metavar="SET",
                        help="Only these nodes: names or ranges, gpu[01-16],cpu3 (at most 100,000).")(f)


def image_option(f: Callable) -> Callable:
    return click.option("--image", metavar="IMAGE",
                        help="Only this node image: a digest prefix, or FIELD=VALUE pairs (driver=550.54.15,nccl=2.21.5).")(f)


def figure_options(f: Callable) -> Callable:
    f = click.option("--series", default=None, help="Only this series of the check's figures (nccl, write, ...).")(f)
    f = click.option("--check", default=None, metavar="ID", help="Figures of this check (collectives.local).")(f)
    return click.option("--figure", default=None, metavar="NAME",
                        help="A figure by its name, or part of it ('busbw at 1 GiB').")(f)


# -- plumbing -------------------------------------------------------------------------------------

def _open(url: str | None, *, create: bool = False) -> Any:
    from preflight.history.store import HistoryError, Store, StoreMissing

    try:
        return Store(url, create=create)
    except StoreMissing as exc:
        raise EmptyHistory(str(exc)) from None
    except HistoryError as exc:
        raise HistoryProblem(f"{exc} (--url)") from None


def _run(work: Callable[[], Any]) -> Any:
    """Query errors and store errors as exit 2."""
    from preflight.history.extract import NotAReport
    from preflight.history.learn import LearnError
    from preflight.history.queries import QueryError
    from preflight.history.store import HistoryError

    try:
        return work()
    except (QueryError, LearnError, NotAReport) as exc:
        raise HistoryProblem(str(exc)) from None
    except HistoryError as exc:
        raise HistoryProblem(f"{exc} (--url)") from None


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in (sorted(value) if isinstance(value, set) else value)]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(_plain(value), indent=2, sort_keys=True, allow_nan=False))


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.4g} {unit}".strip()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _say(text: object, err: bool = False) -> None:
    """One line of what the store holds, on the terminal: a node name, a command or a finding id from a
    recorded run is machine text, shown with its control characters neutralised (safe_text)."""
    from preflight.reporters.safe_text import single_line

    click.echo(single_line(text), err=err)


def _table(rows: list[list[str]], header: list[str]) -> None:
    rows = [[_cell(c) for c in row] for row in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for line in [header, *rows]:
        _say("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())


def _cell(value: object) -> str:
    from preflight.reporters.safe_text import single_line

    return single_line(value)


def _time(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


# -- history ----------------------------------------------------------------------------------------

@click.group("history", cls=HistoryGroup)
def history() -> None:
    """Fleet history: the runs recorded, how figures moved, what an image change did, which nodes lag."""


@history.command("list")
@url_option
@nodes_option
@image_option
@click.option("--verdict", type=click.Choice(["GO", "NO-GO", "INCOMPLETE", "UNKNOWN"], case_sensitive=False))
@time_options
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
def list_command(url: str | None, nodes_in: list[str] | None, image: str | None, verdict: str | None,
                 since: datetime | None, until: datetime | None, limit: int, as_json: bool) -> None:
    """The recorded runs, newest first."""
    from preflight.history.queries import list_runs

    with _open(url) as store:
        found = _run(lambda: list_runs(store, nodes_in=nodes_in, image=image, verdict=verdict, since=since,
                                       until=until, limit=limit))
    if as_json:
        return _echo_json(found)
    if not found:
        _say("no recorded run matches")
        return
    _table([[str(r.id), _time(r.started), r.verdict, r.level, r.profile or "-", str(r.node_count),
             ", ".join(f"{d[:8] or 'unknown'} x{n}" for d, n in sorted(r.images.items(), key=lambda kv: -kv[1]))]
            for r in found], ["run", "started (UTC)", "verdict", "level", "profile", "nodes", "images"])
    _image_legend(url, [d for r in found for d in r.images if d])


def _image_legend(url: str | None, digests: list[str]) -> None:
    """Each image the list names, as `history compare` takes it: its digest prefix, or its FIELD=VALUE pairs."""
    from preflight.history.queries import image_fields

    shown = list(dict.fromkeys(digests))
    if not shown:
        return
    with _open(url) as store, store.connect() as conn:
        fields = _run(lambda: image_fields(conn, shown))
    _say("images (`preflight history compare A B` takes the prefix or the FIELD=VALUE pairs):")
    for digest in shown:
        pairs = ",".join(f"{k}={v}" for k, v in (fields.get(digest) or {}).items() if v not in (None, ""))
        _say(f"  {digest[:8]}  {pairs or '(no fields recorded)'}")


@history.command("show")
@click.argument("run", default="latest")
@url_option
@json_option
def show_command(run: str, url: str | None, as_json: bool) -> None:
    """One run: its nodes, images, statuses and findings (RUN is an id or `latest`)."""
    from preflight.history.queries import show_run

    with _open(url) as store:
        detail = _run(lambda: show_run(store, run))
    if as_json:
        return _echo_json(detail)
    r = detail.run
    _say(f"run {r.id}: {r.verdict}, started {_time(r.started)} UTC, level {r.level}, preflight "
               f"{r.preflight_version or '?'}" + (f", profile {r.profile}" if r.profile else ""))
    _say(f"  command: {r.command or '-'}; config digest {r.config_digest}")
    _say(f"  nodes ({r.node_count}): {detail.nodes}")
    for img in detail.images:
        _say(f"  image {img['digest'][:12] or 'unknown'} on {img['count']} node(s) {img['nodes']}: "
                   f"{img['description']}")
    _say("  results: " + ", ".join(f"{n} {s}" for s, n in sorted(detail.statuses.items())) +
               f"; {detail.figures} figures")
    for f in detail.findings[:40]:
        times = f" x{f['count']}" if f["count"] > 1 else ""
        _say(f"  {f['level']:<5} {f['id']} on {f['node']} ({f['check_id']}){times}")
    if len(detail.findings) > 40:
        _say(f"  ... and {len(detail.findings) - 40} more findings (--json lists them all)")


@history.command("trend")
@url_option
@figure_options
@nodes_option
@image_option
@time_options
@click.option("--per-node", is_flag=True, help="One row per node instead of the median over the run's nodes.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the trend as a page with an SVG chart to this file.")
@json_option
def trend_command(url: str | None, figure: str | None, check: str | None, series: str | None,
                  nodes_in: list[str] | None, image: str | None, since: datetime | None, until: datetime | None,
                  per_node: bool, html_path: str | None, as_json: bool) -> None:
    """A figure over the recorded runs: the median over each run's nodes, or each node's own."""
    from preflight.history.queries import trend

    if not (figure or check):
        raise click.UsageError("name a figure with --figure NAME, or a check with --check ID (and --series)")
    with _open(url) as store:
        keys, rows = _run(lambda: trend(store, figure=figure, check=check, series=series, nodes_in=nodes_in,
                                        image=image, since=since, until=until, per_node=per_node))
    if html_path:
        from preflight.history.chart import trend_page

        title = keys[0].label if len(keys) == 1 else f"{len(keys)} figures of {keys[0].check_id}"
        caption = f"{len({r.run_id for r in rows})} runs" + (f", image {image}" if image else "")
        try:
            Path(html_path).write_text(trend_page(keys, rows, title, caption), encoding="utf-8")
        except OSError as exc:
            raise HistoryProblem(f"--html {html_path}: cannot write ({exc.strerror or exc})") from None
    if as_json:
        return _echo_json({"figures": keys, "rows": rows})
    if not rows:
        _say(f"no recorded value of {', '.join(k.label for k in keys[:3])} matches")
        return
    if per_node or nodes_in:
        _table([[str(r.run_id), _time(r.started), r.key.label, r.node, r.image[:8] or "-", _num(r.median, r.key.unit)]
                for r in rows], ["run", "started (UTC)", "figure", "node", "image", "value"])
    else:
        _table([[str(r.run_id), _time(r.started), r.key.label, r.image[:8] or "-", str(r.n), _num(r.median, r.key.unit),
                 f"{_num(r.p05)}-{_num(r.p95)}", f"{_num(r.low)}-{_num(r.high)}"] for r in rows],
               ["run", "started (UTC)", "figure", "image", "nodes", "median", "p5-p95", "min-max"])
    if html_path:
        _say(f"wrote {html_path}")


@history.command("compare")
@click.argument("image_a")
@click.argument("image_b")
@url_option
@figure_options
@time_options
@click.option("--alpha", type=FiniteFloat(0, 1, min_open=True, max_open=True), default=0.01, show_default=True,
              help="Significance level of the Mann-Whitney U test.")
@click.option("--min-change", type=FiniteFloat(min=0), default=0.01, show_default=True,
              help="Smallest relative change called beyond noise.")
@click.option("--all", "show_all", is_flag=True, help="List the figures within noise too.")
@json_option
def compare_command(image_a: str, image_b: str, url: str | None, figure: str | None, check: str | None,
                    series: str | None, since: datetime | None, until: datetime | None, alpha: float,
                    min_change: float, show_all: bool, as_json: bool) -> None:
    """What moving from IMAGE_A to IMAGE_B did to each figure (digest prefixes, or FIELD=VALUE pairs).

    Exits 1 when a figure got worse beyond noise."""
    from preflight.history.compare import compare

    with _open(url) as store:
        side_a, side_b, found = _run(lambda: compare(store, image_a, image_b, figure=figure, check=check,
                                                     series=series, since=since, until=until, alpha=alpha,
                                                     min_change=min_change))
    worse = [c for c in found if c.verdict == "worse"]
    if as_json:
        _echo_json({"image_a": side_a, "image_b": side_b, "figures": found})
    else:
        _say(f"A = {image_a} ({', '.join(d[:8] for d in sorted(side_a))}); "
                   f"B = {image_b} ({', '.join(d[:8] for d in sorted(side_b))}); {len(found)} figures on both")
        shown = found if show_all else [c for c in found if c.beyond_noise]
        if shown:
            _table([[c.key.label, c.verdict, _num(c.median_a, c.key.unit), _num(c.median_b, c.key.unit),
                     _pct(c.change), f"{_pct(c.spread_a)[1:]}/{_pct(c.spread_b)[1:]}", f"{c.n_a}/{c.n_b} {c.unit_of_observation}",
                     f"p={c.p_value:.2g}"] for c in shown],
                   ["figure", "verdict", "median A", "median B", "change", "IQR A/B", "n A/B", "test"])
            _say(f"test: {found[0].test.split(' (')[0]}, two-sided, alpha {alpha:g}; beyond noise also needs "
                       f"a change of {min_change:.0%} or more")
        else:
            _say("no figure changed beyond noise" + ("" if show_all else " (--all lists them)"))
    if worse:
        raise SystemExit(1)


@history.command("nodes")
@url_option
@nodes_option
@click.option("--lemons", is_flag=True, help="Only nodes named a fleet outlier in K of their last N runs.")
@click.option("-k", "k", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("-n", "n", type=click.IntRange(min=1), default=5, show_default=True)
@json_option
def nodes_command(url: str | None, nodes_in: list[str] | None, lemons: bool, k: int, n: int, as_json: bool) -> None:
    """The recorded nodes, with how often each lagged its peers lately."""
    from preflight.history import queries

    if k > n:
        raise click.BadParameter(f"-k {k} is more than -n {n}", param_hint="-k")
    with _open(url) as store:
        found = _run(lambda: queries.lemons(store, k=k, n=n, nodes_in=nodes_in) if lemons
                     else queries.nodes_summary(store, nodes_in=nodes_in, window=n))
    if as_json:
        return _echo_json(found)
    if not found:
        _say(f"no node was a fleet outlier in {k} of its last {n} runs" if lemons else "no node recorded")
        return
    _table([[r.name, str(r.runs), _time(r.last_seen), r.image[:8] or "-", f"{r.outlier_runs}/{r.window}",
             ", ".join(r.checks) or "-"] for r in found],
           ["node", "runs", "last seen (UTC)", "image", "outlier runs", "lagged in"])


@history.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@url_option
def import_command(paths: tuple[str, ...], url: str | None) -> None:
    """Record earlier results.json files (or the results.json files under directories)."""
    from preflight.history.extract import NotAReport, judge, recorded_verdict
    from preflight.history.store import read_report

    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob("results.json")) if p.is_dir() else [p])
    if not files:
        raise HistoryProblem(f"no results.json under {', '.join(paths)}")
    reports = []
    for f in files:  # every file is read before any is recorded: one bad file records nothing
        try:
            reports.append((f, read_report(f)))
        except NotAReport as exc:
            raise HistoryProblem(str(exc)) from None
    with _open(url, create=True) as store:
        for f, report in reports:
            stated, (judged, headline) = recorded_verdict(report), judge(report)
            if stated is not None and stated != judged:
                click.echo(f"{f}: the file says {stated}, but its results say {judged}: recorded as {judged}", err=True)
            done = _run(lambda: store.ingest(report, source=str(f.resolve()), verdict=judged,  # judged once
                                             headline=headline))
            _say(f"{f}: " + (f"run {done.run_id}, {done.nodes} nodes, {done.figures} figures" if done.new
                                   else f"already recorded as run {done.run_id}"))


# -- baseline -------------------------------------------------------------------------------------

@click.group("baseline")
def baseline() -> None:
    """Baselines from fleet history."""


@baseline.command("learn")
@url_option
@image_option
@time_options
@click.option("--min-runs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Refuse with fewer healthy (GO) runs than this.")
@click.option("--percentile", "pct", type=FiniteFloat(0, 50, min_open=True, max_open=True), default=5.0,
              show_default=True, help="The low percentile a floor is taken at (the ceiling: 100 minus it).")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the profile here (use it with --profile FILE); default: print it.")
def learn_command(url: str | None, image: str | None, since: datetime | None, until: datetime | None,
                  min_runs: int, pct: float, out: str | None) -> None:
    """Learn profile floors from the healthy (GO) runs in history."""
    from preflight.history.learn import learn_baseline

    with _open(url) as store:
        text, provenance = _run(lambda: learn_baseline(store, image=image, since=since, min_runs=min_runs, pct=pct,
                                                       until=until))
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HistoryProblem(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    _say(f"wrote {out}: {len(provenance['floors'])} thresholds from {provenance['runs']} healthy runs "
               f"on {provenance['nodes']} nodes", err=True)


def register(cli: click.Group) -> None:
    """Add `history` and `baseline` to the main command line."""
    cli.add_command(history)
    cli.add_command(baseline)
