"""Reading a torch.distributed.checkpoint (DCP) directory without running anything it contains.

torch's own reader unpickles two things with the full pickle machinery: the `.metadata` file
(`FileSystemReader.read_metadata`: `pickle.load`) and every non-tensor value of the state
(`DefaultLoadPlanner.load_bytes`: `torch.load(weights_only=False)`). A checkpoint directory the team
points preflight at (`checkpoint.roundtrip.compat_path`) may come from anywhere, and a pickle runs
whatever its `__reduce__` names. Here:

- `.metadata` is read once into memory and unpickled by `MetadataUnpickler`, which resolves only
  what DCP metadata is made of: the dataclasses and enums of torch.distributed.checkpoint (and of
  torch.distributed._shard, which older torch wrote), torch.Size, torch dtypes, layouts and memory
  formats, and pathlib paths. Anything else (os.system, builtins.eval, a class of its own) raises
  `Refused` naming it, before any of it runs;
- non-tensor values are loaded with `torch.load(weights_only=True)` first, which refuses anything
  but plain data; only then does torch's planner place them;
- tensors are read by torch with weights_only=True already.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import io
import pickle
import warnings
from pathlib import Path
from typing import Any

METADATA_FILE = ".metadata"
_MODULES = ("torch.distributed.checkpoint.", "torch.distributed._shard.")
_PATHS = ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath")


class Refused(pickle.UnpicklingError):
    """A pickle names something preflight does not unpickle from a file it did not write."""


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata and nothing else (see the module docstring)."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if module == "torch":
            found = getattr(torch, name, None)
            if found is torch.Size or isinstance(found, (torch.dtype, torch.layout, torch.memory_format)):
                return found
        elif (module, name) == ("torch.serialization", "_get_layout"):
            return torch.serialization._get_layout  # a name -> torch.layout lookup
        elif module == "pathlib" and name in _PATHS:
            return getattr(importlib.import_module("pathlib"), name)
        elif module == "collections" and name == "OrderedDict":
            return importlib.import_module("collections").OrderedDict
        elif module.startswith(_MODULES):
            found = getattr(importlib.import_module(module), name, None)
            if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        raise Refused(f"{module}.{name}")


def load_metadata(data: bytes) -> Any:
    return MetadataUnpickler(io.BytesIO(data)).load()


def _safe_reader_class() -> type:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint import metadata as dcp_metadata

    class SafeReader(FileSystemReader):  # type: ignore[misc, valid-type]
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            rank = kwargs.get("rank")
            name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
            metadata = load_metadata((Path(str(self.path)) / name).read_bytes())
            storage_meta = getattr(dcp_metadata, "StorageMeta", None)
            if storage_meta is not None:  # what torch's own read_metadata adds (torch 2.4 and later)
                if getattr(metadata, "storage_meta", None) is None:
                    metadata.storage_meta = storage_meta()
                if hasattr(self, "load_id"):
                    metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader


def _safe_planner_class(base: type | None = None) -> type:
    """A subclass of torch's load planner `base` (the one that builds the state from the metadata when
    None) whose non-tensor values pass torch.load(weights_only=True) first."""
    import torch

    if base is None:
        from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner as base

    class SafePlanner(base):  # type: ignore[misc, valid-type]
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            # weights_only refuses any global outside plain data: a value that passes it is placed by
            # torch's own planner (from the same bytes in memory, so nothing can change in between).
            data = value.read()
            try:
                torch.load(io.BytesIO(data), weights_only=True)
            except pickle.UnpicklingError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise Refused(f"the value {read_item.dest_index.fqn!r}: {first}") from None
            super().load_bytes(read_item, io.BytesIO(data))

    return SafePlanner


def read_state(directory: str | Path) -> dict[str, Any]:
    """The whole state of a DCP checkpoint directory, as a dict, read as described above.

    Raises Refused for a pickle naming anything else, and what torch raises for a directory that is
    not a DCP checkpoint."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _check_metadata(directory)
    through_torch(lambda: _load_state_dict(state, storage_reader=_safe_reader_class()(str(directory)),
                                            planner=_safe_planner_class()(), no_dist=True))
    return state


def load_into(target: Any, directory: str | Path) -> Any:
    """dcp.load into `target` (a state of the right structure), with the same reader and checks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner

    kwargs = {"no_dist": True} if "no_dist" in _parameters(dcp.load) else {}
    _check_metadata(directory)
    through_torch(lambda: dcp.load(target, storage_reader=_safe_reader_class()(str(directory)),
                                    planner=_safe_planner_class(DefaultLoadPlanner)(), **kwargs))
    return target


def _check_metadata(directory: str | Path) -> None:
    """Refused for a `.metadata` that names anything else, before torch is asked to read anything."""
    path = Path(directory) / METADATA_FILE
    if path.is_file():
        load_metadata(path.read_bytes())


def through_torch(call: Any) -> None:
    """Run a DCP load; torch wraps what its reader and planner raise in CheckpointException (a
    BaseException): a refusal comes back out as Refused, any other failure as a RuntimeError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except Exception:
            raise
        except BaseException as exc:
            failures = getattr(exc, "failures", None)
            if not isinstance(failures, dict):
                raise  # KeyboardInterrupt, SystemExit
            inner = [pair[0] if isinstance(pair, tuple) else pair for pair in failures.values()]
            for failure in inner:
                if isinstance(failure, Refused):
                    raise failure from None
            first = next((str(f).strip().splitlines()[-1] for f in inner if str(f).strip()), type(exc).__name__)
            raise RuntimeError(first) from None


def _parameters(function: Any) -> Any:
    import inspect

    return inspect.signature(function).parameters
