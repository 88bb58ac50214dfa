"""`preflight diff`: what got worse between a known-good run and a new one."""

from __future__ import annotations

import sys

import click

from preflight.cli.options import (
    FINITE, ResultsPath, UsageProblem, json_option, load_results,
)


@click.command("diff")
@click.argument("old", type=ResultsPath())
@click.argument("new", type=ResultsPath())
@click.option("--tolerance", type=FINITE, default=0.1, show_default=True,
              help="Relative change of a figure that counts as a regression (0.1 = 10%).")
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text", show_default=True)
@click.option("--ignore-versions", is_flag=True,
              help="List software version changes without counting them as regressions.")
@json_option
def diff_runs(old: str, new: str, tolerance: float, fmt: str, ignore_versions: bool, as_json: bool = False) -> None:
    """Compare two runs, OLD (known-good) and NEW: status changes, figures that got worse by more
    than the tolerance, and changed software versions.

    Exit codes: 0 no regression, 1 a regression, 2 bad input (a file that is not a results.json)."""
    from preflight.core import compare as diff
    from preflight.reporters import baseline as words

    if not tolerance >= 0:
        raise UsageProblem("--tolerance must be zero or more")
    comparison = diff.compare(load_results(old), load_results(new), tolerance, old_label=old,
                              versions_regress=not ignore_versions)
    if as_json and fmt not in ("text", "json"):
        raise UsageProblem(f"--json prints JSON: leave out --format {fmt}, or --json")
    render = {"text": words.render_text, "md": words.render_markdown, "json": words.render_json}["json" if as_json else fmt]
    click.echo(render(comparison), nl=False)
    sys.exit(comparison.exit_code)


