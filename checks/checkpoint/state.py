"""The training state a checkpoint holds, and its byte-for-byte comparison after a round trip."""

from __future__ import annotations

import struct
import sys
from typing import Any

from preflight.core.check import CannotMeasure
from preflight_checks.checkpoint.storage import MB

MAX_REPORTED_MISMATCHES = 10


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


def is_tensor(value: Any) -> bool:
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

    if is_tensor(expected) or is_tensor(actual):
        if not (is_tensor(expected) and is_tensor(actual)):
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
    tensors = [v for v in flatten(state).values() if is_tensor(v)]
    return len(tensors), sum(t.numel() * t.element_size() for t in tensors)


def blank_like(obj: Any) -> Any:
    """A state of the same structure for DCP to load into: zeroed tensors, None for plain values.

    DCP loads in place into a state dict that has every key; it recurses into dicts and into lists
    that hold tensors or dicts, and stores everything else as one pickled object.
    """
    import torch

    if is_tensor(obj):
        return torch.zeros_like(obj)
    if isinstance(obj, dict):
        return {key: blank_like(value) for key, value in obj.items()}
    if isinstance(obj, list) and any(is_tensor(v) or isinstance(v, dict) for v in obj):
        return [blank_like(value) for value in obj]
    return None


def check_memory(size_mb: float) -> None:
    """The state, the copy loaded back and DCP's target live in memory together: refuse what cannot fit."""
    import psutil

    needed = 3 * size_mb * MB
    available = psutil.virtual_memory().available
    if needed > available:
        raise CannotMeasure(f"checkpoint.size_mb = {size_mb:g} needs about {needed / MB:.0f} MB of memory to "
                            f"compare the loaded state with the saved one; {available / MB:.0f} MB is available")
