"""checkpoint.roundtrip: checkpoints are written, read back bit for bit, and a killed run resumes exactly.

Four parts, each reported on its own:
- torch: a model, its Adam state and every random-number state, saved with `torch.save` and with
  `torch.distributed.checkpoint` (DCP), fsynced, loaded back and compared byte for byte; write and
  read GB/s, median of `repeats`.
- resume: a short training run (preflight.workers.checkpoint_train) is SIGKILLed between two
  checkpoints, a new process resumes from the newest one, and its final weights must equal, bit for
  bit, those of a run that was never interrupted.
- tensorflow: tf.train.Checkpoint with a CheckpointManager, restored with assert_consumed(), in its
  own process (preflight.workers.checkpoint_tf).
- compat: an old checkpoint the team keeps (`compat_path`) must still load with this stack.

Everything is written under one fresh directory inside `dir`, removed at the end, also on failure.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.check import CannotMeasure, Check, Expect, NodeContext, Outcome, measure
from preflight.model import Status, worst
from preflight.faults import fault

GB = 1e9
MB = 1e6
# Headroom over the largest single checkpoint, for filesystem overhead and the resume test's files.
FREE_SPACE_FACTOR = 1.2
MAX_REPORTED_MISMATCHES = 10


@dataclass
class Params:
    # Where checkpoints are written. Unset: a scratch directory under the run's output directory,
    # which proves little; point it at the shared filesystem your training job checkpoints to.
    dir: str | None = None
    # Size of model plus optimizer state. Large enough that the figure is about the storage and not
    # about Python overhead, small enough to take seconds on a node; raise it toward a real shard size
    # (a 7B model with Adam in fp32 is ~112 GB across the job) for figures that include the page cache's
    # limits.
    size_mb: float = 256.0
    # Single-stream write floor. A parallel filesystem (Lustre, GPFS, Weka) or local NVMe gives one
    # writer several GB/s; NFS on 10 GbE tops out near 1 GB/s. Below 1 GB/s one node saving a 100 GB
    # checkpoint stalls training for over a minute and a half each time.
    min_write_gbps: float = 1.0
    # Read matters at restart, after a failure, when the whole job waits. Same reasoning as writing.
    min_read_gbps: float = 1.0
    # Each format is written and read this many times; the median is judged.
    repeats: int = 3
    # "auto": CUDA when torch sees a GPU (the tensors then come from GPU memory, as in training), else CPU.
    device: str = "auto"
    # Also use torch.distributed.checkpoint (the format FSDP and large-model training save with).
    dcp: bool = True
    # The kill-and-resume test: steps of the short training run, a checkpoint every save_every steps,
    # and the step after which it is killed (between two checkpoints, so work is lost and redone).
    resume_test: bool = True
    resume_steps: int = 40
    resume_save_every: int = 10
    resume_kill_after_step: int = 25
    seed: int = 1234
    # Size of the tensorflow round trip, at most size_mb (its own process; kept smaller, the torch part
    # already measures the storage).
    tensorflow: bool = True
    tf_size_mb: float = 64.0
    # A checkpoint the team produced with its previous stack (a torch.save file, or a DCP directory):
    # it must still load, with weights_only=True as torch loads by default since 2.6.
    compat_path: str | None = None


# ---------------------------------------------------------------------------------------------------
# Storage errors: a read-only, missing or full directory is a finding with a plain message.

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


def _free_bytes(path: str | Path) -> int | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def filesystem_type(path: str | Path) -> str | None:
    """The filesystem type of the mount that holds path, from /proc/self/mounts (Linux)."""
    try:
        target = os.path.realpath(path)
        best, best_type = "", None
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount_point = fields[1].replace("\\040", " ")
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, best_type = mount_point, fields[2]
        return best_type
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------
# File helpers.

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
    from preflight.pagecache import drop_page_cache as drop, files_under

    return drop(files_under(path))


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------------
# The torch state and its byte-for-byte comparison.

def pick_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def build_state(size_mb: float, seed: int, device: str = "cpu") -> dict[str, Any]:
    """A training state of about size_mb MB: model, Adam state (two tensors per parameter), RNG states."""
    import random

    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    param_count = max(64, int(size_mb * MB / 4 / 3))
    layers = 4
    width = max(4, int((param_count / layers) ** 0.5))

    class Reference(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
            # Other dtypes a real state has: bf16 weights, integer counters, boolean masks.
            self.embedding = torch.nn.Parameter(torch.randn(16, 8).to(torch.bfloat16))
            self.register_buffer("tokens_seen", torch.randint(0, 2**62, (4,), dtype=torch.int64))
            self.register_buffer("mask", torch.rand(32) > 0.5)
            # Bit patterns that torch.equal gets wrong: two NaN payloads, -0.0 next to 0.0, infinities,
            # the smallest denormal. Only a byte comparison tells them apart or equal.
            edge = torch.tensor([0x7FC00001, 0x7FA00000, -(2**31), 0, 0x7F800000, -8388608, 1, 0x40400000],
                                dtype=torch.int32).view(torch.float32)
            self.register_buffer("edge_values", edge)

    model = Reference().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_states(device),
            "step": 1}


def rng_states(device: str = "cpu") -> dict[str, Any]:
    """Every random-number state a training script must save: torch, CUDA, numpy, Python."""
    import random

    import torch

    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.startswith("cuda") and torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:
        return states
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    # As a tensor: torch.load(weights_only=True) refuses numpy arrays.
    states["numpy"] = {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    return states


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Path -> leaf for nested dicts, lists and tuples; containers leave a marker with type and length."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        out[prefix or "."] = ("<dict>", len(obj))
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}[{key!r}]"))
    elif isinstance(obj, (list, tuple)):
        out[prefix or "."] = (f"<{type(obj).__name__}>", len(obj))
        for index, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}[{index}]"))
    else:
        out[prefix or "."] = obj
    return out


def tensor_bytes(tensor: Any) -> Any:
    """The tensor's bytes as a flat uint8 tensor on the CPU (NaN payloads and -0.0 included)."""
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8)


