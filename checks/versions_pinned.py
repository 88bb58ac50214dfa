"""versions.pinned: the framework stack is locked, and what is installed is what was locked.

Reads the team's pins (requirements files with their -r/-c includes, a pyproject.toml, or the
output of `pip freeze`), compares them with the installed distributions, and records the whole
runtime stack (Python, torch with its CUDA/cuDNN/NCCL, tensorflow with its built CUDA/cuDNN, numpy,
NVIDIA driver, OS, kernel, glibc) as facts, which versions.consistency compares across nodes.

Requirement lines are parsed with `packaging`, as pip reads them; only the line-level syntax of
requirements files (comments, continuations, options) is handled here.
"""

from __future__ import annotations

import os
import platform
import shlex
import urllib.parse
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from preflight.check import CannotMeasure, Check, Expect, NodeContext, Outcome, measure
from preflight.model import Status, worst


def _default_frameworks() -> list[str]:
    # The packages whose drift changes numerics, kernels or checkpoint formats. numpy is here
    # because its 2.0 ABI break took down every extension built against 1.x. torchvision and
    # torchaudio ship compiled ops tied to one torch release; jaxlib likewise to jax.
    return ["torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "jax", "jaxlib", "numpy"]


@dataclass
class Params:
    # Where the team's pins live: requirements files (with -r/-c includes), pyproject.toml files,
    # or saved `pip freeze` output. Relative paths are taken from the working directory.
    requirements: list[str] = field(default_factory=list)
    # Packages that must be pinned exactly (==) and match exactly; any other mismatch is WARN.
    frameworks: list[str] = field(default_factory=_default_frameworks)
    # A framework that is installed but that no file mentions is as unpinned as a bare `torch` line.
    require_installed_frameworks_pinned: bool = True
    # Probing torch or tensorflow for their CUDA/cuDNN/NCCL versions (tensorflow's import takes seconds).
    probe_timeout_s: float = 120.0


# ------------------------------------------------------------------------------------ parsing

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
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CannotMeasure(f"cannot read requirements file {path}{where}: {exc}") from exc
        if file.name == "pyproject.toml" or file.suffix == ".toml":
            self._read_pyproject(file, text)
        else:
            self._read_requirements(file, text, source)

    def _read_requirements(self, file: Path, text: str, source: str) -> None:
        for number, line in _logical_lines(_expand_env(text)):
            where = f"{file}:{number}"
            if line.startswith("-"):
                self._option(file, number, line, source)
                continue
            spec = _requirement_part(line)
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
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise CannotMeasure(f"{file}: cannot parse: {exc}") from exc
        project = data.get("project") or {}
        groups: list[tuple[str | None, list[Any]]] = [(None, project.get("dependencies") or [])]
        groups += [(f"extra {name}", deps) for name, deps in (project.get("optional-dependencies") or {}).items()]
        groups += [(f"group {name}", deps) for name, deps in (data.get("dependency-groups") or {}).items()]
        if not any(deps for _, deps in groups):
            raise CannotMeasure(f"{file}: no [project] dependencies, optional-dependencies or [dependency-groups] "
                                "to read (Poetry's [tool.poetry] tables are not read)")
        lines = text.splitlines()
        for optional, deps in groups:
            for dep in deps:
                if not isinstance(dep, str):
                    continue  # {include-group = "..."} entries of dependency groups
                number = _line_of(lines, dep)
                try:
                    requirement = Requirement(dep)
                except InvalidRequirement as exc:
                    raise CannotMeasure(f"{file}:{number}: cannot parse {dep!r}: {exc}") from exc
                self._add(file, number, dep, requirement, "requirement", optional=optional)

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


def _line_of(lines: list[str], dep: str) -> int:
    for quote in ('"', "'"):
        needle = f"{quote}{dep}{quote}"
        for number, line in enumerate(lines, start=1):
            if needle in line:
                return number
    return 0


def read_requirements(paths: list[str]) -> dict[str, Any]:
    """Entries and skipped lines of every file (following includes); raises CannotMeasure."""
    reader = _Reader()
    for path in paths:
        reader.read(path)
    return {"files": reader.files, "entries": reader.entries, "skipped": reader.skipped}


# -------------------------------------------------------------------------------------- stack


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _module_distribution(module: str) -> str | None:
    """The distribution that provides an importable module (tensorflow comes as tensorflow-cpu, ...)."""
    try:
        names = metadata.packages_distributions().get(module) or []
    except Exception:  # noqa: BLE001 - a broken metadata entry must not cost the stack
        names = []
    return str(canonicalize_name(names[0])) if names else None


def _os_release() -> str | None:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"').strip("'")
        return values.get("PRETTY_NAME") or " ".join(filter(None, (values.get("NAME"), values.get("VERSION_ID")))) or None
    return None


def _glibc() -> str | None:
    name, version = platform.libc_ver()
    if name == "glibc" and version:
        return version
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None
    return text.split()[-1] if text.startswith("glibc") else None


# The stack fields versions.consistency compares, in report order.
STACK_FIELDS = ("python", "torch", "torch_cuda", "cudnn", "nccl", "tensorflow", "tensorflow_cuda", "tensorflow_cudnn",
                "jax", "numpy", "driver", "cuda_driver", "os", "kernel", "glibc")


def collect_stack(ctx: Any, probe_timeout_s: float) -> dict[str, Any]:
    from preflight.workers.gpu_nvml import nvml_facts
    from preflight.workers.gpu_probe import framework_installed, run_probe

    stack: dict[str, Any] = dict.fromkeys(STACK_FIELDS)
    errors: dict[str, str] = {}
    stack["python"] = platform.python_version()
    stack["torch"] = installed_version("torch")
    if framework_installed("torch"):
        probe = run_probe(ctx, "torch", [], min(probe_timeout_s, ctx.time_left() - 5))
        if probe.get("error"):
            errors["torch"] = probe["error"]
        stack["torch"] = stack["torch"] or probe.get("version")
        stack["torch_cuda"], stack["cudnn"], stack["nccl"] = probe.get("cuda"), probe.get("cudnn"), probe.get("nccl")
        if probe.get("hip"):
            stack["torch_hip"] = probe["hip"]
    tf_distribution = _module_distribution("tensorflow")
    stack["tensorflow"] = installed_version(tf_distribution) if tf_distribution else None
    stack["tensorflow_distribution"] = tf_distribution
    if framework_installed("tensorflow"):
        probe = run_probe(ctx, "tensorflow", [], min(probe_timeout_s, ctx.time_left() - 5))
        if probe.get("error"):
            errors["tensorflow"] = probe["error"]
        stack["tensorflow"] = stack["tensorflow"] or probe.get("version")
        stack["tensorflow_cuda"], stack["tensorflow_cudnn"] = probe.get("cuda"), probe.get("cudnn")
    stack["jax"] = installed_version("jax")
    stack["numpy"] = installed_version("numpy")
    nvml = nvml_facts(with_gpus=False)
    stack["driver"], stack["cuda_driver"] = nvml.get("driver_version"), nvml.get("cuda_driver_version")
    if not nvml.get("available"):
        errors["driver"] = nvml.get("error") or "NVML unavailable"
    stack["os"] = _os_release()
    stack["kernel"] = platform.release()
    stack["glibc"] = _glibc()
    stack["errors"] = errors
    return stack


def collect_pins(params: Params) -> dict[str, Any]:
    """The pins of the configured files and the installed version of every package they name."""
    facts: dict[str, Any] = {"requirements_files": list(params.requirements)}
    pins: dict[str, Any] = {"files": [], "entries": [], "skipped": []}
    if params.requirements:
        try:
            pins = read_requirements(params.requirements)
        except CannotMeasure as exc:
            # Keep the stack (the cross-node comparison needs it) and let evaluate say ERROR.
            facts["requirements_error"] = str(exc)
    facts["pins"] = pins
    names = {e["name"] for e in pins["entries"]} | {canonicalize_name(f) for f in params.frameworks}
    facts["installed"] = {name: installed_version(name) for name in sorted(names)}
    return facts


# -------------------------------------------------------------------------------------- check


class VersionsPinned(Check):
    id = "versions.pinned"
    title = "Framework versions pinned and installed as pinned"
    tags = ("node", "software")
    why = (
        "An unpinned framework is upgraded by the next image build without anyone deciding it: new kernels, "
        "new numerics, new checkpoint formats, a CUDA build the driver cannot run. A pinned one that is not what "
        "is installed means the environment is not the one that was tested. The recorded stack is what "
        "versions.consistency compares across nodes, because nodes that disagree hang or diverge together."
    )
    remediation = (
        "Pin every framework with == in the requirements (torch==X.Y.Z, with the index URL of the CUDA build).",
        "Rebuild the image or virtual environment from the pinned requirements (pip install -r requirements.txt), "
        "or update the pin on purpose if the installed version is the intended one.",
        "Keep `pip freeze > requirements.lock` of the tested environment and install from it on every node.",
    )
    Params = Params
    timeout_s = 240.0

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        return {"stack": collect_stack(ctx, params.probe_timeout_s), **collect_pins(params)}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        stack = facts.get("stack") or {}
        stack_text = describe_stack(stack)
        if facts.get("requirements_error"):
            return Outcome(Status.ERROR, f"could not measure: {facts['requirements_error']}",
                           details=[f"runtime stack: {stack_text}"],
                           remediation=["Fix the file or the path in versions.requirements (relative paths are taken "
                                        "from the directory preflight runs in; -r/-c includes from the including file)."])
        if not facts.get("requirements_files"):
            return Outcome(Status.PASS, f"no requirements file configured, nothing was compared; recorded the stack: {stack_text}",
                           [measure("pins compared", 0, "")], details=_stack_errors(stack))
        return _judge_pins(facts, params, stack_text)


def describe_stack(stack: dict[str, Any]) -> str:
    parts = [f"python {stack.get('python')}"]
    if stack.get("torch"):
        extras = [f"CUDA {stack['torch_cuda']}" if stack.get("torch_cuda") else "no CUDA"]
        extras += [f"cuDNN {stack['cudnn']}"] if stack.get("cudnn") else []
        extras += [f"NCCL {stack['nccl']}"] if stack.get("nccl") else []
        parts.append(f"torch {stack['torch']} ({', '.join(extras)})")
    if stack.get("tensorflow"):
        name = stack.get("tensorflow_distribution") or "tensorflow"
        built = f" (CUDA {stack['tensorflow_cuda']})" if stack.get("tensorflow_cuda") else ""
        parts.append(f"{name} {stack['tensorflow']}{built}")
    for key in ("jax", "numpy"):
        if stack.get(key):
            parts.append(f"{key} {stack[key]}")
    parts.append(f"driver {stack['driver']}" if stack.get("driver") else "no NVIDIA driver")
    parts += [p for p in (stack.get("os"), f"kernel {stack.get('kernel')}", f"glibc {stack.get('glibc')}") if p]
    return ", ".join(parts)


def _stack_errors(stack: dict[str, Any]) -> list[str]:
    return [f"{name}: {error}" for name, error in sorted((stack.get("errors") or {}).items()) if name != "driver"]


def _satisfies(specifier: str, installed: str) -> bool | None:
    """PEP 440 matching as pip does it (==2.4.0 accepts 2.4.0+cu121); None if unparseable."""
    try:
        return SpecifierSet(specifier).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        # A legacy version string: only an exact textual pin can be judged.
        if specifier.startswith("=="):
            return specifier[2:].strip() == installed
        return None


def _judge_pins(facts: dict[str, Any], params: Params, stack_text: str) -> Outcome:
    pins = facts.get("pins") or {}
    installed: dict[str, str | None] = facts.get("installed") or {}
    frameworks = {canonicalize_name(f) for f in params.frameworks}
    problems: list[tuple[Status, str]] = []
    notes: list[str] = []
    entries = [e for e in pins.get("entries") or [] if e.get("applies", True)]
    for entry in pins.get("entries") or []:
        if not entry.get("applies", True):
            notes.append(f"{entry['where']}: {entry['line']!r} does not apply here ({entry['marker']})")
    for skipped in pins.get("skipped") or []:
        notes.append(f"{skipped['where']}: {skipped['line']!r} skipped: {skipped['reason']}")

    by_name: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry["name"], []).append(entry)

    compared = mismatched = 0
    framework_pins: list[str] = []
    for name, group in sorted(by_name.items()):
        is_framework = name in frameworks
        have = installed.get(name)
        exact = [e for e in group if e["kind"] == "exact"]
        if is_framework and not exact:
            lines = "; ".join(f"{e['where']} {e['line']!r}" for e in group)
            problems.append((Status.WARN, f"{name} is not pinned exactly (==): {lines}"))
        for entry in group:
            if entry["kind"] in ("unpinned", "url"):
                continue
            where = f"{entry['where']} {entry['line']!r}"
            if have is None:
                if entry.get("optional") or entry["source"] == "constraint":
                    # An extra or dependency group that is not installed, or a constraint on a
                    # package nothing asked for, is normal.
                    notes.append(f"{name} is not installed ({entry.get('optional') or 'constraint'}: {where})")
                    continue
                compared += 1
                mismatched += 1
                status = Status.FAIL if is_framework else Status.WARN
                problems.append((status, f"{name} is pinned ({where}) but not installed"))
                continue
            compared += 1
            ok = _satisfies(entry["specifier"], have)
            if ok is None:
                notes.append(f"{name} {have}: version not comparable with {entry['specifier']} ({entry['where']})")
            elif not ok:
                mismatched += 1
                # Frameworks must match: their drift changes kernels, numerics and checkpoints. Any
                # other package that drifts is reported, not blocking: most drift in utilities is
                # harmless, and a team that depends on one adds it to `frameworks`.
                status = Status.FAIL if is_framework else Status.WARN
                wanted = "pinned" if entry["kind"] == "exact" else "requires"
                problems.append((status, f"{name}: {wanted} {entry['specifier']} ({entry['where']}), installed {have}"))
            elif is_framework and entry["kind"] == "exact":
                framework_pins.append(f"{name} {have}")

    if params.require_installed_frameworks_pinned:
        for name in sorted(frameworks):
            if installed.get(name) and name not in by_name:
                problems.append((Status.WARN, f"{name} {installed[name]} is installed but no requirements file pins it"))

    measurements = [measure("pins compared", compared, ""), measure("pins not matching the installed version", mismatched, "",
                                                                     at_most=0)]
    status = worst([s for s, _ in problems], default=Status.PASS)
    details = [t for _, t in problems] + notes + _stack_errors(facts.get("stack") or {})
    files = ", ".join(pins.get("files") or facts.get("requirements_files") or [])
    if problems:
        summary = "; ".join(t for s, t in problems if s is status)
    else:
        pinned = f"; frameworks pinned and installed: {', '.join(sorted(set(framework_pins)))}" if framework_pins else ""
        summary = f"{compared} pins from {files} match the installed packages{pinned}"
    details.append(f"runtime stack: {stack_text}")
    return Outcome(status, summary, measurements, details=details)
