"""Where checkpoints go: what a storage error means, the filesystem type, fsync, the page cache.

A read-only, missing or full directory is a finding with a plain message, not a traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

GB = 1e9
MB = 1e6
# Headroom over the largest single checkpoint, for filesystem overhead and the resume test's files.
FREE_SPACE_FACTOR = 1.2


_ERRNO_KINDS = {
    errno.EROFS: "read_only",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.ENOENT: "missing",
    errno.ENOTDIR: "not_a_directory",
    errno.ENOSPC: "full",
    errno.EDQUOT: "quota",
}
# torch.save to a path reports write errors from C++ without an errno; its message carries strerror.
_TEXT_KINDS = (
    ("Read-only file system", "read_only"),
    ("No space left on device", "full"),
    ("Disk quota exceeded", "quota"),
    ("Permission denied", "permission"),
)


def storage_problem_kind(exc: BaseException | None, free_bytes: int | None = None) -> str | None:
    """What kind of storage problem an exception from writing a checkpoint means, or None."""
    seen = set()
    texts = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(exc, "errno", None)
        if code in _ERRNO_KINDS:
            return _ERRNO_KINDS[code]
        texts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    text = " ".join(texts)
    for needle, kind in _TEXT_KINDS:
        if needle in text:
            return kind
    # C++ writers sometimes say only "file write failed"; an empty filesystem explains it.
    if free_bytes is not None and free_bytes < 64 * 1024 and "write" in text.lower():
        return "full"
    return None


def storage_message(kind: str, path: str, free_bytes: int | None = None, needed_bytes: int | None = None) -> str:
    if kind == "read_only":
        return f"checkpoint directory {path} is on a read-only filesystem: training cannot save checkpoints there"
    if kind == "permission":
        return f"checkpoint directory {path} is not writable: permission denied"
    if kind == "missing":
        return f"checkpoint directory {path} does not exist"
    if kind == "not_a_directory":
        return f"checkpoint path {path} is not a directory"
    if kind in ("full", "quota"):
        what = "disk quota exceeded" if kind == "quota" else "no space left on device"
        text = f"checkpoint directory {path} is full ({what})"
        if free_bytes is not None and needed_bytes is not None:
            text += f": {free_bytes / MB:.1f} MB free, the check needs about {needed_bytes / MB:.1f} MB"
        return text
    return f"cannot write checkpoints to {path}"


def free_bytes(path: str | Path) -> int | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: str | Path) -> None:
    fsync_file(path)  # opening a directory read-only and fsyncing it persists its entries on Linux


def drop_page_cache(path: str | Path) -> bool:
    """Drop the cached pages of a checkpoint (a file or a directory); False where it cannot."""
    from preflight.machine.pagecache import drop_page_cache as drop, files_under

    return drop(files_under(path))


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def storage_kind_from_text(text: str, code: int | None = None) -> str | None:
    if code in _ERRNO_KINDS and _ERRNO_KINDS[code] != "missing":
        return _ERRNO_KINDS[code]
    for needle, kind in _TEXT_KINDS:
        if needle in (text or ""):
            return kind
    return None
