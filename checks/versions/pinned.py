"""versions.pinned: the framework stack is locked, and what is installed is what was locked.

The team's pins (configured requirements files, or the requirements*.txt, pyproject.toml, uv.lock,
poetry.lock, Pipfile.lock or environment.yml found where preflight starts) are read once, on the
coordinator (preflight_checks.versions.pins), and travel to every node in the check's parameters: no node needs the
file. Each node compares them with its installed distributions, and records the whole runtime stack
(Python, torch with its CUDA/cuDNN/NCCL, tensorflow with its built CUDA/cuDNN, numpy, NVIDIA driver,
OS, kernel, glibc) as facts, which versions.consistency compares across nodes.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from preflight.core.check import CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import NodeContext
from preflight.core.model import Finding, Status
from preflight_checks.versions.pins import gather, read_requirements  # noqa: F401 - read_requirements is part of this module's API


def _default_frameworks() -> list[str]:
    # The packages whose drift changes numerics, kernels or checkpoint formats. numpy is here
    # because its 2.0 ABI break took down every extension built against 1.x. torchvision and
    # torchaudio ship compiled ops tied to one torch release; jaxlib likewise to jax.
    return ["torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "jax", "jaxlib", "numpy"]


@dataclass
class Params:
    # Where the team's pins live: requirements files (with -r/-c includes), pyproject.toml files,
    # or saved `pip freeze` output. Relative paths are taken from the working directory.
    requirements: list[str] = param(kind="path", factory=list,
                                    help=("files with the team's pins: requirements files, pyproject.toml or pip "
                                          "freeze output (paths)"))
    # Packages that must be pinned exactly (==) and match exactly; any other mismatch is WARN.
    frameworks: list[str] = param(kind="list", factory=_default_frameworks,
                                  help="packages that must be pinned exactly (==) and match exactly (names)")
    # A framework that is installed but that no file mentions is as unpinned as a bare `torch` line.
    require_installed_frameworks_pinned: bool = param(True, kind="flag",
                                                      help=("an installed framework that no file pins counts as "
                                                            "unpinned (true/false)"))
    # Probing torch or tensorflow for their CUDA/cuDNN/NCCL versions (tensorflow's import takes seconds).
    probe_timeout_s: float = param(120.0, kind="duration",
                                   help=("time allowed for importing each framework to read its CUDA/cuDNN/NCCL "
                                         "builds (seconds)"))
    # False: versions from package metadata only, without the CUDA/cuDNN/NCCL builds (no import).
    probe_builds: bool = param(True, kind="flag",
                               help=("import the frameworks to read their CUDA/cuDNN/NCCL builds; false: package "
                                     "metadata only (true/false)"))
    # The pins themselves, read by preflight where it starts (from `requirements`, or the lock files
    # it finds there) and sent to every node; not set by hand.
    pins: dict[str, Any] | None = param(None, kind="table",
                                        help=("the pins as read where preflight starts and sent to every node; not "
                                              "set by hand"))


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


def collect_stack(ctx: Any, probe_timeout_s: float, probe_builds: bool = True) -> dict[str, Any]:
    from preflight.workers.gpu_nvml import nvml_facts
    from preflight.launch.gpu_probe import framework_installed, run_probe

    stack: dict[str, Any] = dict.fromkeys(STACK_FIELDS)
    errors: dict[str, str] = {}
    stack["python"] = platform.python_version()
    stack["torch"] = installed_version("torch")
    if probe_builds and framework_installed("torch"):
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
    if probe_builds and framework_installed("tensorflow"):
        probe = run_probe(ctx, "tensorflow", [], min(probe_timeout_s, ctx.time_left() - 5))
        if probe.get("error"):
            errors["tensorflow"] = probe["error"]
        stack["tensorflow"] = stack["tensorflow"] or probe.get("version")
        stack["tensorflow_cuda"], stack["tensorflow_cudnn"] = probe.get("cuda"), probe.get("cudnn")
    stack["builds_probed"] = probe_builds
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
    """The pins (sent by the coordinator, or read here when the check runs on its own) and the
    installed version of every package they name."""
    facts: dict[str, Any] = {}
    pins: dict[str, Any] = {"files": [], "entries": [], "skipped": [], "errors": []}
    if params.pins is not None:
        pins = params.pins
    else:
        try:
            pins = gather(list(params.requirements), Path.cwd())
        except CannotMeasure as exc:
            # Keep the stack (the cross-node comparison needs it) and let evaluate say ERROR.
            facts["requirements_error"] = str(exc)
    facts["requirements_files"] = list(pins.get("files") or params.requirements)
    facts["pins"] = pins
    names = {e["name"] for e in pins.get("entries") or []} | {canonicalize_name(f) for f in params.frameworks}
    facts["installed"] = {name: installed_version(name) for name in sorted(names)}
    return facts


# -------------------------------------------------------------------------------------- check

REBUILD = ("Rebuild the image or virtual environment from the pinned files (pip install -r requirements.txt, uv sync, "
           "poetry install), or update the pin on purpose if the installed version is the intended one.")


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
    fixes = {
        "unreadable": ("Fix the file, or the path in versions.requirements (relative paths are taken from the "
                       "directory preflight starts in; -r/-c includes from the including file)."),
        "not-pinned": ("Start preflight in the training repository that holds the lock file, or name it with "
                       "--set versions.requirements='[\"path/to/requirements.txt\"]'; without one, write it: "
                       "pip freeze > requirements.txt (or uv lock, poetry lock)."),
        "framework-not-exact": "Pin the framework with == (e.g. torch==X.Y.Z, with the index URL of the CUDA build).",
        "framework-mismatch": REBUILD,
        "package-mismatch": REBUILD,
        "framework-not-installed": REBUILD,
        "package-not-installed": REBUILD,
        "framework-unpinned": "Add the installed framework's version (name==X.Y.Z) to the team's requirements or lock file.",
        "nothing-compared": "Pin the packages this node trains with (torch, tensorflow, numpy) in the team's requirements.",
    }
    Params = Params
    timeout_s = 240.0
    run_first = True
    hook = True
    # quick reads versions from package metadata only (no framework import, under a second); the
    # CUDA/cuDNN/NCCL builds need torch and tensorflow imported, seconds each, left to standard.
    levels = {"quick": {"timeout": 5, "probe_builds": False}}

    @classmethod
    def prepare_on_coordinator(cls, overrides: dict[str, Any], cwd: Path) -> dict[str, Any]:
        """Read the pins where preflight starts, once, for every node (see preflight.run.plan)."""
        if overrides.get("pins") is not None:
            return overrides
        try:
            pins = gather(list(overrides.get("requirements") or []), cwd)
        except CannotMeasure as exc:
            raise ValueError(f"{exc} (versions.pinned.requirements; relative paths are taken from {cwd})") from None
        return {**overrides, "pins": pins}

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        # Which stack entries are versions: what `preflight diff` lists as version changes (not builds_probed).
        return {"stack": collect_stack(ctx, params.probe_timeout_s, params.probe_builds),
                "stack_versions": [*STACK_FIELDS, "torch_hip"], **collect_pins(params)}

    image_source = "installed"

    def image(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The software stack as installed: driver, CUDA, NCCL, kernel, OS and framework versions."""
        stack = facts.get("stack") if isinstance(facts.get("stack"), dict) else {}
        return {"driver": stack.get("driver"), "cuda": stack.get("torch_cuda") or stack.get("tensorflow_cuda"),
                "cuda_driver": stack.get("cuda_driver"), "nccl": stack.get("nccl"), "kernel": stack.get("kernel"),
                "os": stack.get("os"), "torch": stack.get("torch"), "tensorflow": stack.get("tensorflow")}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        stack = facts.get("stack") or {}
        stack_text = describe_stack(stack)
        pins = facts.get("pins") or {}
        read_error = facts.get("requirements_error") or "; ".join(pins.get("errors") or [])
        if read_error:
            finding = self.finding("unreadable", Status.ERROR, f"could not measure: {read_error}")
            return outcome_from_findings([finding], passed="", details=[f"runtime stack: {stack_text}"])
        if not facts.get("requirements_files"):
            where = f" in {pins['cwd']}" if pins.get("cwd") else ""
            ignored = "".join(f"; {Path(i['where']).name} there was ignored: {i['reason']}"
                              for i in pins.get("ignored") or [])
            finding = self.finding(
                "not-pinned", Status.WARN,
                f"framework versions are not pinned anywhere preflight can see: no requirements*.txt, pyproject.toml, "
                f"uv.lock, poetry.lock, Pipfile.lock or environment.yml{where}{ignored}")
            return outcome_from_findings([finding], [measure("pins compared", 0, "")],
                                         passed="", details=[f"runtime stack: {stack_text}", *_stack_errors(stack)])
        return _judge_pins(facts, params, stack_text)


