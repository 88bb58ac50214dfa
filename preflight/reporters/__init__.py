"""Reporters: pure functions RunReport -> text. They never run anything and never call each other."""

from __future__ import annotations

from typing import Callable

from preflight.core.model import RunReport

# format name -> (file name, module path of a `render(report) -> str` function)
FORMATS: dict[str, tuple[str, str]] = {
    "json": ("results.json", "preflight.reporters.json_report"),
    "md": ("report.md", "preflight.reporters.markdown"),
    "html": ("report.html", "preflight.reporters.html"),
    "junit": ("junit.xml", "preflight.reporters.junit"),
    "prometheus": ("preflight.prom", "preflight.reporters.prometheus"),
}
DEFAULT_FORMATS = ("html", "md", "json", "junit")


def renderer(fmt: str) -> Callable[[RunReport], str]:
    import importlib

    return importlib.import_module(FORMATS[fmt][1]).render  # type: ignore[no-any-return]
