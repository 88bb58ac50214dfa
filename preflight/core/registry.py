"""Find checks through the `preflight.checks` entry-point group.

Built-in checks are registered in the same group (pyproject.toml), so a third-party check is no
different from ours. A plugin that fails to load is named with its distribution, and the rest load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata

from preflight.core.check import Check
from preflight.core.model import Scope

GROUP = "preflight.checks"


@dataclass
class LoadError:
    entry_point: str
    distribution: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"entry_point": self.entry_point, "distribution": self.distribution, "error": self.error}


@dataclass
class Registry:
    checks: dict[str, type[Check]] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # check id -> distribution

    def get(self, check_id: str) -> type[Check]:
        return self.checks[check_id]

    def ordered(self, ids: list[str] | None = None) -> list[type[Check]]:
        """Checks in run order: node checks before cluster checks, each after what it reads; a check
        that declares `run_first` (readings that only hold before the others load the machine) leads."""
        wanted = [self.checks[i] for i in (ids if ids is not None else sorted(self.checks))]
        by_id = {c.id: c for c in wanted}
        ordered: list[type[Check]] = []

        def visit(check: type[Check], stack: tuple[str, ...] = ()) -> None:
            if check in ordered or check.id in stack:
                return
            for dep in check.run_after:
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


def discover() -> Registry:
    registry = Registry()
    for ep in metadata.entry_points(group=GROUP):
        dist = _distribution_name(ep)
        try:
            obj = ep.load()
            if not (isinstance(obj, type) and issubclass(obj, Check)):
                raise TypeError(f"{ep.value} is not a preflight.core.check.Check subclass")
            if obj.id != ep.name:
                raise ValueError(f"entry point name {ep.name!r} differs from the check's id {obj.id!r}")
            if obj.id in registry.checks:
                raise ValueError(f"check id {obj.id!r} is already provided by {registry.origin[obj.id]}")
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the run
            registry.errors.append(LoadError(f"{ep.name} = {ep.value}", dist, f"{type(exc).__name__}: {exc}"))
            continue
        registry.checks[obj.id] = obj
        registry.origin[obj.id] = dist
    return registry
