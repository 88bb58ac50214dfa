"""The `preflight` command line: the group and its commands, one module per command.

Start-up stays light: nothing here imports torch or tensorflow, and check modules are only imported
when a command needs the list of checks.
"""

from __future__ import annotations

import click

from preflight import __version__
from preflight.cli.alerts import alerts_command
from preflight.cli.catalog import explain, init, list_checks
from preflight.cli.diff import diff_runs
from preflight.cli.healthcheck import healthcheck
from preflight.cli.history import baseline, history
from preflight.cli.history_site import site_command
from preflight.cli.k8s import k8s
from preflight.cli.options import color_option
from preflight.cli.report import report
from preflight.cli.run import run
from preflight.core.verdict import EXIT_CODE_HELP


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODE_HELP)
@click.version_option(__version__, prog_name="preflight")
def cli() -> None:
    """Is this cluster ready to train? Run readiness checks on every node and across nodes,
    and get one go/no-go verdict with a report an engineer can act on."""


for _command in (run, report, diff_runs, alerts_command, list_checks, explain, init, healthcheck, k8s,
                 history, baseline):
    cli.add_command(_command)
history.add_command(site_command)


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    for command in group.commands.values():
        found += _commands(command) if isinstance(command, click.Group) else [command]
    return found


# --no-color on every command, defined once (preflight.cli.options.color_option).
for _command in _commands(cli):
    if not any("--no-color" in p.opts for p in _command.params):
        color_option(_command)


def main() -> None:
    import sys

    from preflight.core.redact import RedactingStream

    # Nothing printed on the terminal carries a URL's password or token (preflight.core.redact).
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        cli(prog_name="preflight")
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
