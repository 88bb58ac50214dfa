"""`preflight history site --out DIR`: the fleet's readiness page over every recorded run (a static
site: index.html, and fleet.prom with the same figures as Prometheus gauges). It takes the filters
the other history commands take (--since, --until, --nodes, --image)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from preflight.cli.history import HistoryProblem, _open, _run, _say, image_option, nodes_option, time_options, \
    url_option


@click.command("site")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Directory the site is written into (made if missing): index.html and fleet.prom.")
@url_option
@nodes_option
@image_option
@time_options
def site_command(out: Path, url: str | None, nodes_in: list[str] | None, image: str | None,
                 since: datetime | None, until: datetime | None) -> None:
    """A static page of the fleet's readiness: every run, key figures over time, image changes."""
    from preflight.core.files import FileWriteError
    from preflight.core.redact import redact_text
    from preflight.history import site, site_page

    if out.exists() and not out.is_dir():
        raise HistoryProblem(f"--out {out}: not a directory")
    with _open(url) as store:
        gathered = _run(lambda: site.gather(store, site.Filters(since, until, nodes_in, image)))
        label = redact_text(store.location)
    try:
        written = site_page.write(gathered, out, label)
    except (OSError, FileWriteError) as exc:
        raise HistoryProblem(f"--out {out}: cannot be written ({getattr(exc, 'strerror', None) or exc})") from None
    share = gathered.readiness.share
    _say(f"fleet site: {written[0]} ({len(gathered.runs)} runs"
         + (f", {share:.0%} of {gathered.readiness.total} nodes ready" if share is not None else "") + ")")
