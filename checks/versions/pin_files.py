"""The formats of pin files beyond requirements lines, for preflight_checks.versions.pins. Pure functions.

TOML files (pyproject.toml, uv.lock, poetry.lock) are read by tomllib; this module finds the line
each value came from by walking the tables and arrays in order, so the same requirement string in
[project] dependencies and in an extra gets its own line, and a uv.lock package is found at its own
[[package]] table, never at an inline `{ name = "torch" }` dependency of another package. Poetry's
constraint syntax and conda's match specs are translated to PEP 440 specifiers.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

_TABLE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_ARRAY_TABLE = re.compile(r"^\s*\[\[\s*([^\[\]]+?)\s*\]\]\s*(?:#.*)?$")


def _table_name(text: str) -> str:
    return ".".join(part.strip().strip('"').strip("'") for part in text.split("."))


_KEY = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([^\s="'][^=]*?))\s*=""")
_QUOTED = re.compile(r""""([^"\n]*)"|'([^'\n]*)'""")


class QuotedStrings:
    """Where each quoted string of a text is: its lines, in order, found in one pass. Looking a value
    up costs a dictionary lookup and a bisection, so finding the line of each of 20,000 pins written
    on one line is linear, not 20,000 scans of that line."""

    def __init__(self, lines: list[str]) -> None:
        self.double: dict[str, list[int]] = {}
        self.single: dict[str, list[int]] = {}
        for number, line in enumerate(lines, start=1):
            if '"' not in line and "'" not in line:
                continue
            for found in _QUOTED.finditer(line):
                double, single = found.groups()
                table, value = (self.double, double) if double is not None else (self.single, single)
                places = table.setdefault(value, [])
                if not places or places[-1] != number:
                    places.append(number)

    def first(self, value: str, start: int = 1) -> int:
        """The first line at or after `start` holding `"value"` (else `'value'`); 0 when none does."""
        for table in (self.double, self.single):
            places = table.get(value)
            if places:
                at = bisect.bisect_left(places, start)
                if at < len(places):
                    return places[at]
        return 0


