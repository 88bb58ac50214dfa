"""pixi's manifest (pixi.toml) read into versions.pinned's entries. Pure but for the reader it fills.

pixi.toml keeps conda packages under [dependencies] and PyPI packages under [pypi-dependencies], the
same again per feature ([feature.gpu.dependencies]) and per platform ([target.linux-64.dependencies],
[feature.gpu.target.linux-64.dependencies]). A conda value is a match spec's version ("3.10.*",
">=2.1,<3", "2.5.1") or a table with `version` (and `build`, `channel`); a PyPI value is a PEP 440
specifier or a table with `version` (or a `path`, `git`, `url`: no version to compare). "*" is any
version. A feature's packages are in the environments that name the feature, so one that is not
installed is a note, as an extra's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from preflight.core.check import CannotMeasure
from preflight_checks.versions.pin_files import TomlLines


def _tables(data: dict[str, Any]) -> list[tuple[str, str | None, bool, dict[str, Any]]]:
    """(the table's dotted name, its feature or None, whether it is PyPI's, its packages)."""
    found: list[tuple[str, str | None, bool, dict[str, Any]]] = []

    def add(prefix: str, feature: str | None, holder: dict[str, Any]) -> None:
        for key, pypi in (("dependencies", False), ("pypi-dependencies", True)):
            if isinstance(holder.get(key), dict):
                found.append((f"{prefix}{key}", feature, pypi, holder[key]))
        for platform, target in (holder.get("target") or {}).items():
            if isinstance(target, dict):
                for key, pypi in (("dependencies", False), ("pypi-dependencies", True)):
                    if isinstance(target.get(key), dict):
                        found.append((f"{prefix}target.{platform}.{key}", feature, pypi, target[key]))

    add("", None, data)
    for name, feature in (data.get("feature") or {}).items():
        if isinstance(feature, dict):
            add(f"feature.{name}.", name, feature)
    return found


def _version(value: Any) -> str | None:
    """A package's version requirement; None for a path, git or URL source (nothing to compare)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        if any(key in value for key in ("path", "git", "url")) and "version" not in value:
            return None
        return str(value.get("version", "*")).strip()
    return None


def read_manifest(reader: Any, file: Path, data: dict[str, Any], lines: TomlLines) -> None:
    """Every package of every table of a pixi.toml into `reader` (pins._Reader): entries and skipped lines."""
    for table, feature, pypi, packages in _tables(data):
        optional = f"pixi feature {feature}" if feature else None
        for name, value in packages.items():
            number = lines.key(table, name)
            line = lines.lines[number - 1].strip() if number else f"{name} = {value!r}"
            version = _version(value)
            if version is None:
                reader.skipped.append({"where": f"{file}:{number}", "line": line,
                                       "reason": "a path, git or URL source without a version; not compared"})
            elif not pypi:
                spec = name if version in ("", "*") else (f"{name} {version}" if version[:1].isdigit() else f"{name}{version}")
                reader.conda_item(file, number, spec, line=line, optional=optional or "conda")
            else:
                try:
                    requirement = Requirement(name if version in ("", "*") else f"{name}{version}")
                except InvalidRequirement as exc:
                    raise CannotMeasure(f"{file}:{number}: cannot parse {line!r}: {exc}") from exc
                reader._add(file, number, line, requirement, "requirement", optional=optional)