def _same_leaf(expected: Any, actual: Any) -> str | None:
    """None when equal bit for bit, else what differs."""
    import torch

    if _is_tensor(expected) or _is_tensor(actual):
        if not (_is_tensor(expected) and _is_tensor(actual)):
            return f"{type(expected).__name__} came back as {type(actual).__name__}"
        if expected.dtype != actual.dtype:
            return f"dtype {expected.dtype} came back as {actual.dtype}"
        if tuple(expected.shape) != tuple(actual.shape):
            return f"shape {tuple(expected.shape)} came back as {tuple(actual.shape)}"
        left, right = tensor_bytes(expected), tensor_bytes(actual)
        if not torch.equal(left, right):
            differing = int((left != right).sum())
            return f"{differing} of {left.numel()} bytes differ"
        return None
    if type(expected) is not type(actual):
        return f"{type(expected).__name__} came back as {type(actual).__name__}"
    if isinstance(expected, float):
        if struct.pack("<d", expected) != struct.pack("<d", actual):
            return f"{expected!r} came back as {actual!r}"
        return None
    if expected != actual:
        return f"{expected!r} came back as {actual!r}"
    return None


def compare_states(expected: Any, actual: Any, limit: int = MAX_REPORTED_MISMATCHES) -> tuple[int, list[str]]:
    """(leaves compared, mismatches) between two states: keys, types, dtypes, shapes and bytes."""
    left, right = flatten(expected), flatten(actual)
    problems = [f"{key}: missing after load" for key in left if key not in right]
    problems += [f"{key}: present after load but never saved" for key in right if key not in left]
    for key, value in left.items():
        if key in right:
            problem = _same_leaf(value, right[key])
            if problem:
                problems.append(f"{key}: {problem}")
    return len(left), problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


def count_tensors(state: Any) -> tuple[int, int]:
    """(tensors, bytes of tensor data) in a nested state."""
    tensors = [v for v in flatten(state).values() if _is_tensor(v)]
    return len(tensors), sum(t.numel() * t.element_size() for t in tensors)


def blank_like(obj: Any) -> Any:
    """A state of the same structure for DCP to load into: zeroed tensors, None for plain values.

    DCP loads in place into a state dict that has every key; it recurses into dicts and into lists
    that hold tensors or dicts, and stores everything else as one pickled object.
    """
    import torch

    if _is_tensor(obj):
        return torch.zeros_like(obj)
    if isinstance(obj, dict):
        return {key: blank_like(value) for key, value in obj.items()}
    if isinstance(obj, list) and any(_is_tensor(v) or isinstance(v, dict) for v in obj):
        return [blank_like(value) for value in obj]
    return None


