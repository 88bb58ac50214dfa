"""Checkpoint write speed: checkpoint.roundtrip's figure next to a plain torch.save + fsync of the same state.

    python bench/checkpoint_write.py [--size-mb 256] [--rounds 5] [--dir DIR]

Each round writes the same state once through the check's own measurement (temporary file, fsync,
rename, fsync of the directory; then read back and compared) and once as a bare `torch.save` plus
`fsync`, alternating which goes first so that neither always meets a warmer disk. Prints the medians
and their ratio; a ratio near 1.0 means the check reports what training code would see. The DCP
figure is printed alongside for reference. Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from preflight_checks.checkpoint.formats import roundtrip_format
from preflight_checks.checkpoint.state import build_state, pick_device
from preflight_checks.checkpoint.storage import GB


def plain_save_gbps(state: object, directory: Path) -> float:
    import torch

    path = directory / "plain.pt"
    start = time.perf_counter()
    torch.save(state, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - start
    size = path.stat().st_size
    path.unlink()
    return size / seconds / GB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=256.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    device = pick_device(args.device)
    state = build_state(args.size_mb, seed=0, device=device)
    workdir = Path(tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.dir))
    check_figures, dcp_figures, plain_figures = [], [], []
    try:
        for round_number in range(args.rounds):
            if round_number % 2 == 0:
                check_figures += roundtrip_format("torch.save", state, workdir, 1, device)["write_gbps_samples"]
                plain_figures.append(plain_save_gbps(state, workdir))
            else:
                plain_figures.append(plain_save_gbps(state, workdir))
                check_figures += roundtrip_format("torch.save", state, workdir, 1, device)["write_gbps_samples"]
            dcp_figures += roundtrip_format("dcp", state, workdir, 1, device)["write_gbps_samples"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    check = statistics.median(check_figures)
    plain = statistics.median(plain_figures)
    dcp = statistics.median(dcp_figures)
    print(f"state: {args.size_mb:g} MB on {device}, {args.rounds} rounds, in {args.dir or tempfile.gettempdir()}")
    print(f"{'':34}{'median GB/s':>12}  samples")
    print(f"{'checkpoint.roundtrip torch.save':34}{check:12.3f}  {', '.join(f'{v:.3f}' for v in check_figures)}")
    print(f"{'plain torch.save + fsync':34}{plain:12.3f}  {', '.join(f'{v:.3f}' for v in plain_figures)}")
    print(f"{'checkpoint.roundtrip DCP':34}{dcp:12.3f}  {', '.join(f'{v:.3f}' for v in dcp_figures)}")
    print(f"ratio checkpoint.roundtrip / plain: {check / plain:.2f}")


if __name__ == "__main__":
    main()
