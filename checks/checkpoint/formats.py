"""Writing and reading a state with torch.save and torch.distributed.checkpoint, timed; and an old
checkpoint the team keeps, which must still load.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from preflight_checks.checkpoint.state import blank_like, compare_states, count_tensors, flatten, is_tensor
from preflight_checks.checkpoint.storage import GB, drop_page_cache, fsync_directory, tree_bytes


def _sync_device(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def save_torch(state: Any, path: Path) -> int:
    """torch.save as training should do it: temporary file, fsync, rename, fsync of the directory."""
    import torch

    tmp = path.with_name(path.name + ".tmp")
    try:
        # Through a Python file object: a failed write then raises OSError with its errno, and the
        # file is closed on the way out instead of whenever the C++ writer is collected.
        with open(tmp, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.replace(tmp, path)
    fsync_directory(path.parent)
    return path.stat().st_size


def load_torch(path: Path, device: str) -> Any:
    import torch

    return torch.load(path, map_location=device, weights_only=True)


def _dcp_kwargs(function: Any) -> dict[str, Any]:
    import inspect

    # Recent torch takes no_dist; older ones (before 2.4) detect the missing process group themselves.
    return {"no_dist": True} if "no_dist" in inspect.signature(function).parameters else {}


def save_dcp(state: Any, directory: Path) -> int:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        # FileSystemWriter fsyncs each file it writes (sync_files=True by default).
        dcp.save(state, checkpoint_id=str(directory), **_dcp_kwargs(dcp.save))
    fsync_directory(directory)
    return tree_bytes(directory)


def load_dcp(target: Any, directory: Path) -> Any:
    """Load in place into target (a state of the right structure, see blank_like) and return it, with
    the reader that unpickles nothing but DCP metadata (the directory may be on shared storage)."""
    from preflight_checks.checkpoint.dcp_safe import load_into

    return load_into(target, directory)


def roundtrip_format(fmt: str, state: Any, workdir: Path, repeats: int, device: str) -> dict[str, Any]:
    """Write, drop from the page cache, read and compare `repeats` times; keep every sample."""
    samples: list[dict[str, Any]] = []
    leaves, mismatches = 0, []
    for repeat in range(max(1, repeats)):
        target = workdir / (f"state-{repeat}.pt" if fmt == "torch.save" else f"dcp-{repeat}")
        _sync_device(device)
        start = time.perf_counter()
        written = save_torch(state, target) if fmt == "torch.save" else save_dcp(state, target)
        write_s = time.perf_counter() - start
        cache_dropped = drop_page_cache(target)
        # Training loads DCP checkpoints into a state it has already built: allocate it untimed.
        into = blank_like(state) if fmt == "dcp" else None
        start = time.perf_counter()
        loaded = load_torch(target, device) if fmt == "torch.save" else load_dcp(into, target)
        _sync_device(device)
        read_s = time.perf_counter() - start
        leaves, problems = compare_states(state, loaded)
        if problems and not mismatches:
            mismatches = problems
        del loaded
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        samples.append({"bytes": written, "write_s": write_s, "read_s": read_s, "cache_dropped": cache_dropped})
    return {
        "bytes": samples[0]["bytes"],
        "leaves_compared": leaves,
        "mismatches": mismatches,
        "write_gbps_samples": [s["bytes"] / s["write_s"] / GB for s in samples],
        "read_gbps_samples": [s["bytes"] / s["read_s"] / GB for s in samples],
        "cache_dropped": all(s["cache_dropped"] for s in samples),
    }


def _trusted_dcp_state(source: Path, scratch: Path) -> Any:
    """torch's own conversion (it unpickles the metadata fully), then a weights_only load of the result."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from preflight_checks.checkpoint.dcp_safe import through_torch

    converted = Path(tempfile.mkdtemp(prefix="compat-", dir=scratch)) / "converted.pt"
    try:
        through_torch(lambda: dcp_to_torch_save(str(source), str(converted)))
        return torch.load(converted, map_location="cpu", weights_only=True)
    finally:
        shutil.rmtree(converted.parent, ignore_errors=True)


def compat_test(path: str, scratch: Path, trusted: bool = False) -> dict[str, Any]:
    """Load the team's old checkpoint as training would, executing nothing it contains: a torch.save
    file with weights_only=True, a DCP directory through preflight_checks.checkpoint.dcp_safe. Only
    with `trusted` (compat_trusted = true) does torch's own DCP reader unpickle its metadata."""
    import torch

    from preflight_checks.checkpoint.dcp_safe import Refused, read_state

    source = Path(path)
    facts: dict[str, Any] = {"path": path, "trusted": trusted}
    if not source.exists():
        return {**facts, "error": f"{path} does not exist"}
    try:
        if source.is_dir():
            facts["format"] = "torch.distributed.checkpoint"
            state = _trusted_dcp_state(source, scratch) if trusted else read_state(source)
        else:
            facts["format"] = "torch.save"
            state = torch.load(source, map_location="cpu", weights_only=True)
    except Refused as exc:
        return {**facts, "refused": True,
                "error": f"it names {exc}, which preflight does not unpickle from a checkpoint it did not write"}
    except Exception as exc:  # noqa: BLE001 - an unreadable old checkpoint is the finding itself
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {**facts, "error": f"torch.load(weights_only=True) failed with {type(exc).__name__}: {first_line}"}
    tensors, data_bytes = count_tensors(state)
    leaves = flatten(state)
    facts.update({
        "top_level_keys": [str(k) for k in state][:20] if isinstance(state, dict) else [],
        "type": type(state).__name__,
        "tensors": tensors,
        "tensor_bytes": data_bytes,
        "dtypes": sorted({str(v.dtype).replace("torch.", "") for v in leaves.values() if is_tensor(v)}),
    })
    return facts