# ---------------------------------------------------------------------------------------------------
# Writing and reading, timed.

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
    return _tree_bytes(directory)


def load_dcp(target: Any, directory: Path) -> Any:
    """Load in place into target (a state of the right structure, see blank_like) and return it."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, checkpoint_id=str(directory), **_dcp_kwargs(dcp.load))
    return target


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


# ---------------------------------------------------------------------------------------------------
# Kill and resume.

def _worker_argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _deterministic_env() -> dict[str, str]:
    # cuBLAS is only deterministic with a fixed workspace, and it must be set before CUDA starts.
    return {"CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
            "PYTHONUNBUFFERED": "1"}


def _kill_when_holding(ctx: NodeContext, argv: list[str], timeout: float) -> dict[str, Any]:
    """Start the training run, SIGKILL it once it says it is holding, and return what it printed."""
    start = time.monotonic()
    lines: list[str] = []
    holding = threading.Event()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **_deterministic_env()})

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("holding "):
                holding.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        reached = holding.wait(timeout)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(5)
    ctx.record(argv, proc.returncode, "\n".join(lines) + "\n[SIGKILL sent by the check]", time.monotonic() - start)
    return {"reached_hold": reached, "returncode": proc.returncode, "output": lines, "pid": proc.pid}


def _last_value(lines: list[str], prefix: str) -> int | None:
    found = None
    for line in lines:
        if line.startswith(prefix):
            try:
                found = int(line.split()[1].split("=", 1)[1])
            except (IndexError, ValueError):
                pass
    return found


def resume_test(ctx: NodeContext, workdir: Path, params: Params, device: str) -> dict[str, Any]:
    import torch

    base = ["--steps", str(params.resume_steps), "--save-every", str(params.resume_save_every),
            "--seed", str(params.seed), "--device", device]
    # Tests only (preflight.faults): the checkpoints leave out random-number states, as a careless
    # training script does; the resume test must then FAIL.
    drop_rng_state = bool(fault("checkpoint.roundtrip", "drop_rng_state", False))
    if drop_rng_state:
        base.append("--drop-rng-state")
    facts: dict[str, Any] = {"steps": params.resume_steps, "save_every": params.resume_save_every,
                             "kill_after_step": params.resume_kill_after_step, "device": device,
                             "drop_rng_state": drop_rng_state}
    module = "preflight.workers.checkpoint_train"
    budget = max(10.0, ctx.time_left() / 4)

    reference = workdir / "uninterrupted-final.pt"
    proc = ctx.run(_worker_argv(module, "--dir", str(workdir / "uninterrupted"), "--final", str(reference), *base),
                   timeout=budget, env=_deterministic_env())
    if proc.returncode != 0:
        return {**facts, "error": f"the uninterrupted training run exited with {proc.returncode}",
                "output_tail": (proc.stdout + proc.stderr)[-2000:]}

    interrupted_dir = workdir / "interrupted"
    killed = _kill_when_holding(
        ctx, _worker_argv(module, "--dir", str(interrupted_dir), "--hold-at-step",
                          str(params.resume_kill_after_step), *base), timeout=budget)
    facts["killed_returncode"] = killed["returncode"]
    facts["killed_pid"] = killed["pid"]
    facts["last_checkpoint_before_kill"] = _last_value(killed["output"], "saved ")
    if not killed["reached_hold"]:
        return {**facts, "error": "the training run to be killed never reached step "
                                  f"{params.resume_kill_after_step} (exit status {killed['returncode']})",
                "output_tail": "\n".join(killed["output"])[-2000:]}

    resumed = workdir / "resumed-final.pt"
    proc = ctx.run(_worker_argv(module, "--dir", str(interrupted_dir), "--resume", "--final", str(resumed), *base),
                   timeout=budget, env=_deterministic_env())
    facts["resumed_from_step"] = _last_value(proc.stdout.splitlines(), "resumed ")
    if proc.returncode != 0:
        return {**facts, "error": f"the resumed training run exited with {proc.returncode}",
                "output_tail": (proc.stdout + proc.stderr)[-2000:]}

    expected = torch.load(reference, map_location="cpu", weights_only=True)
    actual = torch.load(resumed, map_location="cpu", weights_only=True)
    leaves, mismatches = compare_states(expected["model"], actual["model"])
    _, optimizer_mismatches = compare_states(expected["optimizer"], actual["optimizer"])
    facts.update({
        "parameters_compared": sum(1 for v in flatten(expected["model"]).values() if _is_tensor(v)),
        "parameter_mismatches": mismatches,
        "optimizer_mismatches": optimizer_mismatches,
        "max_abs_difference": max(
            (float((expected["model"][k].double() - actual["model"][k].double()).abs().max())
             for k in expected["model"] if k in actual["model"]
             and expected["model"][k].shape == actual["model"][k].shape), default=None),
        "exact": not mismatches and not optimizer_mismatches,
    })
    return facts


# ---------------------------------------------------------------------------------------------------
# tensorflow, in its own process.

def tensorflow_test(ctx: NodeContext, workdir: Path, params: Params) -> dict[str, Any]:
    argv = _worker_argv("preflight.workers.checkpoint_tf", "--dir", str(workdir / "tensorflow"),
                        "--size-mb", str(_tf_size_mb(params)), "--seed", str(params.seed))
    try:
        proc = ctx.run(argv, timeout=max(30.0, ctx.time_left() / 2),
                       env={"TF_CPP_MIN_LOG_LEVEL": "2", "TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    except CannotMeasure as exc:
        return {"error": str(exc), "timed_out": True}
    result = _last_json_line(proc.stdout)
    if result is None:
        return {"error": f"the tensorflow worker exited with {proc.returncode} without a result"
                         + (" (killed by a signal)" if proc.returncode < 0 else ""),
                "output_tail": proc.stderr[-2000:]}
    if "write_s" in result and result["write_s"] > 0:
        result["write_gbps"] = result["bytes_written"] / result["write_s"] / GB
        result["read_gbps"] = result["bytes_written"] / result["read_s"] / GB
    return result


def _check_memory(size_mb: float) -> None:
    """The state, the copy loaded back and DCP's target live in memory together: refuse what cannot fit."""
    import psutil

    needed = 3 * size_mb * MB
    available = psutil.virtual_memory().available
    if needed > available:
        raise CannotMeasure(f"checkpoint.size_mb = {size_mb:g} needs about {needed / MB:.0f} MB of memory to "
                            f"compare the loaded state with the saved one; {available / MB:.0f} MB is available")


