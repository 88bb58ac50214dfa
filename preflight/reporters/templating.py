"""The jinja2 environment shared by the Markdown and HTML reporters (templates live in templates/)."""

from __future__ import annotations

import re
from functools import lru_cache

import jinja2
import markupsafe

from preflight.core.nodeset import fold
from preflight.reporters import view
from preflight.reporters.markdown_text import md_code_block, md_escape
from preflight.reporters.numbers import change, count, duration, percent, quantity

_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def html_text(text: object) -> markupsafe.Markup:
    """Escaped text whose `code spans` show as code rather than as literal backticks."""
    if isinstance(text, str) and not isinstance(text, markupsafe.Markup):
        return _html_text(str(text))
    escaped = str(markupsafe.escape(text if text is not None else ""))
    return markupsafe.Markup(_CODE_SPAN.sub(r"<code>\1</code>", escaped))


@lru_cache(maxsize=8192)  # the same summaries and fixes come back once per node of a large run
def _html_text(text: str) -> markupsafe.Markup:
    return markupsafe.Markup(_CODE_SPAN.sub(r"<code>\1</code>", str(markupsafe.escape(text))))


def breakable(text: object) -> markupsafe.Markup:
    """Escaped text that a narrow column may break after a dot or an underscore only (an id such as
    `dataloader.throughput` breaks as `dataloader.` / `throughput`, never inside a word)."""
    escaped = str(markupsafe.escape(text if text is not None else ""))
    return markupsafe.Markup(re.sub(r"([._])", r"\1<wbr>", escaped))


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
    env.filters["quantity"] = quantity
    env.filters["percent"] = percent
    env.filters["change"] = change
    env.filters["duration"] = duration
    env.filters["text"] = html_text
    env.filters["nodeset"] = fold
    env.filters["breakable"] = breakable
    env.globals["count"] = count
    return env
