"""Drop a file's pages from the kernel's page cache, so the next read comes from storage.

Read figures are optimistic whenever the data is still cached (right after a write, unless the data
is larger than memory). POSIX_FADV_DONTNEED drops clean pages on local filesystems; tmpfs keeps them
(they are the storage) and some network filesystems ignore the advice.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def drop_page_cache(paths: Iterable[str | Path]) -> bool:
    """Advise the kernel to drop each file's cached pages; False where any file could not be."""
    dropped = True
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            dropped = False
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except (OSError, AttributeError):
            dropped = False
        finally:
            os.close(fd)
    return dropped


def files_under(path: str | Path) -> list[Path]:
    """The file itself, or every regular file below a directory."""
    path = Path(path)
    return [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
