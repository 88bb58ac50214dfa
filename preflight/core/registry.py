"""Find checks through the `preflight.checks` entry-point group.

Built-in checks are registered in the same group (pyproject.toml), so a third-party check is no
different from ours. A plugin that fails to load is named with its distribution, and the rest load.

Importing a plugin runs its code, so the import is contained (`contained`): it runs in a thread of
its own, every BaseException it raises (sys.exit(), KeyboardInterrupt, ...) becomes a load error,
and one that has not finished within its time limit (PLUGIN_IMPORT_LIMIT_S each, `limit_s` for all
of them together) is left behind, still importing, and named as a load error too. A load error makes
the verdict INCOMPLETE. A third party's plugin named in `skip` is not imported at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
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


def contained(load: Callable[[], Any], limit_s: float) -> Any:
    """`load()` run in a thread of its own for at most `limit_s`: what it returns, or PluginLoadError
    naming what it raised or that it did not finish (the thread is left behind, a daemon)."""
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
             limit_s: float = 3 * PLUGIN_IMPORT_LIMIT_S) -> Registry:
    """The checks of the entry-point group. `skip`: check ids of third-party plugins not to import
    (preflight's own are imported, as what the others read may be among them); `only`: import just
    these (an agent that runs them); `limit_s`: the time all imports together may take."""
    registry = Registry()
    deadline = time.monotonic() + limit_s
    # preflight's own first: a plugin's import that hangs cannot take their time.
    found = sorted(metadata.entry_points(group=GROUP), key=lambda e: (not is_own(_distribution_name(e)), e.name))
    for ep in found:
        dist = _distribution_name(ep)
        if only is not None and ep.name not in only:
            continue
        if ep.name in skip and not is_own(dist):
            registry.not_imported[ep.name] = dist
            getattr(registry.checks, "not_imported", {})[ep.name] = dist
            continue
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginLoadError(f"not imported: the plugins before it used the {limit_s:g} s all imports "
                                      "may take")
            obj = contained(ep.load, min(PLUGIN_IMPORT_LIMIT_S, left))
            if not (isinstance(obj, type) and issubclass(obj, Check)):
                raise TypeError(f"{ep.value} is not a preflight.core.check.Check subclass")
            if obj.id != ep.name:
                raise ValueError(f"entry point name {ep.name!r} differs from the check's id {obj.id!r}")
            if obj.id in registry.checks:
                raise ValueError(f"check id {obj.id!r} is already provided by {registry.origin[obj.id]}")
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the run
            message = str(exc) if isinstance(exc, PluginLoadError) else f"{type(exc).__name__}: {exc}"
            registry.errors.append(LoadError(f"{ep.name} = {ep.value}", dist, message))
            continue
        registry.checks[obj.id] = obj
        registry.origin[obj.id] = dist
    return registry