def describe_stack(stack: dict[str, Any]) -> str:
    parts = [f"python {stack.get('python')}"]
    if stack.get("torch"):
        unprobed = stack.get("builds_probed") is False
        extras = [f"CUDA {stack['torch_cuda']}" if stack.get("torch_cuda") else
                  "CUDA build not probed" if unprobed else "no CUDA"]
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


@dataclass
class _Tally:
    """What judging the pins adds up to: findings, notes, pins compared and mismatched, frameworks pinned."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0
    mismatched: int = 0
    framework_pins: list[str] = field(default_factory=list)

    def found(self, kind: str, level: Status, message: str, fix: str | None = None) -> None:
        """Add one finding of versions.pinned."""
        self.findings.append(VersionsPinned.finding(kind, level, message, fix=fix))


def _judge_locked(tally: _Tally, name: str, locked: list[dict[str, Any]], have: str | None, is_framework: bool) -> None:
    """A package a lock file locks (at one or several versions): installed as locked, or not."""
    if have is None:
        tally.notes.append(f"{name} is locked ({locked[0]['where']}) but not installed here")
        return
    tally.compared += 1
    if any(_satisfies(e["specifier"], have) for e in locked):
        tally.framework_pins += [f"{name} {have}"] if is_framework else []
    else:
        tally.mismatched += 1
        versions = ", ".join(dict.fromkeys(e["exact"] for e in locked))
        tally.found(f"{'framework' if is_framework else 'package'}-mismatch",
                    Status.FAIL if is_framework else Status.WARN,
                    f"{name}: locked {versions} ({locked[0]['where']}), installed {have}")


def _judge_entry(tally: _Tally, name: str, entry: dict[str, Any], have: str | None, is_framework: bool) -> None:
    """One requirement line against the installed version: not installed, matching, drifted or not comparable."""
    kind = "framework" if is_framework else "package"
    level = Status.FAIL if is_framework else Status.WARN
    where = f"{entry['where']} {entry['line']!r}"
    if have is None:
        if entry.get("optional") or entry["source"] == "constraint":
            # An extra or dependency group that is not installed, or a constraint on a
            # package nothing asked for, is normal.
            tally.notes.append(f"{name} is not installed ({entry.get('optional') or 'constraint'}: {where})")
            return
        tally.compared += 1
        tally.mismatched += 1
        tally.found(f"{kind}-not-installed", level, f"{name} is pinned ({where}) but not installed")
        return
    tally.compared += 1
    ok = _satisfies(entry["specifier"], have)
    if ok is None:
        tally.notes.append(f"{name} {have}: version not comparable with {entry['specifier']} ({entry['where']})")
    elif not ok:
        tally.mismatched += 1
        # Frameworks must match: their drift changes kernels, numerics and checkpoints. Any
        # other package that drifts is reported, not blocking: most drift in utilities is
        # harmless, and a team that depends on one adds it to `frameworks`.
        wanted = "pinned" if entry["kind"] == "exact" else "requires"
        tally.found(f"{kind}-mismatch", level, f"{name}: {wanted} {entry['specifier']} ({entry['where']}), "
                    f"installed {have}")
    elif is_framework and entry["kind"] == "exact":
        tally.framework_pins.append(f"{name} {have}")


def _judge_package(tally: _Tally, name: str, group: list[dict[str, Any]], have: str | None, is_framework: bool) -> None:
    """Every pin of one package: a framework not pinned exactly, its lock-file versions, then each other line."""
    if is_framework and not any(e["kind"] == "exact" for e in group):
        lines = "; ".join(f"{e['where']} {e['line']!r}" for e in group)
        tally.found("framework-not-exact", Status.WARN, f"{name} is not pinned exactly (==): {lines}",
                    f"Pin {name} with == (e.g. {name}==X.Y.Z, with the index URL of the CUDA build).")
    # A lock file may lock one package at several versions (one per platform or Python): it is
    # installed as locked when it matches any of them.
    locked = [e for e in group if e["source"] == "lock" and e["kind"] == "exact"]
    if locked:
        group = [e for e in group if e not in locked]
        _judge_locked(tally, name, locked, have, is_framework)
    for entry in group:
        if entry["kind"] not in ("unpinned", "url"):
            _judge_entry(tally, name, entry, have, is_framework)


def _judge_pins(facts: dict[str, Any], params: Params, stack_text: str) -> Outcome:
    """The pins of the team's files against the installed versions. Pure."""
    pins = facts.get("pins") or {}
    installed: dict[str, str | None] = facts.get("installed") or {}
    frameworks = {canonicalize_name(f) for f in params.frameworks}
    tally = _Tally()
    entries = [e for e in pins.get("entries") or [] if e.get("applies", True)]
    for entry in pins.get("entries") or []:
        if not entry.get("applies", True):
            tally.notes.append(f"{entry['where']}: {entry['line']!r} does not apply here ({entry['marker']})")
    for skipped in pins.get("skipped") or []:
        tally.notes.append(f"{skipped['where']}: {skipped['line']!r} skipped: {skipped['reason']}")

    by_name: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry["name"], []).append(entry)
    for name, group in sorted(by_name.items()):
        _judge_package(tally, name, group, installed.get(name), name in frameworks)

    if params.require_installed_frameworks_pinned:
        for name in sorted(frameworks):
            if installed.get(name) and name not in by_name:
                tally.found("framework-unpinned", Status.WARN,
                            f"{name} {installed[name]} is installed but no requirements file pins it",
                            f"Add {name}=={installed[name]} to the team's requirements or lock file.")
    files = ", ".join(pins.get("files") or facts.get("requirements_files") or [])
    if not tally.compared and not tally.findings:
        tally.found("nothing-compared", Status.WARN,
                    f"no pin in {files} names an installed package: nothing was compared")

    measurements = [measure("pins compared", tally.compared, ""),
                    measure("pins not matching the installed version", tally.mismatched, "", at_most=0)]
    framework_pins = tally.framework_pins
    pinned = f"; frameworks pinned and installed: {', '.join(sorted(set(framework_pins)))}" if framework_pins else ""
    notes = tally.notes + _stack_errors(facts.get("stack") or {}) + [f"runtime stack: {stack_text}"]
    return outcome_from_findings(tally.findings, measurements, notes=notes,
                                 passed=f"{tally.compared} pins from {files} match the installed packages{pinned}")
