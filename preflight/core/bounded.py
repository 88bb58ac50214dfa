"""Reading what a user hands preflight in bounded work, whatever the file holds.

Every file preflight reads from a user (results.json and results.jsonl, a baseline, preflight.toml,
a hosts file, a saved `kubectl get nodes`, Prometheus rule files) goes through here, so that no file
can cost a traceback, minutes or the machine's memory:

- `read_text` reads at most `limit` bytes: a regular file larger than that is refused from its size
  before a byte is read, a pipe is read up to the limit, and a device, a directory or a socket
  (`/dev/zero`, `/dev/urandom`) is refused without reading.
- `load_json` is the json module with the nesting bounded: a document nested deeper than
  `MAX_DEPTH` is refused (JSON 100,000 levels deep would otherwise end in RecursionError, here or
  in whatever walks the document next).
- `load_yaml_all` reads YAML with libyaml where it is installed (30x faster than the pure-Python
  reader), refuses anchors and aliases (a "billion laughs" document expands a few lines into
  billions of nodes for whoever walks it) and bounds the nesting as `load_json` does.
- `load_json_or_yaml` reads JSON as JSON (a text that starts with `{` or `[`), else as YAML.
- `load_toml` is tomllib with the nesting bounded (tomllib recurses too).

Every error is InputError, whose message names the file, for the command to turn into exit 2.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

MAX_DEPTH = 64  # levels of nesting; a Kubernetes NodeList is 8 deep, a results.json about 10
MiB = 1024 * 1024
MAX_PURE_PYTHON_YAML = 8 * MiB  # what PyYAML's own (pure-Python) reader gets through in seconds


class InputError(ValueError):
    """A file that cannot be read in bounded work; str() names the file and what is wrong."""

    def __init__(self, where: str, reason: str, unreadable: bool = False) -> None:
        super().__init__(f"{where}: cannot be read: {reason}" if unreadable else f"{where}: {reason}")
        self.where, self.reason, self.unreadable = where, reason, unreadable

    def said(self) -> str:
        """The reason without the file's name, as messages that name the file themselves want it."""
        return f"cannot read: {self.reason}" if self.unreadable else self.reason


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: str | os.PathLike[str], limit: int, what: str = "") -> bytes:
    """At most `limit` bytes of a regular file or a pipe; InputError naming the file otherwise."""
    name = what or os.fspath(path)
    try:
        # A pipe is opened as `cat` opens it (waiting for its writer); anything else without waiting,
        # and what turns out to be no regular file at open is refused there (a device swapped in).
        fifo = stat.S_ISFIFO(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (0 if fifo else getattr(os, "O_NONBLOCK", 0)))
    except OSError as exc:
        raise InputError(name, exc.strerror or str(exc), unreadable=True) from None
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or (fifo and stat.S_ISFIFO(info.st_mode))):
            raise InputError(name, f"{_kind(info.st_mode)}, not a file", unreadable=True)
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise InputError(name, f"{info.st_size:,} bytes, over the limit of {limit:,} for this file")
        chunks, total = [], 0
        step = max(MiB, info.st_size + 1) if stat.S_ISREG(info.st_mode) else MiB  # a file: one read
        while total <= limit:
            chunk = os.read(fd, min(step, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise InputError(name, exc.strerror or str(exc), unreadable=True) from None
    finally:
        os.close(fd)
    if total > limit:
        raise InputError(name, f"over the limit of {limit:,} bytes for this file")
    return b"".join(chunks)


def read_text(path: str | os.PathLike[str], limit: int, what: str = "") -> str:
    """The UTF-8 text of a file of at most `limit` bytes (see read_bytes); InputError naming it otherwise."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(what or os.fspath(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def too_deep(data: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts in `data` (as json and yaml build them) nest deeper than `max_depth`; one
    pass, level by level, no recursion (about a second for a 20,000-node NodeList: the loops are kept
    plain for that)."""
    level = [data] if isinstance(data, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        below: list[Any] = []
        add = below.append
        for item in level:
            for value in item.values() if isinstance(item, dict) else item:
                if type(value) is dict or type(value) is list:  # what json and yaml build; no subclass
                    add(value)
        level = below
    return False


class TooDeep(InputError):
    """A document nested deeper than preflight reads."""


def _deep(where: str, max_depth: int) -> InputError:
    return TooDeep(where, f"nested deeper than {max_depth} levels; not a document preflight reads")


def load_json(text: str | bytes, where: str, max_depth: int = MAX_DEPTH, **options: Any) -> Any:
    """json.loads with the nesting bounded; InputError naming `where` for what is not JSON or nests too deep."""
    try:
        data = json.loads(text, **options)
    except RecursionError:
        raise _deep(where, max_depth) from None
    except ValueError as exc:  # JSONDecodeError, and bytes that are not UTF-8
        raise InputError(where, f"not JSON: {exc}") from None
    if too_deep(data, max_depth):
        raise _deep(where, max_depth)
    return data


def load_toml(text: str, where: str, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """tomllib.loads with the nesting bounded (tomllib recurses: `x = [[[[...` 100,000 deep is a
    RecursionError); TooDeep naming `where`, TOMLDecodeError as tomllib raises it."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise _deep(where, max_depth) from None
    if too_deep(data, max_depth):
        raise _deep(where, max_depth)
    return data


def _check_nodes(root: Any, where: str, max_depth: int) -> None:
    """Refuse a composed YAML document that shares a node (an alias) or nests deeper than `max_depth`."""
    import yaml

    seen: set[int] = set()
    level, depth = [root], 0
    while level:
        depth += 1
        if depth > max_depth:
            raise _deep(where, max_depth)
        below = []
        for node in level:
            if id(node) in seen:
                raise InputError(where, "YAML anchors and aliases (&name, *name) are not read: one alias can "
                                 "stand for billions of nodes; write the values out")
            seen.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                below.extend(node.value)
            elif isinstance(node, yaml.MappingNode):
                below.extend(part for pair in node.value for part in pair)
        level = below


def load_yaml_all(text: str, where: str, max_depth: int = MAX_DEPTH) -> list[Any]:
    """Every document of a YAML text, read with libyaml where installed; no aliases, nesting bounded;
    InputError naming `where` otherwise."""
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)
    if fast is None and len(text) > MAX_PURE_PYTHON_YAML:
        raise InputError(where, f"{len(text):,} characters of YAML, and PyYAML here has no libyaml: over "
                                f"{MAX_PURE_PYTHON_YAML:,} would take minutes; save it as JSON")
    loader = (fast or yaml.SafeLoader)(text)
    docs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            _check_nodes(node, where, max_depth)
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        raise InputError(where, f"not YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise _deep(where, max_depth) from None
    finally:
        loader.dispose()
    return docs


def load_json_or_yaml(text: str, where: str, max_depth: int = MAX_DEPTH) -> list[Any]:
    """The documents of a text that is JSON (read as JSON when it starts with `{` or `[`) or YAML."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [load_json(text, where, max_depth)]
        except TooDeep:
            raise
        except InputError:
            pass  # YAML in flow style, `{a: 1}`, starts with { too
    return load_yaml_all(text, where, max_depth)