def _tf_size_mb(params: Params) -> float:
    return min(params.tf_size_mb, params.size_mb)


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


# ---------------------------------------------------------------------------------------------------
# An old checkpoint must still load.

def compat_test(path: str, scratch: Path) -> dict[str, Any]:
    import torch

    source = Path(path)
    facts: dict[str, Any] = {"path": path}
    if not source.exists():
        return {**facts, "error": f"{path} does not exist"}
    try:
        if source.is_dir():
            # A DCP checkpoint: convert it to one torch.save file, which needs no model to load into.
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

            converted = Path(tempfile.mkdtemp(prefix="compat-", dir=scratch)) / "converted.pt"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    dcp_to_torch_save(str(source), str(converted))
                state = torch.load(converted, map_location="cpu", weights_only=True)
            finally:
                shutil.rmtree(converted.parent, ignore_errors=True)
            facts["format"] = "torch.distributed.checkpoint"
        else:
            state = torch.load(source, map_location="cpu", weights_only=True)
            facts["format"] = "torch.save"
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
        "dtypes": sorted({str(v.dtype).replace("torch.", "") for v in leaves.values() if _is_tensor(v)}),
    })
    return facts


# ---------------------------------------------------------------------------------------------------

def _framework_version(module: str, distributions: tuple[str, ...]) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


