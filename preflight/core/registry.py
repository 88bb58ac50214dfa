"""Find checks through the `preflight.checks` entry-point group.

Built-in checks are registered in the same group (pyproject.toml), so a third-party check is no
different from ours. A plugin that fails to load is named with its distribution, and the rest load.

Importing a plugin runs its code, so the import is contained (`contained`): it runs in a thread of
its own, every BaseException it raises (sys.exit(), KeyboardInterrupt, ...) becomes a load error,
and one that has not finished within its time limit (PLUGIN_IMPORT_LIMIT_S each, `limit_s` for all
of them together) is left behind, still importing, and named as a load error too. A load error makes
the verdict INCOMPLETE. A third party's plugin named in `skip` is not imported at all.

What a plugin does to the process while it is imported is undone or kept out: what it prints goes to
standard error (never into a verdict line or --json output), a chdir is taken back (the reports stay
where they were asked for), and os._exit() becomes a SystemExit of the importing thread. A module
that ends its importer another way is caught by `probe` (preflight.transport.plugins): a child
process imports every third party's plugin first, and reports what each one is, so that only those
that survived it, and of these only the ones `need` names, are imported here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from preflight.core.check import Check
from preflight.core.model import Scope

GROUP = "preflight.checks"
PLUGIN_IMPORT_LIMIT_S = 10.0  # one plugin's import; `discover(limit_s=)` bounds them all together
OWN_DISTRIBUTIONS = ("preflight-cluster", "preflight_cluster")


class PluginLoadError(Exception):
    """A plugin's import raised (any BaseException) or did not finish within its time limit."""


@dataclass(frozen=True)
class Probed:
    """What importing one plugin in a child did: what it is (its declarations), or why it failed."""
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""


# (group, entry point names, time limit) -> name -> Probed
Probe = Callable[[str, list[str], float], dict[str, Probed]]
# name -> what the child said of it (every third party's plugin that imported) -> the names to import; None: all
Need = Callable[[dict[str, dict[str, Any]]], "set[str] | None"]


def _no_exit(code: Any = 0) -> None:
    raise SystemExit(code)


