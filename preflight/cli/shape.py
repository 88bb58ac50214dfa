"""`run --shape`: the option, and its values parsed into the request's Shape (exit 2 naming --shape
and the key). The answer is the run layer's after-run step (preflight.run.shape)."""

from __future__ import annotations

from typing import Any, Callable

import click

from preflight.cli.options import UsageProblem


def shape_option(f: Callable) -> Callable:
    return click.option(
        "--shape", "shape", multiple=True, metavar="KEY=VALUE",
        help="The job's shape: nodes-multiple-of=N, within=group (one topology group), gpus-per-node=N "
             "(comma-separated or repeatable). When not every node is ready, the reports name the largest healthy "
             "subset that fits it and the nodes to exclude, and the exit code is 4 (never 0).")(f)


def parse(values: tuple[str, ...] | list[str] | None) -> Any:
    """The Shape of `--shape` values, None without one; exit 2 naming --shape and the key (the job's
    plan fills the keys they leave out once the run is prepared: preflight.run.shape.with_plan)."""
    from preflight.core.shape import ShapeError, parse as parse_shape

    try:
        return parse_shape(values or ())
    except ShapeError as exc:
        raise UsageProblem(str(exc)) from None
