"""Writing preflight's own files without writing through anything planted in their place.

- A report is written to a temporary file in the same directory, synced, then renamed over its
  name: a symbolic link (or a hard link) found at that name is replaced, never followed, and a
  reader never sees a half-written report. A disk that fills up leaves no 0-byte report behind.
- results.jsonl, appended to as results arrive, is opened with O_NOFOLLOW: a symbolic link planted
  at its name is an error, not a way to write somewhere else.

Errors are FileWriteError naming the path, for the command to turn into exit 2.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import IO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class FileWriteError(OSError):
    """A file preflight could not write; str() names the path and the reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path = str(path)

    def __str__(self) -> str:
        return str(self.args[0])


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def user_file_mode() -> int:
    """The mode a new file gets under the user's umask (0o644 under the usual 022), as open() gives it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)  # where /proc is not there: read it by setting it, and put it back at once
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and a rename; the file
    gets the user's umask like any file a program writes (the temporary file alone would be 0600)."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        raise FileWriteError(target, "a directory has that name")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise FileWriteError(target, _reason(exc)) from None
    try:
        os.fchmod(fd, user_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise FileWriteError(target, _reason(exc)) from None


def open_log(path: str | Path) -> IO[str]:
    """results.jsonl, opened for appending; never through a symbolic link at its name."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | _NOFOLLOW, 0o644)
    except OSError as exc:
        reason = "a symbolic link has that name" if exc.errno == errno.ELOOP else _reason(exc)
        raise FileWriteError(path, reason) from None
    return os.fdopen(fd, "w", encoding="utf-8")
