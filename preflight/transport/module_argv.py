"""How preflight starts one of its own programs: `python -m MODULE` whose imports never look in the
directory it starts in (a planted `torch/` folder there must not stand in for the installed framework)."""

from __future__ import annotations

import sys
from pathlib import Path


# `python -c` form of `python -m MODULE`, for interpreters without -P (before 3.11) and for a
# preflight that is importable only from the working directory (a source checkout run in place): the
# working directory leaves sys.path before the module is looked up, and preflight's own directory,
# when given, goes to the end of it, after everything installed.
_BOOTSTRAP = ("import os, runpy, sys; own = sys.argv.pop(1); module = sys.argv.pop(1); "
              "cwd = os.path.realpath(os.getcwd()); "
              "sys.path[:] = [p for p in sys.path if p not in ('', '.') and os.path.realpath(p) != cwd]; "
              "sys.path += [own] if own != '-' and own not in sys.path else []; "
              "runpy.run_module(module, run_name='__main__', alter_sys=True)")


def _own_root_unless_found() -> str:
    """preflight's own directory when a child started with -P might not find preflight, else ""."""
    import importlib.machinery

    import preflight

    root = Path(preflight.__file__).resolve().parent.parent
    # sys.path[0] is the implicit entry (the working directory, the script's folder) unless this
    # process was itself started with -P; the others are installed packages and PYTHONPATH.
    explicit = sys.path if getattr(sys.flags, "safe_path", False) else sys.path[1:]
    if any(p and Path(p).resolve() == root for p in explicit):
        return ""
    for finder in sys.meta_path:  # an editable install's finder
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec("preflight", None)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is not None and spec.origin and Path(spec.origin).resolve().parent.parent == root:
            return ""
    return str(root)


def isolated_module_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """`python -m module args...` whose import path does not include the directory it starts in.

    `python -m` puts the working directory first on sys.path, where a planted `torch/` folder or
    `torch.py` would stand in for the installed framework: found by a framework probe, imported by a
    check or a rank. The working directory itself is kept (checks read relative paths from it); only
    imports stop looking there. This interpreter on 3.11 and later: `-P`; otherwise a `-c` bootstrap.
    """
    python = python or sys.executable
    own = _own_root_unless_found()
    if python == sys.executable and sys.version_info >= (3, 11) and not own:
        return [python, "-P", "-m", module, *args]
    return [python, "-c", _BOOTSTRAP, own or "-", module, *args]
