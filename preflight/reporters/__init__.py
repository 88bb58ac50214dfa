"""Reporters: pure functions RunReport -> text. They never run anything and never call each other.

Every format, the built-in ones too, is a plugin of the `preflight.reporters` entry-point group: the
entry point's name is the `--format` name, its value a module with `FILENAME` (the file it writes in
the output directory) and `render(report) -> str`. A module may also offer `write(report, file)`, which
writes the same text to an open file as it goes (results.json of a large run is streamed so). A team
adds a format with a package of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any, Callable, TextIO

from preflight.core.model import RunReport

GROUP = "preflight.reporters"
# Names in a run's directory that preflight itself keeps: the results as they arrive, the checks'
# scratch space, `preflight report --rejudge`'s folder, the link to the newest run. A reporter
# that declares one of these (or a path, or a name another format writes) is left out, with the
# reason, rather than overwrite the results it renders.
RESERVED_NAMES = ("results.jsonl", "scratch", "rejudged", "latest")


@dataclass(frozen=True)
class Reporter:
    name: str
    filename: str
    module: str
    distribution: str


class ReporterError(ValueError):
    """A format that is not installed, or a reporter plugin that does not load (the message names it)."""


@lru_cache(maxsize=1)
def _discovered() -> tuple[dict[str, Reporter], dict[str, str], tuple[dict[str, str], ...]]:
    """(format name -> Reporter, format name -> why it was left out, the plugins whose import failed),
    read once per process. A reporter's module is imported as a check's is (preflight.core.registry.
    contained): whatever it raises, or an import that hangs, leaves it out as a load error; a third
    party's is imported in a child first (preflight.transport.plugins), where ending its importer ends
    only the child."""
    from preflight.core.registry import PLUGIN_IMPORT_LIMIT_S, PluginLoadError, contained
    from preflight.transport.plugins import probe

    found: dict[str, Reporter] = {}
    refused: dict[str, str] = {}
    errors: list[dict[str, str]] = []
    deadline = time.monotonic() + 3 * PLUGIN_IMPORT_LIMIT_S
    # The built-in formats first, so that a plugin can never take over their files.
    entry_points = sorted(metadata.entry_points(group=GROUP),
                          key=lambda e: (not e.value.startswith("preflight.reporters."), e.name))
    third = [ep.name for ep in entry_points if not ep.value.startswith("preflight.reporters.")]
    probed: dict[str, Any] | None = None
    for ep in entry_points:
        if probed is None and not ep.value.startswith("preflight.reporters."):  # the built-in ones are in
            probed = probe(GROUP, third, max(0.0, deadline - time.monotonic()))
        dist = getattr(ep, "dist", None)
        origin = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "unknown distribution"
        module, _, _ = ep.value.partition(":")
        try:
            if probed and ep.name in probed and probed[ep.name].error:
                raise PluginLoadError(probed[ep.name].error)
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginLoadError(f"not imported: the formats before it used the {3 * PLUGIN_IMPORT_LIMIT_S:g} s "
                                      "all imports may take")
            filename = contained(lambda: _filename(module), min(PLUGIN_IMPORT_LIMIT_S, left))
        except PluginLoadError as exc:
            refused[ep.name] = f"the {ep.name} format of {origin} is left out: it failed to load ({exc})"
            errors.append({"entry_point": f"{ep.name} = {ep.value}", "distribution": origin,
                           "error": f"report format: {exc}"})
            continue
        if ep.name in found or not filename:
            continue  # a duplicate name or a module without FILENAME: left out, named on use
        problem = filename_problem(filename, {r.filename: r.name for r in found.values()})
        if problem:
            refused[ep.name] = f"the {ep.name} format of {origin} is left out: {problem}"
            continue
        found[ep.name] = Reporter(ep.name, filename, module, origin)
    return dict(sorted(found.items())), refused, tuple(errors)


def load_errors() -> list[dict[str, str]]:
    """The reporter plugins that failed to load (entry_point, distribution, error): a run records them
    with the checks' load errors, so its verdict is INCOMPLETE. Only once the formats were looked up
    in this process (`run` does, before it starts): a command that writes no report imports none."""
    if not _discovered.cache_info().currsize:
        return []
    return [dict(e) for e in _discovered()[2]]


def available() -> dict[str, Reporter]:
    """Format name -> Reporter, as the entry-point group yields them (read once per process)."""
    return _discovered()[0]


def refused() -> dict[str, str]:
    """Format name -> why its reporter is not used (a FILENAME that is a path, reserved or taken)."""
    return _discovered()[1]


def filename_problem(filename: str, taken: dict[str, str]) -> str:
    """Why a reporter may not write `filename` in a run's directory, or ""."""
    if filename in (".", "..") or "/" in filename or "\\" in filename or "\0" in filename:
        return f"its FILENAME {filename!r} is not a plain file name"
    if filename.startswith("."):
        return f"its FILENAME {filename!r} is a hidden file"
    if filename in RESERVED_NAMES:
        return f"its FILENAME {filename!r} is a name preflight keeps for itself ({', '.join(RESERVED_NAMES)})"
    if filename in taken:
        return f"its FILENAME {filename!r} is what the {taken[filename]} format writes"
    return ""


def _filename(module: str) -> str:
    import importlib

    return str(getattr(importlib.import_module(module), "FILENAME", "") or "")


def filename(fmt: str) -> str:
    return reporter(fmt).filename


def reporter(fmt: str) -> Reporter:
    try:
        return available()[fmt]
    except KeyError:
        if fmt in refused():
            raise ReporterError(refused()[fmt]) from None
        raise ReporterError(f"unknown report format {fmt!r}; installed: {', '.join(available())}") from None


def renderer(fmt: str) -> Callable[[RunReport], str]:
    import importlib

    return importlib.import_module(reporter(fmt).module).render  # type: ignore[no-any-return]


def writer(fmt: str) -> Callable[[RunReport, TextIO], None]:
    """A function that writes the format's text to an open file: the module's `write` when it has one."""
    import importlib

    module = importlib.import_module(reporter(fmt).module)
    write = getattr(module, "write", None)
    if callable(write):
        return write  # type: ignore[no-any-return]
    return lambda report, out: out.write(module.render(report))
