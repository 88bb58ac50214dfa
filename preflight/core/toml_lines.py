"""Where a key is set in a TOML text (tomllib keeps no positions), for messages that name the line."""

from __future__ import annotations

import re


def line_of(text: str, dotted_key: str) -> int | None:
    """The line that sets a dotted key, tracking [tables] (tomllib keeps no positions).

    `timeout` under [checks."site.link"] is found there, not at the first `timeout` in the file.
    Falls back to the first line that sets the key's last part.
    """
    want = _normal_key(dotted_key)
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$", stripped)
        if header:
            table = _normal_key(header.group(1))
            if table == want:
                return number
            continue
        assignment = re.match(r'^((?:"[^"]*"|[A-Za-z0-9_.\- ]+?))\s*=', stripped)
        if assignment:
            key = _normal_key(assignment.group(1))
            if (f"{table}.{key}" if table else key) == want:
                return number
    last = dotted_key.rsplit(".", 1)[-1].strip('"')
    pattern = re.compile(rf'^\s*"?{re.escape(last)}"?\s*=|^\s*\[.*{re.escape(last)}"?\s*\]')
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.search(line):
            return number
    return None


def _normal_key(key: str) -> str:
    """`checks . "site.link" . min_gbps` -> `checks.site.link.min_gbps`."""
    return re.sub(r"\s*\.\s*", ".", key.replace('"', "").replace("'", "").strip())
