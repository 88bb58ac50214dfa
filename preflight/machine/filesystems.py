"""Which filesystem holds a path: the one way preflight finds a filesystem type (psutil's view of
the mount table, with the escapes of /proc/self/mounts already undone)."""

from __future__ import annotations

import os


def filesystem_type(path: str | os.PathLike[str]) -> str | None:
    """The type of the mount that holds `path` ("nfs4", "lustre", "ext4", "tmpfs"); None if unknown."""
    import psutil

    try:
        target = os.path.realpath(path)
        partitions = psutil.disk_partitions(all=True)
    except OSError:
        return None
    best, best_type = "", None
    for partition in partitions:
        mount_point = partition.mountpoint
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, partition.fstype
    return best_type
