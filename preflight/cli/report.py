"""`preflight report`: re-render, or re-judge, a past run from its results file."""

from __future__ import annotations

import os
from pathlib import Path

import click

from preflight.cli.options import (
    UsageProblem, check_formats, color_option, config_option, exit_with_verdict, fail_on_option, finish, format_option,
    json_option, load_results, nonempty, profile_option, registry, ResultsPath, run_problems, set_option, writable_dir,
)


def beside(results: Path) -> Path:
    """RESULTS' own directory, if it can be written to; `latest` and the other files there stay as they are."""
    out = results.resolve().parent
    if not os.access(out, os.W_OK):
        raise UsageProblem(f"cannot write beside {results}: {out} is not writable; give --out DIR")
    return out


@click.command()
@click.argument("results", type=ResultsPath())
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Directory for the re-rendered reports; it replaces the report files left there (default: "
                   "beside RESULTS, rewriting only the formats asked for; with --rejudge, RESULTS' directory/"
                   "rejudged/). `-` prints the one report asked for to standard output. Never moves latest.")
@format_option
@fail_on_option
@click.option("--rejudge", is_flag=True, help="Judge the recorded facts again with today's code, touching no machine: "
              "with everything the run was judged with (profile, config, --set, expectations, level, fail-on), "
              "and the options below on top; written to <out>/rejudged/ when --out holds RESULTS.")
@profile_option
@set_option
@config_option
@color_option
@json_option
def report(results: str, out_dir: str | None, formats: str, fail_on: str | None, rejudge: bool = False,
           profile: str | None = None, settings: tuple[str, ...] = (), config_file: str | None = None,
           as_json: bool = False) -> None:
    """Re-render the reports of a past run from its results.json (or results.jsonl) without re-running.

    --profile, --config and --set apply only with --rejudge, on top of what the run recorded.

    `--out -` prints the one report asked for to standard output (e.g. `--format md --out -` for a
    pull-request comment)."""
    exit_with_verdict(lambda: _report(results, out_dir, formats, fail_on, rejudge, profile, settings, config_file,
                                      as_json))


def _report(results: str, out_dir: str | None, formats: str, fail_on: str | None, rejudge: bool,
            profile: str | None, settings: tuple[str, ...], config_file: str | None, as_json: bool = False) -> int:
    from preflight.core.verdict import decide

    chosen = check_formats(formats)
    if out_dir is not None:
        nonempty("--out", out_dir)
    if out_dir == "-" and len(chosen) != 1:
        raise UsageProblem("--out - prints one report: choose one with --format (md, html, json or junit)")
    past = load_results(results)
    if rejudge:
        from preflight.run import service
        from preflight.run.request import RunRequest

        request = RunRequest(profile=profile, settings=tuple(settings), config_file=config_file, fail_on=fail_on,
                             formats=tuple(chosen), out_dir=out_dir)
        with run_problems():
            past, out_dir, notes = service.rejudge(request, past, results, out_dir, registry(needs=past.check_ids))
        for note in notes:
            click.echo(f"preflight: {note}", err=True)
    elif profile is not None or settings or config_file:
        raise UsageProblem("--profile, --set and --config apply to `report` only with --rejudge")
    else:
        from preflight.run.shape import answer_again

        if fail_on:
            past.fail_on = fail_on
        answer_again(past)  # the subset judged again from the recorded shape, never the one read from the file
    if out_dir == "-":
        from preflight.reporters import renderer

        click.echo(renderer(chosen[0])(past), nl=False)
        return decide(past).exit_code
    if out_dir is None:
        # Beside the results: the formats asked for are rewritten, nothing else there is touched, and the
        # results themselves are never overwritten.
        out = beside(Path(results))
    else:
        # The results re-rendered are never replaced: an --out that holds them is refused (with --rejudge
        # the re-judged report goes to <out>/rejudged/ instead).
        out = writable_dir(out_dir, inputs=[("RESULTS", results), ("--config", config_file)], formats=chosen)
    finish(past, out, chosen, keep=Path(results), as_json=as_json)
    return decide(past).exit_code


