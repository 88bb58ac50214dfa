"""Files for dataloader.throughput: listing, the synthetic set, and the dataset its loader workers run.

Imported by the check, by torch DataLoader worker processes (which unpickle `FileDataset` and
`collate_raw` from here) and by the tf.data worker; it imports neither torch nor tensorflow at load.

A synthetic sample is a small header and raw uint8 pixels, like a decoded image. Reading one
means reading its bytes from storage; decoding it means turning them into a normalised float tensor,
which stands in for the JPEG decode and augmentation of a real pipeline.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SYNTHETIC_MAGIC = b"PFS1"
SYNTHETIC_HEADER = struct.Struct("<4sHHH2x")  # magic, channels, height, width, padding: 12 bytes
SYNTHETIC_SUFFIX = ".sample"


def write_synthetic(directory: Path, count: int, shape: tuple[int, int, int], seed: int = 0) -> list[Path]:
    """Write count synthetic samples of shape (channels, height, width) under directory."""
    import numpy as np

    rng = np.random.default_rng(seed)
    channels, height, width = shape
    header = SYNTHETIC_HEADER.pack(SYNTHETIC_MAGIC, channels, height, width)
    payload = channels * height * width
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    # Directories of 1000 files, as sharded datasets are usually laid out.
    for index in range(count):
        sub = directory / f"{index // 1000:04d}"
        if index % 1000 == 0:
            sub.mkdir(exist_ok=True)
        path = sub / f"{index:07d}{SYNTHETIC_SUFFIX}"
        with open(path, "wb") as handle:
            handle.write(header)
            handle.write(rng.bytes(payload))
        paths.append(path)
    return paths


def decode_synthetic(data: bytes) -> Any:
    """Header and pixels -> float32 array (channels, height, width), normalised to mean 0, std ~1."""
    import numpy as np

    magic, channels, height, width = SYNTHETIC_HEADER.unpack_from(data)
    if magic != SYNTHETIC_MAGIC:
        raise ValueError("not a synthetic sample")
    pixels = np.frombuffer(data, dtype=np.uint8, offset=SYNTHETIC_HEADER.size, count=channels * height * width)
    return (pixels.reshape(channels, height, width).astype(np.float32) - 127.5) / 73.9


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


class FileDataset:
    """Map-style dataset over files: each sample is one file, read for real on every access.

    decode=True: synthetic samples, decoded to float tensors (stackable into a batch).
    decode=False: the raw bytes as a uint8 tensor (files of any format and size).
    Each item is (tensor, bytes read).
    """

    def __init__(self, paths: list[str], decode: bool) -> None:
        self.paths = list(paths)
        self.decode = decode

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch

        data = read_bytes(self.paths[index])
        if self.decode:
            return torch.from_numpy(decode_synthetic(data)), len(data)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8), len(data)


def collate_raw(batch: list[tuple[Any, int]]) -> tuple[list[Any], int]:
    """Batches of files of different sizes cannot be stacked: keep a list, and the bytes read."""
    return [item[0] for item in batch], sum(item[1] for item in batch)


def drop_cache(paths: list[str]) -> bool:
    """Drop each file's cached pages, so a pass reads from storage and not from memory."""
    from preflight.machine.pagecache import drop_page_cache

    return drop_page_cache(paths)


def iter_files(root: Path, pattern: str) -> Iterator[tuple[str, int]]:
    """(path, size) of every regular file under root matching pattern (a pathlib glob)."""
    for path in root.glob(pattern):
        try:
            stat = path.stat()
        except OSError:
            continue
        if path.is_file():
            yield str(path), stat.st_size


def list_files(root: Path, pattern: str, limit: int) -> tuple[list[str], list[int], bool]:
    """At most limit files: (paths, sizes, truncated)."""
    paths: list[str] = []
    sizes: list[int] = []
    for path, size in iter_files(root, pattern):
        if len(paths) >= limit:
            return paths, sizes, True
        paths.append(path)
        sizes.append(size)
    return paths, sizes, False


def percentile(sorted_values: list[int], fraction: float) -> int | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), int(-(-fraction * len(sorted_values) // 1))))
    return sorted_values[rank - 1]


def size_distribution(sizes: list[int]) -> dict[str, int | None]:
    ordered = sorted(sizes)
    return {
        "count": len(ordered),
        "total_bytes": sum(ordered),
        "median_bytes": percentile(ordered, 0.5),
        "p10_bytes": percentile(ordered, 0.1),
        "p90_bytes": percentile(ordered, 0.9),
    }