@contextlib.contextmanager
def _kept() -> Iterator[None]:
    """While a plugin is imported: its prints on stderr, its chdir taken back, its os._exit() a SystemExit."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    real_exit, stdout = os._exit, sys.stdout
    os._exit = _no_exit  # type: ignore[assignment]
    sys.stdout = sys.stderr
    with contextlib.suppress(OSError, ValueError, AttributeError):
        stdout.flush()
    try:
        saved = os.dup(1)  # what a plugin writes to file descriptor 1 itself goes to stderr too
        os.dup2(2, 1)
    except OSError:
        saved = -1
    try:
        yield
    finally:
        os._exit, sys.stdout = real_exit, stdout  # type: ignore[assignment]
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)
        with contextlib.suppress(OSError):
            if cwd and os.getcwd() != cwd:
                os.chdir(cwd)


def contained(load: Callable[[], Any], limit_s: float) -> Any:
    """`load()` run in a thread of its own for at most `limit_s`: what it returns, or PluginLoadError
    naming what it raised or that it did not finish (the thread is left behind, a daemon)."""
    with _kept():
        return _in_thread(load, limit_s)


def _in_thread(load: Callable[[], Any], limit_s: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = load()
        except BaseException as exc:  # noqa: BLE001 - sys.exit() and KeyboardInterrupt of a plugin too
            box["error"] = exc

    thread = threading.Thread(target=target, name="preflight-plugin-import", daemon=True)
    thread.start()
    thread.join(max(0.0, limit_s))
    if thread.is_alive():
        raise PluginLoadError(f"its import did not finish within {max(0.0, limit_s):g} s (left behind)")
    if "error" in box:
        exc = box["error"]
        raise PluginLoadError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return box.get("value")


@dataclass
class LoadError:
    entry_point: str
    distribution: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"entry_point": self.entry_point, "distribution": self.distribution, "error": self.error}


class CheckSet(dict):
    """Check id -> Check class, and `not_imported`: the ids of plugins `skip` kept from being imported
    (their sections and settings in a config are passed over, not refused as unknown)."""

    not_imported: dict[str, str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.not_imported = {}


def not_imported(checks: Any, name: str) -> bool:
    """Whether `name` (a check id or an area) is that of a plugin --skip kept from being imported."""
    ids = getattr(checks, "not_imported", None) or {}
    return name in ids or name in {i.split(".", 1)[0] for i in ids}


@dataclass
class Registry:
    checks: dict[str, type[Check]] = field(default_factory=CheckSet)
    errors: list[LoadError] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # check id -> distribution
    not_imported: dict[str, str] = field(default_factory=dict)  # a skipped plugin's check id -> distribution

    def get(self, check_id: str) -> type[Check]:
        return self.checks[check_id]

    def ordered(self, ids: list[str] | None = None) -> list[type[Check]]:
        """Checks in run order: node checks before cluster checks, each after what it reads (run_after,
        reads); a check that declares `run_first` (readings that only hold before the others load the
        machine) leads."""
        wanted = [self.checks[i] for i in (ids if ids is not None else sorted(self.checks))]
        by_id = {c.id: c for c in wanted}
        ordered: list[type[Check]] = []

        def visit(check: type[Check], stack: tuple[str, ...] = ()) -> None:
            if check in ordered or check.id in stack:
                return
            for dep in (*check.run_after, *check.reads):
                if dep in by_id:
                    visit(by_id[dep], stack + (check.id,))
            ordered.append(check)

        for check in sorted(wanted, key=lambda c: (c.scope is Scope.CLUSTER, not c.run_first, c.id)):
            visit(check)
        return ordered


def _distribution_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is not None:
        return f"{dist.metadata['Name']} {dist.version}"
    return "unknown distribution"


def is_own(distribution: str) -> bool:
    return distribution.split(" ")[0] in OWN_DISTRIBUTIONS


def discover(skip: Collection[str] = (), only: Collection[str] | None = None,
             limit_s: float = 3 * PLUGIN_IMPORT_LIMIT_S, probe: Probe | None = None,
             need: Need | None = None) -> Registry:
    """The checks of the entry-point group. `skip`: check ids of third-party plugins not to import
    (preflight's own are imported, as what the others read may be among them); `only`: import just
    these (an agent that runs them); `limit_s`: the time all imports together may take; `probe`: import
    the third parties' plugins in a child first (preflight.transport.plugins.probe); `need`: with
    `probe`, which of them this command imports (the others are passed over as `skip`'s are)."""
    registry = Registry()
    deadline = time.monotonic() + limit_s
    # preflight's own first: a plugin's import that hangs cannot take their time.
    found = sorted((ep for ep in metadata.entry_points(group=GROUP) if only is None or ep.name in only),
                   key=lambda e: (not is_own(_distribution_name(e)), e.name))
    third = [ep.name for ep in found if not is_own(_distribution_name(ep)) and ep.name not in skip]
    probed: dict[str, Probed] | None = None
    wanted: set[str] | None = None
    for ep in found:
        dist = _distribution_name(ep)
        if probed is None and not is_own(dist):  # preflight's own are imported: now the others, apart first
            probed = probe(GROUP, third, max(0.0, deadline - time.monotonic())) if probe is not None and third else {}
            wanted = need({n: p.info for n, p in probed.items() if not p.error}) if need and probe else None
        failed = bool((probed or {}).get(ep.name, Probed()).error)
        if not is_own(dist) and (ep.name in skip or (wanted is not None and ep.name not in wanted and not failed)):
            registry.not_imported[ep.name] = dist
            getattr(registry.checks, "not_imported", {})[ep.name] = dist
            continue
        try:
            if failed:
                raise PluginLoadError((probed or {})[ep.name].error)
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginLoadError(f"not imported: the plugins before it used the {limit_s:g} s all imports "
                                      "may take")
            obj = _checked(ep, contained(ep.load, min(PLUGIN_IMPORT_LIMIT_S, left)), registry)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the run
            message = str(exc) if isinstance(exc, PluginLoadError) else f"{type(exc).__name__}: {exc}"
            registry.errors.append(LoadError(f"{ep.name} = {ep.value}", dist, message))
            continue
        registry.checks[obj.id] = obj
        registry.origin[obj.id] = dist
    return registry


def _checked(ep: metadata.EntryPoint, obj: Any, registry: Registry) -> type[Check]:
    if not (isinstance(obj, type) and issubclass(obj, Check)):
        raise TypeError(f"{ep.value} is not a preflight.core.check.Check subclass")
    if obj.id != ep.name:
        raise ValueError(f"entry point name {ep.name!r} differs from the check's id {obj.id!r}")
    if obj.id in registry.checks:
        raise ValueError(f"check id {obj.id!r} is already provided by {registry.origin[obj.id]}")
    return obj


def needed_by(named: Collection[str] | None = None, tags: Collection[str] = (), hook: bool = False) -> Need:
    """The `need` of a command that runs the checks `named` (--checks), or those with any of `tags`
    (--tag), or a hook's (no --checks: the node checks that declare `hook`), with what they run after;
    all of them when nothing narrows the selection."""
    def need(infos: dict[str, dict[str, Any]]) -> set[str] | None:
        if named is not None:
            chosen = {n for n in infos if n in set(named)}
        elif tags:
            chosen = {n for n, i in infos.items() if set(tags) & set(i.get("tags") or ())}
        elif hook:
            chosen = {n for n, i in infos.items() if i.get("hook") and i.get("scope") == Scope.NODE.value}
        else:
            return None
        pending = list(chosen)
        while pending:  # what they read, and what that reads
            for dep in infos.get(pending.pop(), {}).get("run_after") or ():
                if dep in infos and dep not in chosen:
                    chosen.add(dep)
                    pending.append(dep)
        return chosen

    return need
