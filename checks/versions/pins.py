"""The team's pins, read where preflight is started: requirements files (with pip's -r/-c
includes), pyproject.toml ([project] and Poetry's tables), the lock files of uv, Poetry and Pipenv,
and conda environment files (environment.yml, conda.yaml: any YAML file with `dependencies:`).

Requirement lines are parsed with `packaging`, as pip reads them; only the line-level syntax of
requirements files (comments, continuations, options) is handled here. Each pin becomes an entry
(where, line, name, specifier, exact, kind, source), which versions.pinned compares on every node
with what is installed there.
"""

from __future__ import annotations

import os
import shlex
import urllib.parse
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from preflight.core.bounded import InputError, load_json, load_toml
from preflight.core.check import CannotMeasure
from preflight_checks.versions.pin_files import QuotedStrings, TomlLines, conda_spec, is_conda_environment, poetry_specifier, yaml_sequence_lines

# ------------------------------------------------------------------------------------ parsing

# What a pin file may be, read at most this far: a real lock file of a large project is a few MiB; a
# larger one (a 25 MB line of junk) is refused, with the limit named, before it is parsed. YAML is
# parsed by a slower reader and gets less, as `discover` gives it; a requirement (its options, such
# as the --hash list of a pinned line, aside) is short.
MAX_PIN_FILE_BYTES = 8 << 20
MAX_YAML_BYTES = 128 << 10  # a conda environment file is a few KiB
MAX_LINE_CHARS = 8192
_INCLUDE_OPTIONS = {"-r": "requirement", "--requirement": "requirement", "-c": "constraint", "--constraint": "constraint"}
_EDITABLE_OPTIONS = ("-e", "--editable")


def _strip_comment(line: str) -> str:
    # pip: "#" starts a comment at the start of a line or after whitespace (so "#egg=" stays).
    for pos, char in enumerate(line):
        if char == "#" and (pos == 0 or line[pos - 1].isspace()):
            return line[:pos]
    return line


def _expand_env(text: str) -> str:
    # pip expands ${NAME} (that form only) in requirements files, e.g. for private index tokens.
    out, pos = [], 0
    while True:
        start = text.find("${", pos)
        end = text.find("}", start + 2) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start])
        name = text[start + 2:end]
        out.append(os.environ.get(name, text[start:end + 1]))
        pos = end + 1


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, line) with comments removed and backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += raw
        line = _strip_comment(pending).strip()
        pending = ""
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, _strip_comment(pending).strip()))
    return lines


def _requirement_part(line: str) -> str:
    # pip's rule: the requirement is every token up to the first one that starts with "-"
    # (per-requirement options such as --hash=sha256:... follow it).
    kept = []
    for token in line.split():
        if token.startswith("-"):
            break
        kept.append(token)
    return " ".join(kept).strip()


def _looks_like_location(text: str) -> bool:
    return "://" in text or text.startswith((".", "/", "~")) or text.endswith((".whl", ".zip", ".tar.gz", ".tgz"))


def _wheel_version(location: str) -> tuple[str, str] | None:
    """(name, version) from a wheel file name in a URL or path, which pins the version exactly."""
    filename = urllib.parse.unquote(urllib.parse.urlparse(location).path.rsplit("/", 1)[-1])
    if not filename.endswith(".whl"):
        return None
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return str(name), str(version)


# Lock files, by name, and the _Reader method that reads each.
LOCK_READERS = {"uv.lock": "_read_toml_lock", "poetry.lock": "_read_toml_lock", "Pipfile.lock": "_read_pipfile_lock",
                "environment.yml": "_read_conda_environment", "environment.yaml": "_read_conda_environment",
                "pixi.toml": "_read_pixi_manifest", "pixi.lock": "_read_pixi_lock"}
# conda package names that differ from the Python distribution's
CONDA_NAMES = {"pytorch": "torch", "pytorch-cuda": "pytorch-cuda"}


