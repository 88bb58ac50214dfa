"""The commands about the check catalogue: `preflight list`, `explain` and `init`.

They read the registered checks and their declarations (parameters, their meanings, run levels) and
run nothing; kept apart from cli.py, which drives runs and reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from preflight.cli.options import UsageProblem, json_option, registry as _registry


@click.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also every parameter's default, wrapped to the terminal.")
@click.option("--tag", "tag", default=None, metavar="TAG", help="Only the checks with this tag.")
@json_option
def list_checks(verbose: bool, tag: str | None, as_json: bool) -> None:
    """List the available checks: id, scope, tags and title (-v: with their defaults; --json: all of it)."""
    import dataclasses
    import shutil

    from preflight.core.finite import dumps

    registry = _registry()
    checks = [c for c in registry.ordered() if tag is None or tag in c.tags]
    if tag is not None and not checks:
        from preflight.core.suggest import suggest

        known = {t for c in registry.ordered() for t in c.tags}
        raise UsageProblem(f"no check has the tag {tag!r}{suggest(tag, known)} (tags: {', '.join(sorted(known))})")
    from preflight.core.config import shipped_profiles

    if as_json:
        click.echo(dumps({"checks": [_check_dict(c, registry) for c in checks],
                          "profiles": shipped_profiles(),
                          "load_errors": [e.to_dict() for e in registry.errors]}, indent=2, default=str))
        return
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    # Columns as wide as their longest entry, two spaces apart: an id never runs into its scope.
    id_width = max(len(c.id) for c in checks)
    scope_width = max(len(c.scope.value) for c in checks)
    for check in checks:
        click.echo(click.wrap_text(f"{check.id:<{id_width}}  {check.scope.value:<{scope_width}}  {check.title}", width,
                                   subsequent_indent=" " * (id_width + scope_width + 4)))
        if verbose:
            if check.tags:
                click.echo(click.wrap_text(f"tags: {', '.join(check.tags)}", width, initial_indent=" " * 4,
                                           subsequent_indent=" " * 4))
            defaults = [f"timeout={check.timeout_s:g}s"]
            if dataclasses.is_dataclass(check.Params):
                defaults += [f"{f.name}={_default_of(f)!r}" for f in dataclasses.fields(check.Params)]
            click.echo(click.wrap_text(", ".join(defaults), width, initial_indent=" " * 4, subsequent_indent=" " * 4))
    click.echo(f"\nprofiles (--profile): {', '.join(shipped_profiles())}")
    if not verbose:
        click.echo("`preflight list -v` adds each check's tags and defaults; `preflight explain ID` explains them.")
    for error in registry.errors:
        click.echo(f"failed to load {error.entry_point} ({error.distribution}): {error.error}", err=True)


def _check_dict(check: Any, registry: Any) -> dict[str, Any]:
    import dataclasses

    params = {f.name: _default_of(f) for f in dataclasses.fields(check.Params)} \
        if dataclasses.is_dataclass(check.Params) else {}
    return {"id": check.id, "title": check.title, "scope": check.scope.value, "tags": list(check.tags),
            "timeout_s": check.timeout_s, "params": params, "param_help": dict(check.param_help),
            "levels": check.levels, "from": registry.origin.get(check.id, "")}


def _default_of(f: Any) -> Any:
    from preflight.core.check import field_default

    return field_default(f)


@click.command()
@click.argument("check_id")
@json_option
def explain(check_id: str, as_json: bool = False) -> None:
    """What a check measures, why it matters, and its parameters (--json: all of it, as `list --json` gives it)."""
    import dataclasses

    from preflight.core.config_init import _toml_value

    registry = _registry()
    if check_id not in registry.checks:
        from preflight.core.suggest import suggest

        raise UsageProblem(f"unknown check id {check_id!r}{suggest(check_id, registry.checks)}; `preflight list` "
                           "shows the known ones")
    check = registry.checks[check_id]
    if as_json:
        from preflight.core.finite import dumps

        click.echo(dumps({**_check_dict(check, registry), "why": check.why, "remediation": list(check.remediation),
                          "fixes": {f"{check.id}.{kind}": fix for kind, fix in check.fixes.items()}},
                         indent=2, default=str))
        return
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
        table, prefix = ((f"[{check.config_table}]", check.config_table) if check.config_table
                         else (f'[checks."{check.id}"]', check.id))
        click.echo(f"\nParameters ({table} in preflight.toml, or --set {prefix}.NAME=VALUE):")
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
@click.option("--out", "--output", "-o", "output", default="preflight.toml", show_default=True,
              type=click.Path(dir_okay=False), help="The file to write (--out, as every other command names it).")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(output: str, force: bool) -> None:
    """Write a commented preflight.toml with every check's parameters and defaults."""
    from preflight.core.config_init import render_init

    path = Path(output)
    if path.exists() and not force:
        raise UsageProblem(f"{output} exists; pass --force to overwrite it")
    try:
        path.write_text(render_init(_registry().checks) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}")