class CheckpointRoundtrip(Check):
    id = "checkpoint.roundtrip"
    title = "Checkpoints: exact round trip, write/read speed, resume after a kill"
    tags = ("storage", "checkpoint", "torch", "tensorflow")
    why = (
        "A long training run is only as safe as its last checkpoint. A filesystem that cannot be written, "
        "fills up, or returns different bytes loses days of work; a slow one stalls every GPU while it saves; "
        "and a resume that forgets the optimizer or random-number state silently trains a different model."
    )
    remediation = (
        "Point checkpoint.dir at the filesystem your training writes checkpoints to, mounted read-write, "
        "with free space for several checkpoints.",
        "Slow writes: save from every rank in parallel (torch.distributed.checkpoint), save asynchronously, "
        "or write to local NVMe first and copy to shared storage in the background.",
        "Save and restore the model, the optimizer, the step and every random-number state (torch, CUDA, "
        "numpy, Python) together; write to a temporary name, fsync, then rename.",
        "A checkpoint from the previous stack that no longer loads: pin the old version or convert the "
        "checkpoint before upgrading.",
    )
    Params = Params
    # One line per parameter for `preflight explain`: what it means, and its unit.
    param_help = {
        "dir": ("directory checkpoints are written to; point it at the filesystem training saves to (unset: a "
                "scratch directory)"),
        "size_mb": "size of the model plus optimizer state written (MB)",
        "min_write_gbps": "lowest single-writer write speed (GB/s)",
        "min_read_gbps": "lowest single-reader read speed (GB/s)",
        "repeats": "times each format is written and read; the median is judged (count)",
        "device": "where the tensors live: \"auto\" (GPU when torch sees one), \"cuda\" or \"cpu\"",
        "dcp": "also use torch.distributed.checkpoint, the format FSDP saves with (true/false)",
        "resume_test": ("kill a short training run between checkpoints and check it resumes exactly "
                        "(true/false)"),
        "resume_steps": "steps of the kill-and-resume training run (count)",
        "resume_save_every": "steps between its checkpoints (count)",
        "resume_kill_after_step": "step after which the run is killed (step number)",
        "seed": "random seed of the training run (integer)",
        "tensorflow": "also round-trip a tensorflow checkpoint where tensorflow is installed (true/false)",
        "tf_size_mb": "size of the tensorflow checkpoint, at most size_mb (MB)",
        "compat_path": ("a checkpoint made with the team's previous stack that must still load (file or DCP "
                        "directory)"),
    }
    timeout_s = 600.0
    levels = {
        "quick": {"skip": "it writes and reads 256 MB per format three times and kills and resumes a "
                          "training run, a minute or more"},
        "thorough": {"timeout": 1800, "size_mb": 2048.0, "repeats": 5, "tf_size_mb": 256.0},
    }

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        torch_version = _framework_version("torch", ("torch",))
        tf_version = _framework_version("tensorflow", ("tensorflow", "tensorflow-cpu", "tf-nightly",
                                                       "tensorflow-macos"))
        directory = str(params.dir) if params.dir else str(ctx.scratch_dir)
        facts: dict[str, Any] = {
            "dir": directory,
            "dir_is_scratch": not params.dir,
            "frameworks": {"torch": torch_version, "tensorflow": tf_version},
            "size_mb": params.size_mb,
        }
        if torch_version is None and tf_version is None:
            return facts
        if torch_version is not None and params.compat_path:
            facts["compat"] = compat_test(params.compat_path, Path(ctx.scratch_dir))

        problem = self._storage_precheck(directory)
        if problem:
            facts["storage_error"] = problem
            return facts
        facts["fs_type"] = filesystem_type(directory)
        try:
            workdir = Path(tempfile.mkdtemp(prefix="preflight-checkpoint-", dir=directory))
        except OSError as exc:
            kind = storage_problem_kind(exc) or "other"
            facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory) if kind != "other"
                                      else f"cannot create a directory in {directory}: {exc.strerror or exc}"}
            return facts
        try:
            self._measure(ctx, params, facts, workdir, torch_version, tf_version)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            facts["left_behind"] = [str(workdir)] if workdir.exists() else []
        return facts

    @staticmethod
    def _storage_precheck(directory: str) -> dict[str, Any] | None:
        if not os.path.exists(directory):
            return {"kind": "missing", "message": storage_message("missing", directory)}
        if not os.path.isdir(directory):
            return {"kind": "not_a_directory", "message": storage_message("not_a_directory", directory)}
        return None

    def _measure(self, ctx: NodeContext, params: Params, facts: dict[str, Any], workdir: Path,
                 torch_version: str | None, tf_version: str | None) -> None:
        directory = facts["dir"]
        needed = int(max(params.size_mb if torch_version else 0,
                         2 * _tf_size_mb(params) if tf_version and params.tensorflow else 0) * MB * FREE_SPACE_FACTOR
                     + MB)
        free = _free_bytes(directory)
        facts["free_bytes"], facts["needed_bytes"] = free, needed
        if free is not None and free < needed:
            facts["storage_error"] = {"kind": "full", "message": storage_message("full", directory, free, needed)}
            return
        try:
            if torch_version is not None:
                device = pick_device(params.device)
                facts["device"] = device
                _check_memory(params.size_mb)
                state = build_state(params.size_mb, params.seed, device)
                tensors, data_bytes = count_tensors(state)
                facts["torch"] = {"tensors": tensors, "tensor_bytes": data_bytes, "formats": {}}
                formats = ["torch.save"] + (["dcp"] if params.dcp else [])
                for fmt in formats:
                    facts["torch"]["formats"][fmt] = roundtrip_format(fmt, state, workdir, params.repeats, device)
                del state
                if params.resume_test:
                    facts["resume"] = resume_test(ctx, workdir / "resume", params, device)
                    kind = _storage_kind_from_text(facts["resume"].get("output_tail", ""))
                    if kind:
                        facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory),
                                                  "error": facts["resume"]["error"]}
                        return
        except Exception as exc:
            kind = storage_problem_kind(exc, _free_bytes(directory))
            if kind is None:
                raise
            facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory, _free_bytes(directory)),
                                      "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            return
        if tf_version is not None and params.tensorflow:
            result = tensorflow_test(ctx, workdir, params)
            kind = _storage_kind_from_text(result.get("error", ""), result.get("errno"))
            if kind:
                facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory),
                                          "error": result["error"]}
            facts["tensorflow"] = result

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        frameworks = facts.get("frameworks", {})
        if not frameworks.get("torch") and not frameworks.get("tensorflow"):
            return Outcome(Status.SKIP, "neither torch nor tensorflow is installed: no checkpoint to write")
        findings: list[tuple[Status, str]] = []
        measurements = []
        details: list[str] = []
        where = facts.get("dir", "?")
        if facts.get("dir_is_scratch"):
            details.append(f"checkpoints were written to the scratch directory {where}; set checkpoint.dir to "
                           "the shared filesystem training uses to measure that")
        if facts.get("fs_type"):
            details.append(f"filesystem at {where}: {facts['fs_type']}")

        compat = facts.get("compat")
        if compat:
            if compat.get("error"):
                findings.append((Status.FAIL, f"old checkpoint {compat['path']} does not load: {compat['error']}"))
            else:
                details.append(
                    f"old checkpoint {compat['path']} ({compat.get('format')}) loads: {compat.get('tensors')} tensors, "
                    f"{compat.get('tensor_bytes', 0) / MB:.1f} MB, dtypes {', '.join(compat.get('dtypes', [])) or 'none'}"
                    + (f", keys {', '.join(compat['top_level_keys'])}" if compat.get("top_level_keys") else ""))

        storage = facts.get("storage_error")
        if storage:
            findings.append((Status.FAIL, storage["message"]))
            return self._outcome(findings, measurements, details + ([storage["error"]] if storage.get("error") else []))

        if facts.get("torch"):
            torch_facts = facts["torch"]
            details.append(f"torch state: {torch_facts['tensors']} tensors, {torch_facts['tensor_bytes'] / MB:.1f} MB "
                           f"on {facts.get('device', 'cpu')}")
            for fmt, result in torch_facts.get("formats", {}).items():
                label = "torch.save" if fmt == "torch.save" else "torch.distributed.checkpoint"
                if result["mismatches"]:
                    findings.append((Status.FAIL, f"{label} round trip is not exact: {result['mismatches'][0]}"))
                    details.extend(f"{label}: {m}" for m in result["mismatches"])
                write = measure(f"{label} write", round(statistics.median(result["write_gbps_samples"]), 3), "GB/s",
                                at_least=params.min_write_gbps, samples=[round(s, 3) for s in result["write_gbps_samples"]])
                read = measure(f"{label} read", round(statistics.median(result["read_gbps_samples"]), 3), "GB/s",
                               at_least=params.min_read_gbps, samples=[round(s, 3) for s in result["read_gbps_samples"]])
                measurements += [write, read]
                if not write.ok:
                    findings.append((Status.WARN, f"{label} writes at {write.value} GB/s, below {params.min_write_gbps} GB/s"))
                if not read.ok:
                    findings.append((Status.WARN, f"{label} reads at {read.value} GB/s, below {params.min_read_gbps} GB/s"))
                if not result.get("cache_dropped"):
                    details.append(f"{label}: the page cache could not be dropped before reading; the read figure "
                                   "may be memory speed")
            if facts.get("fs_type") == "tmpfs":
                details.append("the directory is on tmpfs (memory): read and write figures are memory speed")

        resume = facts.get("resume")
        if resume:
            if resume.get("error"):
                findings.append((Status.ERROR, f"resume test could not run: {resume['error']}"))
                if resume.get("output_tail"):
                    details.append(resume["output_tail"])
            else:
                resumed_from = resume.get("resumed_from_step")
                measurements.append(measure("resumed weights equal uninterrupted run", "yes" if resume["exact"] else "no"))
                measurements[-1].threshold, measurements[-1].comparison, measurements[-1].ok = "yes", "==", resume["exact"]
                if not resumed_from:
                    findings.append((Status.FAIL, "the resumed run found no checkpoint to resume from after the kill"))
                elif not resume["exact"]:
                    first = (resume["parameter_mismatches"] or resume["optimizer_mismatches"])[0]
                    diff = resume.get("max_abs_difference")
                    findings.append((Status.FAIL,
                                     f"a run killed after step {resume['kill_after_step']} and resumed from step "
                                     f"{resumed_from} does not end with the weights of an uninterrupted run ({first}"
                                     + (f", largest difference {diff:.3g}" if diff else "") + "): the checkpoint "
                                     "misses state, such as random-number states"))
                    details.extend(f"resume: {m}" for m in resume["parameter_mismatches"] + resume["optimizer_mismatches"])
                else:
                    details.append(f"resume: killed (SIGKILL) after step {resume['kill_after_step']}, resumed from the "
                                   f"step-{resumed_from} checkpoint, {resume['parameters_compared']} parameter tensors "
                                   f"equal bit for bit after {resume['steps']} steps on {resume['device']}")
                if resume.get("drop_rng_state"):
                    details.append("fault injection: the training run dropped its random-number states")

        tf = facts.get("tensorflow")
        if tf:
            if tf.get("error"):
                status = Status.ERROR if tf.get("timed_out") else Status.FAIL
                findings.append((status, f"tensorflow checkpoint round trip failed: {tf['error']}"))
                if tf.get("output_tail"):
                    details.append(tf["output_tail"])
            else:
                if tf.get("mismatches"):
                    findings.append((Status.FAIL, f"tensorflow restore is not exact: {tf['mismatches'][0]}"))
                if tf.get("manager_latest") != tf.get("latest_checkpoint"):
                    findings.append((Status.FAIL, f"CheckpointManager's latest is {tf.get('manager_latest')}, "
                                                  f"not the checkpoint just saved ({tf.get('latest_checkpoint')})"))
                measurements.append(measure("tensorflow checkpoint write", round(tf.get("write_gbps", 0.0), 3), "GB/s"))
                measurements.append(measure("tensorflow checkpoint read", round(tf.get("read_gbps", 0.0), 3), "GB/s"))
                details.append(f"tensorflow {tf.get('tensorflow')}: {tf.get('variables')} variables, "
                               f"{tf.get('state_bytes', 0) / MB:.1f} MB, restored with assert_consumed()"
                               + ("" if tf.get("mismatches") else ", equal bit for bit"))

        if facts.get("left_behind"):
            findings.append((Status.WARN, f"could not remove {', '.join(facts['left_behind'])}"))
        return self._outcome(findings, measurements, details)

    @staticmethod
    def _outcome(findings: list[tuple[Status, str]], measurements: list, details: list[str]) -> Outcome:
        status = worst([s for s, _ in findings], default=Status.PASS)
        if findings:
            summary = "; ".join(text for s, text in findings if s is status)
            details = [text for _, text in findings] + details
        else:
            parts = [f"{m.name} {m.value} {m.unit}" for m in measurements
                     if m.unit == "GB/s" and (m.name.startswith("torch.save") or m.name.endswith("write"))]
            exact = "round trips exact"
            if any(m.name.startswith("resumed") for m in measurements):
                exact += ", killed run resumes exactly"
            summary = f"{exact}; " + ", ".join(parts) if parts else exact
        return Outcome(status, summary, measurements, details)


def _storage_kind_from_text(text: str, code: int | None = None) -> str | None:
    if code in _ERRNO_KINDS and _ERRNO_KINDS[code] != "missing":
        return _ERRNO_KINDS[code]
    for needle, kind in _TEXT_KINDS:
        if needle in (text or ""):
            return kind
    return None