def _toml(file: Path, text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return load_toml(text, str(file))
    except InputError as exc:
        raise CannotMeasure(f"{file}: cannot parse: {exc.reason}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CannotMeasure(f"{file}: cannot parse: {exc}") from exc


class _Reader:
    """Reads requirement sources into entries (one per requirement line) and skipped lines."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self.files: list[str] = []
        self._seen: set[Path] = set()

    def read(self, path: str, source: str = "requirement", included_from: str | None = None) -> None:
        file = Path(os.path.expanduser(path))
        where = f" (included from {included_from})" if included_from else ""
        if not file.is_file():
            raise CannotMeasure(f"requirements file {path} does not exist{where}")
        resolved = file.resolve()
        if resolved in self._seen:
            return  # included twice, or an include cycle
        self._seen.add(resolved)
        self.files.append(str(file))
        limit = MAX_YAML_BYTES if file.suffix in (".yml", ".yaml") else MAX_PIN_FILE_BYTES
        try:
            with open(file, "rb") as handle:
                data = handle.read(limit + 1)
            if len(data) > limit:
                raise CannotMeasure(f"requirements file {path}{where} is larger than {limit >> 10:,} KiB, the most "
                                    "preflight reads of a pin file: not read")
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CannotMeasure(f"cannot read requirements file {path}{where}: {exc}") from exc
        if file.name in LOCK_READERS:
            getattr(self, LOCK_READERS[file.name])(file, text)
        elif file.suffix in (".yml", ".yaml") and is_conda_environment(text):
            self._read_conda_environment(file, text)  # conda.yaml, env.yml: any name
        elif file.name == "pyproject.toml" or file.suffix == ".toml":
            self._read_pyproject(file, text)
        else:
            self._read_requirements(file, text, source)

    def _read_requirements(self, file: Path, text: str, source: str) -> None:
        for number, line in _logical_lines(_expand_env(text)):
            where = f"{file}:{number}"
            if line.startswith("-"):
                self._option(file, number, line, source)
                continue
            spec = _requirement_part(line)  # without its options: a pinned line's --hash list can run to 10 KiB
            if len(spec) > MAX_LINE_CHARS:
                raise CannotMeasure(f"{where}: a requirement of {len(spec):,} characters is not one (at most "
                                    f"{MAX_LINE_CHARS:,})")
            if _looks_like_location(spec) and "@" not in spec.split("://")[0]:
                wheel = _wheel_version(spec)
                if wheel:
                    self._add(file, number, line, Requirement(f"{wheel[0]}=={wheel[1]}"), source, kind_hint="wheel")
                else:
                    self.skipped.append({"where": where, "line": line, "reason": "a URL or path without a version; not compared"})
                continue
            try:
                requirement = Requirement(spec)
            except InvalidRequirement as exc:
                raise CannotMeasure(f"{where}: cannot parse {line!r}: {exc}") from exc
            self._add(file, number, line, requirement, source)

    def _option(self, file: Path, number: int, line: str, source: str) -> None:
        where = f"{file}:{number}"
        try:
            tokens = shlex.split(line)
        except ValueError as exc:
            raise CannotMeasure(f"{where}: cannot parse {line!r}: {exc}") from exc
        option, value = tokens[0], tokens[1] if len(tokens) > 1 else None
        if "=" in option and option.startswith("--"):
            option, value = option.split("=", 1)
        elif option[:2] in ("-r", "-c", "-e") and len(option) > 2:
            option, value = option[:2], option[2:]
        if option in _INCLUDE_OPTIONS:
            if not value:
                raise CannotMeasure(f"{where}: {option} without a file name")
            if "://" in value:
                raise CannotMeasure(f"{where}: {option} {value}: remote requirement files are not fetched")
            target = Path(os.path.expanduser(value))
            if not target.is_absolute():
                target = file.parent / target
            include_source = "constraint" if _INCLUDE_OPTIONS[option] == "constraint" else source
            self.read(str(target), include_source, included_from=where)
        elif option in _EDITABLE_OPTIONS:
            self.skipped.append({"where": where, "line": line, "reason": "an editable install; its version is the checkout's"})
        else:
            self.skipped.append({"where": where, "line": line, "reason": "a pip option, not a requirement"})

    def _read_pyproject(self, file: Path, text: str) -> None:
        data = _toml(file, text)
        where = TomlLines(text)
        project = data.get("project") or {}
        # (optional label, the table the array is in, its key, its entries)
        groups: list[tuple[str | None, str, str, list[Any]]] = [(None, "project", "dependencies",
                                                                  project.get("dependencies") or [])]
        for name, deps in (project.get("optional-dependencies") or {}).items():
            table = "project.optional-dependencies" if "project.optional-dependencies" in where.tables else "project"
            groups.append((f"extra {name}", table, name, deps))
        groups += [(f"group {name}", "dependency-groups", name, deps)
                   for name, deps in (data.get("dependency-groups") or {}).items()]
        poetry = (data.get("tool") or {}).get("poetry") or {}
        if not any(deps for *_, deps in groups) and not _poetry_tables(poetry):
            raise CannotMeasure(f"{file}: no [project] dependencies, optional-dependencies, [dependency-groups] "
                                "or [tool.poetry] dependencies to read")
        for optional, table, key, deps in groups:
            strings = [dep for dep in deps if isinstance(dep, str)]  # {include-group = "..."} entries are not pins
            for dep, number in zip(strings, where.items(where.key(table, key), strings)):
                try:
                    requirement = Requirement(dep)
                except InvalidRequirement as exc:
                    raise CannotMeasure(f"{file}:{number}: cannot parse {dep!r}: {exc}") from exc
                self._add(file, number, dep, requirement, "requirement", optional=optional)
        for optional, table, deps in _poetry_tables(poetry):
            for name, value in deps.items():
                if name.lower() == "python":
                    continue
                self._poetry_pin(file, where, table, name, value, optional)

    def _poetry_pin(self, file: Path, where: TomlLines, table: str, name: str, value: Any,
                    optional: str | None) -> None:
        number = where.key(table, name)
        line = where.lines[number - 1].strip() if number else f"{name} = {value!r}"
        if isinstance(value, list):  # several constraints by marker: not one pin
            self.skipped.append({"where": f"{file}:{number}", "line": line,
                                 "reason": "constraints that differ by marker or Python version; not compared"})
            return
        table_value = value if isinstance(value, dict) else {"version": value}
        if {"git", "path", "url"} & set(table_value):
            self.skipped.append({"where": f"{file}:{number}", "line": line,
                                 "reason": "a VCS or path dependency without a version; not compared"})
            return
        specifier = poetry_specifier(str(table_value.get("version", "*")))
        if specifier is None:
            self.skipped.append({"where": f"{file}:{number}", "line": line,
                                 "reason": "a Poetry constraint with no PEP 440 form ('||'); not compared"})
            return
        markers = f"; {table_value['markers']}" if table_value.get("markers") else ""
        try:
            requirement = Requirement(f"{name}{specifier}{markers}")
        except InvalidRequirement as exc:
            raise CannotMeasure(f"{file}:{number}: cannot parse {line!r}: {exc}") from exc
        self._add(file, number, line, requirement, "requirement",
                  optional=optional or ("optional" if table_value.get("optional") else None))

    # lock files: every entry is an exact pin, of every package of every platform the lock covers
    def _read_toml_lock(self, file: Path, text: str) -> None:
        """uv.lock and poetry.lock: [[package]] tables with a name and a version."""
        data = _toml(file, text)
        # The i-th [[package]] table is the i-th package: its name is on the line after the header,
        # never found by searching for `name = "torch"`, which inline dependency tables hold too.
        headers = TomlLines(text).array_tables.get("package") or []
        for index, package in enumerate(data.get("package") or []):
            name, version = package.get("name"), package.get("version")
            source = package.get("source") or {}
            if not name or not version or (isinstance(source, dict) and ({"editable", "virtual"} & set(source))):
                continue  # the project itself, or a path checkout: its version is the checkout's
            number = headers[index] + 1 if index < len(headers) else 0
            optional = "optional" if package.get("optional") else None
            self._lock_pin(file, number, name, str(version), optional)

    def _read_pipfile_lock(self, file: Path, text: str) -> None:
        try:
            data = load_json(text, str(file))
        except InputError as exc:
            raise CannotMeasure(f"{file}: cannot parse: {exc.reason}") from None
        if not isinstance(data, dict):
            raise CannotMeasure(f"{file}: cannot parse: not a JSON object")
        strings = QuotedStrings(text.splitlines())  # each name's line by lookup: linear on a one-line lock
        for section, optional in (("default", None), ("develop", "develop")):
            cursor = strings.first(section) or 1
            for name, info in (data.get(section) or {}).items():
                version = str((info or {}).get("version") or "")
                number = strings.first(name, cursor) or cursor - 1
                cursor = max(cursor, number)
                if not version.startswith("=="):
                    self.skipped.append({"where": f"{file}:{number}", "line": name,
                                         "reason": "a VCS or path dependency without a version; not compared"})
                    continue
                self._lock_pin(file, number, name, version[2:], optional)

    def _read_conda_environment(self, file: Path, text: str) -> None:
        """A conda environment file (environment.yml, conda.yaml, ...): its `dependencies:` list of conda
        match specs, read by conda's rules, and the `pip:` list in it, read as requirement lines."""
        try:
            items = yaml_sequence_lines(text, "dependencies")
        except ValueError as exc:
            raise CannotMeasure(f"{file}: cannot parse: {exc}") from exc
        for number, item, sub in items:
            if sub is not None:
                if item == "pip":
                    for sub_number, body in sub:
                        self._read_requirements(file, "\n" * (sub_number - 1) + body, "requirement")
                continue
            self.conda_item(file, number, str(item))

    def conda_item(self, file: Path, number: int, item: str, line: str | None = None, optional: str = "conda") -> None:
        """One conda match spec (`pytorch=2.1.0=py3.10_cuda12.1_0`), as an entry or a skipped line."""
        spec = conda_spec(item)
        if spec is None:
            self.skipped.append({"where": f"{file}:{number}", "line": line or item,
                                 "reason": "a conda match spec preflight cannot compare"})
            return
        name = CONDA_NAMES.get(spec["name"], spec["name"])
        if name in ("python", "pip"):
            return
        if not spec["specifier"]:
            self.skipped.append({"where": f"{file}:{number}", "line": line or item,
                                 "reason": "a conda spec without a version; not compared"})
            return
        try:
            requirement = Requirement(f"{name}{spec['specifier']}")
        except InvalidRequirement:
            self.skipped.append({"where": f"{file}:{number}", "line": line or item,
                                 "reason": "not a Python version (a conda-only package); not compared"})
            return
        # Conda lists libraries that are no Python distribution (cudatoolkit, openssl): one that is
        # not installed is a note, as an extra's package is.
        self._add(file, number, line or item, requirement, "lock" if spec["exact"] else "requirement",
                  optional=optional, kind_hint="conda" + (f" build {spec['build']}" if spec["build"] else ""))

    def _read_pixi_manifest(self, file: Path, text: str) -> None:
        from preflight_checks.versions.pixi import read_manifest

        read_manifest(self, file, _toml(file, text), TomlLines(text))

    def _read_pixi_lock(self, file: Path, text: str) -> None:
        from preflight_checks.versions.pixi import read_lock

        read_lock(self, file, text)

    def _lock_pin(self, file: Path, number: int, name: str, version: str, optional: str | None,
                  line: str | None = None) -> None:
        try:
            requirement = Requirement(f"{name}=={version}")
        except InvalidRequirement:
            self.skipped.append({"where": f"{file}:{number}", "line": line or f"{name} {version}",
                                 "reason": "not a Python requirement; not compared"})
            return
        self._add(file, number, line or f"{name}=={version}", requirement, "lock", optional=optional)

    def _add(self, file: Path, number: int, line: str, requirement: Requirement, source: str,
             optional: str | None = None, kind_hint: str | None = None) -> None:
        specifiers = list(requirement.specifier)
        exact = None
        if len(specifiers) == 1 and specifiers[0].operator in ("==", "===") and "*" not in specifiers[0].version:
            exact = specifiers[0].version
        if requirement.url:
            wheel = _wheel_version(requirement.url)
            exact = wheel[1] if wheel else None
            kind = "exact" if wheel else "url"
            specifier = f"=={exact}" if wheel else ""
        else:
            kind = "exact" if exact else ("range" if specifiers else "unpinned")
            specifier = str(requirement.specifier)
        applies = True
        if requirement.marker is not None:
            try:
                applies = requirement.marker.evaluate({"extra": ""})
            except Exception:  # noqa: BLE001 - an unknown marker variable: keep the line
                applies = True
        self.entries.append({
            "where": f"{file}:{number}", "line": " ".join(line.split()), "name": canonicalize_name(requirement.name),
            "specifier": specifier, "exact": exact, "kind": kind, "source": source,
            "marker": str(requirement.marker) if requirement.marker else None, "applies": bool(applies),
            "optional": optional, "from": kind_hint,
        })


def _poetry_tables(poetry: dict[str, Any]) -> list[tuple[str | None, str, dict[str, Any]]]:
    """(optional label, table name, entries) of [tool.poetry.dependencies], its groups and dev-dependencies."""
    tables: list[tuple[str | None, str, dict[str, Any]]] = []
    if isinstance(poetry.get("dependencies"), dict):
        tables.append((None, "tool.poetry.dependencies", poetry["dependencies"]))
    if isinstance(poetry.get("dev-dependencies"), dict):
        tables.append(("group dev", "tool.poetry.dev-dependencies", poetry["dev-dependencies"]))
    for group, body in (poetry.get("group") or {}).items():
        if isinstance(body, dict) and isinstance(body.get("dependencies"), dict):
            tables.append((f"group {group}", f"tool.poetry.group.{group}.dependencies", body["dependencies"]))
    return [t for t in tables if t[2]]


def read_requirements(paths: list[str]) -> dict[str, Any]:
    """Entries and skipped lines of every file (following includes); raises CannotMeasure."""
    reader = _Reader()
    for path in paths:
        reader.read(path)
    return {"files": reader.files, "entries": reader.entries, "skipped": reader.skipped}




OWN_PYPROJECT = "it is preflight's own (preflight runs from this clone), not the training code's pins"


def is_preflight_source(directory: Path) -> bool:
    """True in the clone preflight itself runs from: its pyproject.toml is preflight's, not the team's."""
    import preflight

    try:
        return Path(preflight.__file__).resolve().parent.parent == directory.resolve()
    except OSError:
        return False


def discover(cwd: Path) -> list[Path]:
    """The pin files a training repository keeps at its top, in the directory preflight starts in
    (preflight's own pyproject.toml, when it starts in its own clone, is not the team's)."""
    found = sorted(p for p in cwd.glob("requirements*.txt") if p.is_file())
    own = is_preflight_source(cwd)
    found += [cwd / name for name in ("pyproject.toml", *LOCK_READERS)
              if (cwd / name).is_file() and not (own and name == "pyproject.toml")]
    # A conda environment may have any name (conda.yaml, env.yml): a YAML file with `dependencies:`.
    for path in sorted(list(cwd.glob("*.yml")) + list(cwd.glob("*.yaml"))):
        if path.is_file() and path not in found and path.stat().st_size <= MAX_YAML_BYTES:
            try:
                if is_conda_environment(path.read_text(encoding="utf-8", errors="replace")):
                    found.append(path)
            except OSError:
                continue
    return found


def gather(requirements: list[str], cwd: Path) -> dict[str, Any]:
    """The pins every node is compared with, read once where preflight starts.

    Configured files (relative to `cwd`) must be readable: CannotMeasure names the one that is not.
    Without any, the files `discover` finds are read; a pyproject.toml without dependencies is passed
    over (a library's, or a Poetry project's), and a found file that cannot be read is kept as an
    error for the check to report.
    """
    if requirements:
        paths = [str(cwd / os.path.expanduser(p)) if not os.path.isabs(os.path.expanduser(p)) else p
                 for p in requirements]
        pins = read_requirements(paths)
        return {**pins, "discovered": False, "cwd": str(cwd), "errors": []}
    reader = _Reader()
    errors = []
    for path in discover(cwd):
        try:
            reader.read(str(path))
        except CannotMeasure as exc:
            if path.name == "pyproject.toml" and "no [project] dependencies" in str(exc):
                reader.files.remove(str(path)) if str(path) in reader.files else None
                continue
            errors.append(str(exc))
    ignored = ([{"where": str(cwd / "pyproject.toml"), "reason": OWN_PYPROJECT}]
               if (cwd / "pyproject.toml").is_file() and is_preflight_source(cwd) else [])
    return {"files": reader.files, "entries": reader.entries, "skipped": reader.skipped, "discovered": True,
            "cwd": str(cwd), "errors": errors, "ignored": ignored}
