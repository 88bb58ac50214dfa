"""Text from the machine made safe for Markdown, without HTML entities.

Markdown is read as it is (a chat message, a terminal, a pull-request comment) as often as it is
rendered, so nothing here writes `&gt;`: markup characters are escaped with a backslash, which
CommonMark and GitHub both honour and which reads naturally as plain text. `code` spans in the
text stay code spans.
"""

from __future__ import annotations

import re
from functools import lru_cache

from preflight.reporters.safe_text import block, single_line

# Inline markup characters, and the two that would start raw HTML or an entity. `>` and `#`, `-`,
# `+` only matter at the start of a line, and escaped text never starts one.
# An underscore inside a word (NCCL_DEBUG) starts no emphasis in CommonMark: it stays as it is.
_MD_SPECIAL = re.compile(r"([\\*\[\]|~<&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _escape_plain(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", text.replace("`", "'"))


def md_escape(text: object) -> str:
    """Make machine-produced text inert in Markdown: no markup, no raw HTML, no control characters, one line.

    A balanced `span` stays a code span (with its pipes escaped, which a table cell needs even
    there); a lone backtick becomes an apostrophe rather than a literal backtick."""
    return _md_escape(str(text if text is not None else ""))


@lru_cache(maxsize=8192)  # the same summaries and fixes come back once per node of a large run
def _md_escape(text: str) -> str:
    value = " ".join(single_line(text).split())
    parts = []
    last = 0
    for match in _CODE_SPAN.finditer(value):
        parts.append(_escape_plain(value[last:match.start()]))
        parts.append("`" + match.group(1).replace("|", "\\|") + "`")
        last = match.end()
    parts.append(_escape_plain(value[last:]))
    return "".join(parts)


def md_code_block(text: object) -> str:
    """A fenced block whose fence is longer than any run of backticks inside, so nothing escapes it."""
    value = block(text or "")
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{value.rstrip()}\n{fence}"
