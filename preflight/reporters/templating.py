"""The jinja2 environment shared by the Markdown and HTML reporters (templates live in templates/)."""

from __future__ import annotations

import re
from functools import lru_cache

import jinja2

from preflight.reporters import view

# Inline markup characters; the rest (#, -, +, >) only matter at the start of a line, and escaped
# text never starts one.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: object) -> str:
    """Make machine-produced text inert in Markdown: no markup, no raw HTML, one line."""
    value = str(text if text is not None else "")
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    value = _MD_SPECIAL.sub(r"\\\1", value)
    return " ".join(value.split())


def md_code_block(text: object) -> str:
    """A fenced block whose fence is longer than any run of backticks inside, so nothing escapes it."""
    value = str(text or "")
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{value.rstrip()}\n{fence}"


@lru_cache(maxsize=2)
def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("preflight_templates", ""),
        autoescape=autoescape,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md"] = md_escape
    env.filters["md_code"] = md_code_block
    env.filters["value"] = view.format_value
    env.filters["threshold"] = view.format_threshold
    env.filters["spread"] = view.format_spread
    return env
