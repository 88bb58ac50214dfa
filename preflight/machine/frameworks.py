"""Whether a framework (torch, tensorflow, ...) is installed here, judged without importing it and
without the directory preflight was started in.

`python -m` puts the working directory first on sys.path, so a folder called `torch/` (even an
empty one, which Python takes for a namespace package) or a file `torch.py` there would pass for the
framework. preflight's check processes start without that entry (preflight.engine.child), and this
search leaves it out too, for any process: it asks the same finders an import would, on sys.path
less "", "." and the working directory, and a namespace package does not count as an installed
framework (every framework ships an `__init__.py`).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from typing import Any


def search_path() -> list[str]:
    """sys.path without the working directory, however it is spelled there."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed: nothing can be found through it
        cwd = None
    return [p for p in sys.path if p not in ("", ".") and (cwd is None or os.path.realpath(p) != cwd)]


def find_installed(name: str) -> Any:
    """The spec of top-level module `name` as an import would find it, less the working directory;
    None when it is absent or only a namespace package (a bare folder with that name)."""
    path = search_path()
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(name, path)
            else:
                find = getattr(finder, "find_spec", None)
                spec = find(name, None) if find else None
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is None:
            continue
        if spec.origin in (None, "namespace") and spec.submodule_search_locations is not None:
            return None  # a folder named like the framework, not the framework
        return spec
    return None


def installed(name: str) -> bool:
    return find_installed(name) is not None