class TomlLines:
    """Line numbers (1-based) of tables, keys and array items in a TOML text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.tables: dict[str, int] = {}
        self.array_tables: dict[str, list[int]] = {}
        self._headers: list[int] = []  # every [table] and [[table]] line, in order
        self._keys: dict[int, dict[str, int]] = {}  # a table's first line -> its keys' lines, found once
        self._strings: QuotedStrings | None = None
        for number, line in enumerate(self.lines, start=1):
            found = _ARRAY_TABLE.match(line)
            if found:
                self.array_tables.setdefault(_table_name(found.group(1)), []).append(number)
                self._headers.append(number)
                continue
            found = _TABLE.match(line)
            if found:
                self.tables.setdefault(_table_name(found.group(1)), number)
                self._headers.append(number)

    def _table_end(self, start: int) -> int:
        after = bisect.bisect_right(self._headers, start)
        return self._headers[after] if after < len(self._headers) else len(self.lines) + 1

    def key(self, table: str, key: str, start: int | None = None) -> int:
        """The line of `key =` inside [table] (or the table starting at `start`); 0 when not found."""
        first = start if start is not None else self.tables.get(table)
        if first is None:
            if table == "":
                first = 0
            else:
                return 0
        keys = self._keys.get(first)
        if keys is None:  # every key of this table, in one pass over it
            keys = {}
            for number in range(first + 1, self._table_end(first) if first else len(self.lines) + 1):
                found = _KEY.match(self.lines[number - 1])
                if found:
                    keys.setdefault(next(g for g in found.groups() if g is not None), number)
            self._keys[first] = keys
        return keys.get(key, 0)

    def items(self, start: int, values: list[str]) -> list[int]:
        """Lines of each string of an array, in order, from the line its key is on."""
        if self._strings is None:
            self._strings = QuotedStrings(self.lines)
        found, cursor = [], max(start, 1)
        for value in values:
            number = self._strings.first(value, cursor)
            found.append(number)
            cursor = number or cursor
        return found


# ------------------------------------------------------------------------------------------ Poetry

def _release(version: str) -> list[int] | None:
    from packaging.version import InvalidVersion, Version

    try:
        return list(Version(version).release)
    except InvalidVersion:
        return None


def _public(version: str) -> str:
    """"2.3.1" from "2.3.1+cu121": PEP 440 allows a local label only with == and !=, and >=2.3.1
    admits 2.3.1+cu121 (a local label is ignored by ordered comparisons)."""
    return version.split("+", 1)[0]


def _caret(version: str) -> str:
    version = _public(version)
    parts = _release(version)
    if not parts:
        return ""
    nonzero = next((i for i, part in enumerate(parts) if part != 0), None)
    if nonzero is not None:
        upper = parts[:nonzero] + [parts[nonzero] + 1]
    else:
        upper = [1] if len(parts) == 1 else parts[:-1] + [parts[-1] + 1]
    return f">={version},<{'.'.join(str(p) for p in upper)}"


def _tilde(version: str) -> str:
    version = _public(version)
    parts = _release(version)
    if not parts:
        return ""
    upper = [parts[0] + 1] if len(parts) == 1 else [parts[0], parts[1] + 1]
    return f">={version},<{'.'.join(str(p) for p in upper)}"


def poetry_specifier(constraint: str) -> str | None:
    """A PEP 440 specifier for a Poetry constraint; "" for any version, None when it cannot be said.

    Poetry: "^1.2.3" is >=1.2.3,<2.0.0 (the left-most non-zero part may not change), "~1.2.3" is
    >=1.2.3,<1.3.0, "1.2.3" alone is ==1.2.3, "1.2.*" a prefix; "||" (either) has no PEP 440 form.
    """
    text = constraint.strip()
    if text in ("", "*"):
        return ""
    if "||" in text or "|" in text:
        return None
    out = []
    for part in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", text):
        part = part.strip()
        if not part:
            continue
        if part.startswith("^"):
            converted = _caret(part[1:].strip())
        elif part.startswith("~") and not part.startswith("~="):
            converted = _tilde(part[1:].strip())
        elif re.match(r"^[0-9]", part):
            converted = f"=={part}"
        else:
            converted = re.sub(r"^([<>=!~]+)\s+", r"\1", part)
        if not converted:
            return None
        out.append(converted)
    return ",".join(out)


# ------------------------------------------------------------------------------------------ conda

def conda_spec(spec: str) -> dict[str, Any] | None:
    """name, PEP 440 specifier and build of a conda match spec; None when it is not one we can read.

    conda's rules (conda/models/match_spec.py, _parse_spec_str): "pkg=1.2.3" is fuzzy, 1.2.3.*;
    "pkg==1.2.3" is exact; with a build string, "pkg=1.2.3=py3.10_cuda12.1_0" pins 1.2.3 exactly;
    "channel::pkg", "pkg 1.2.3 build" (spaces) and ranges (">=1.2,<2") are accepted too.
    """
    text = spec.strip().strip("'\"")
    if not text or "[" in text:
        return None
    channel, _, text = text.rpartition("::")
    found = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", text)
    if not found:
        return None
    name, rest = found.group(1), found.group(2).strip()
    spaced_build = None
    if rest and " " in rest and not re.search(r"[<>!,|]", rest):
        rest, _, spaced_build = rest.partition(" ")
        rest = rest if rest.startswith(("=", "<", ">", "!")) else "==" + rest
    build = None
    if rest[:1].isdigit():
        rest = "==" + rest  # "numpy 1.19.*": a bare version
    if not rest:
        return {"name": name, "specifier": "", "build": None, "exact": None, "channel": channel or None}
    if rest.startswith("=") and not rest.startswith("=="):
        version, _, build = rest[1:].partition("=")
        version = version.strip()
        if not version or re.search(r"[,|<>!]", version):
            return None
        if version.strip("*.") == "":
            specifier = ""
        else:
            specifier = f"=={version}" if build else f"=={version.rstrip('*').rstrip('.')}.*"
    elif rest.startswith("=="):
        version, _, build = rest[2:].partition("=")
        specifier = f"=={version.strip()}"
    elif "|" in rest:
        return None
    else:
        specifier = rest.replace(" ", "")
    if specifier.startswith("==") and not specifier.endswith(".*") and "*" in specifier:
        specifier = specifier.rstrip("*").rstrip(".") + ".*"
    exact = specifier[2:] if specifier.startswith("==") and "*" not in specifier and "," not in specifier else None
    return {"name": name, "specifier": specifier, "build": build or spaced_build or None, "exact": exact,
            "channel": channel or None}


def yaml_sequence_lines(text: str, key: str) -> list[tuple[int, Any, list[tuple[int, str]] | None]]:
    """(line, item, sub-list) for each item of the top-level `key:` sequence of a YAML document.

    The sub-list is the `pip:` list of a mapping item, each string with its own line. Lines are
    1-based, from PyYAML's node marks. Raises ValueError when the text is not YAML of that shape."""
    import yaml  # PyYAML: only the conda reader needs it

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 30x faster
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc
    if root is None or not isinstance(root, yaml.MappingNode):
        raise ValueError("not a mapping at the top")
    out: list[tuple[int, Any, list[tuple[int, str]] | None]] = []
    for key_node, value_node in root.value:
        if key_node.value != key:
            continue
        if not isinstance(value_node, yaml.SequenceNode):
            raise ValueError(f"{key}: is not a list")
        for item in value_node.value:
            line = item.start_mark.line + 1
            if isinstance(item, yaml.ScalarNode):
                out.append((line, item.value, None))
            elif isinstance(item, yaml.MappingNode):
                for sub_key, sub_value in item.value:
                    subs = [(n.start_mark.line + 1, n.value) for n in getattr(sub_value, "value", [])
                            if isinstance(n, yaml.ScalarNode)] if isinstance(sub_value, yaml.SequenceNode) else []
                    out.append((line, sub_key.value, subs))
    return out


def is_conda_environment(text: str) -> bool:
    """A YAML file with a top-level `dependencies:` list is a conda environment, whatever its name."""
    return re.search(r"(?m)^dependencies\s*:", text) is not None
