"""The commands about the check catalogue: `preflight list`, `explain` and `init`.

They read the registered checks and their declarations (parameters, their meanings, run levels) and
run nothing; kept apart from cli.py, which drives runs and reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from preflight.cli.options import UsageProblem, registry as _registry


@click.command("list")
def list_checks() -> None:
    """List the available checks with their scope and defaults."""
    import dataclasses

    registry = _registry()
    for check in registry.ordered():
        click.echo(f"{check.id:<24} {check.scope.value:<8} {check.title}")
        if dataclasses.is_dataclass(check.Params):
            defaults = ", ".join(f"{f.name}={_default_of(f)!r}" for f in dataclasses.fields(check.Params))
            click.echo(f"{'':<33}timeout={check.timeout_s:g}s" + (f"; {defaults}" if defaults else ""))
    from preflight.core.config import shipped_profiles

    click.echo(f"\nprofiles (--profile): {', '.join(shipped_profiles())}")
    for error in registry.errors:
        click.echo(f"failed to load {error.entry_point} ({error.distribution}): {error.error}", err=True)


def _default_of(f: Any) -> Any:
    import dataclasses

    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


@click.command()
@click.argument("check_id")
def explain(check_id: str) -> None:
    """What a check measures, why it matters, and its parameters."""
    import dataclasses

    from preflight.core.config import _toml_value

    registry = _registry()
    if check_id not in registry.checks:
        raise UsageProblem(f"unknown check id {check_id!r}; `preflight list` shows the known ones")
    check = registry.checks[check_id]
    click.echo(f"{check.id}: {check.title}")
    click.echo(f"scope: {check.scope.value}; default timeout {check.timeout_s:g}s; from {registry.origin[check_id]}")
    if check.tags:
        click.echo(f"tags: {', '.join(check.tags)}")
    click.echo("")
    click.echo("Why it matters:")
    click.echo(click.wrap_text(check.why, initial_indent="  ", subsequent_indent="  "))
    if check.remediation:
        click.echo("\nWhen it fails:")
        for hint in check.remediation:
            click.echo(click.wrap_text(hint, initial_indent="  - ", subsequent_indent="    "))
    if check.fixes:
        click.echo("\nFindings it can report, each with its fix (reports and tests refer to them by id):")
        for kind, fix in check.fixes.items():
            click.echo(f"  {check.id}.{kind}")
            click.echo(click.wrap_text(fix, initial_indent="      ", subsequent_indent="      "))
    if dataclasses.is_dataclass(check.Params) and dataclasses.fields(check.Params):
        click.echo(f"\nParameters ([checks.\"{check.id}\"] in preflight.toml, or --set {check.id}.NAME=VALUE):")
        for f in dataclasses.fields(check.Params):
            default = _default_of(f)
            shown = "unset" if default is None else _toml_value(default)
            click.echo(f"  {f.name} = {shown}")
            meaning = check.param_docs().get(f.name, "")
            if meaning:
                click.echo(click.wrap_text(meaning, initial_indent="      ", subsequent_indent="      "))
    from preflight.core.levels import describe

    lines = describe(check, _toml_value)
    if lines:
        click.echo("\nRun levels (--level; the profile, the config file and --set override them):")
        for line in lines:
            click.echo(line)


@click.command()
@click.option("--output", "-o", default="preflight.toml", show_default=True, type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(output: str, force: bool) -> None:
    """Write a commented preflight.toml with every check's parameters and defaults."""
    from preflight.core.config import render_init

    path = Path(output)
    if path.exists() and not force:
        raise UsageProblem(f"{output} exists; pass --force to overwrite it")
    try:
        path.write_text(render_init(_registry().checks) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}")
