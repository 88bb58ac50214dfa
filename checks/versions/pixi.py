"""pixi's manifest (pixi.toml) and lock (pixi.lock) read into versions.pinned's entries.

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


def _scalars(node: Any) -> dict[str, tuple[str, int]]:
    """A YAML mapping node's scalar fields: key -> (value, line)."""
    import yaml

    return {k.value: (v.value, v.start_mark.line + 1) for k, v in node.value
            if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)}


def _purls(node: Any) -> list[tuple[str, int]]:
    """The PyPI names a conda package's `purls:` maps it to (`pkg:pypi/torch?source=...`), with their lines."""
    import yaml

    out = []
    for key, value in node.value:
        if key.value == "purls" and isinstance(value, yaml.SequenceNode):
            for item in value.value:
                text = str(item.value)
                if text.startswith("pkg:pypi/"):
                    out.append((text[len("pkg:pypi/"):].split("?")[0].split("@")[0], item.start_mark.line + 1))
    return out


def _conda_name_version(fields: dict[str, tuple[str, int]]) -> tuple[str, str]:
    """(name, version) of a conda package: its own fields (lock version 4 and 5), else its file name
    (`pytorch-2.5.1-py3.12_cuda12.4_cudnn9.1.0_0.tar.bz2`: name-version-build, version 6)."""
    if "name" in fields and "version" in fields:
        return fields["name"][0], str(fields["version"][0])
    url = (fields.get("conda") or fields.get("url") or ("", 0))[0]
    stem = url.rsplit("/", 1)[-1].removesuffix(".conda").removesuffix(".tar.bz2")
    parts = stem.rsplit("-", 2)
    return (parts[0], parts[1]) if len(parts) == 3 else ("", "")


def read_lock(reader: Any, file: Path, text: str) -> None:
    """Every Python package of a pixi.lock into `reader` (pins._Reader), each an exact pin: PyPI packages
    by name and version, conda packages that the lock maps to a PyPI name (`purls:`) at the conda
    version. Conda packages that are no Python distribution (libgcc, cuda-cudart) are left out."""
    import yaml

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise CannotMeasure(f"{file}: cannot parse: {exc}") from exc
    if not isinstance(root, yaml.MappingNode):
        raise CannotMeasure(f"{file}: not a pixi lock file (no mapping at the top)")
    packages = next((v for k, v in root.value if k.value == "packages" and isinstance(v, yaml.SequenceNode)), None)
    for node in packages.value if packages is not None else []:
        if not isinstance(node, yaml.MappingNode):
            continue
        fields = _scalars(node)
        kind = fields.get("kind", ("pypi" if "pypi" in fields else "conda" if "conda" in fields else "", 0))[0]
        if kind == "pypi" and "name" in fields and "version" in fields:
            name, line = fields["name"]
            reader._lock_pin(file, line, name, str(fields["version"][0]), None)
        elif kind == "conda":
            _, version = _conda_name_version(fields)
            for name, line in _purls(node):
                if version:
                    reader._lock_pin(file, line, name, version, "conda")
