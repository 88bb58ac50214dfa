"""`preflight report`: re-render, or re-judge, a past run from its results file."""

from __future__ import annotations

import sys

import click

from preflight.cli.options import (
    DEFAULT_OUT, UsageProblem, check_formats, config_option, fail_on_option, finish, format_option, load_results, nonempty, out_option, profile_option, registry, set_option, writable_dir,
)


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@out_option
@format_option
@fail_on_option
@click.option("--rejudge", is_flag=True, help="Judge the recorded facts again with today's code, touching no machine: "
              "with everything the run was judged with (profile, config, --set, expectations, level, fail-on), "
              "and the options below on top; written to <out>/rejudged/ when --out holds RESULTS.")
@profile_option
@set_option
@config_option
def report(results: str, out_dir: str | None, formats: str, fail_on: str | None, rejudge: bool = False,
           profile: str | None = None, settings: tuple[str, ...] = (), config_file: str | None = None) -> None:
    """Re-render the reports of a past run from its results.json (or results.jsonl) without re-running.

    --profile, --config and --set apply only with --rejudge, on top of what the run recorded.

    `--out -` prints the one report asked for to standard output (e.g. `--format md --out -` for a
    pull-request comment)."""
    from preflight.core.verdict import decide

    chosen = check_formats(formats)
    if out_dir is not None:
        nonempty("--out", out_dir)
    if out_dir == "-" and len(chosen) != 1:
        raise UsageProblem("--out - prints one report: choose one with --format (md, html, json or junit)")
    past = load_results(results)
    if rejudge:
        from preflight.core.config import ConfigError
        from preflight.run.rejudge import rejudge_for_cli

        try:
            past, rejudged_out = rejudge_for_cli(past, registry(), results, out_dir or DEFAULT_OUT, profile,
                                                 list(settings), config_file)
            out_dir = rejudged_out if out_dir is not None else None  # without --out: a new directory anyway
            sources = (past.rejudged or {}).get("sources") or {}
            given = sorted(key for key, source in sources.items() if not source.startswith("the run") and key != "note")
            click.echo(f"preflight: re-judged with what the run recorded ({len(sources) - len(given)} values)"
                       + (f"; from the options given now: {', '.join(given)}" if given else ""), err=True)
            if "note" in sources:
                click.echo(f"preflight: note: {sources['note']}", err=True)
        except ConfigError as exc:
            raise UsageProblem(str(exc)) from None
    elif profile is not None or settings or config_file:
        raise UsageProblem("--profile, --set and --config apply to `report` only with --rejudge")
    if fail_on:
        past.fail_on = fail_on
    if out_dir == "-":
        from preflight.reporters import renderer

        click.echo(renderer(chosen[0])(past), nl=False)
        sys.exit(decide(past).exit_code)
    # The results re-rendered are never replaced: an --out that holds them is refused (with --rejudge
    # the re-judged report goes to <out>/rejudged/ instead).
    out = writable_dir(out_dir, inputs=[("RESULTS", results), ("--config", config_file)], formats=chosen)
    finish(past, out, chosen)
    sys.exit(decide(past).exit_code)


