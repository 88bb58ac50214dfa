"""`preflight run --ship`: this preflight, for one run, on the SSH nodes that lack it, gone after it.

The coordinator builds its own wheel once (`pip wheel --no-deps`, from a copy of its source tree, so
the clone stays clean) and, on each node whose interpreter cannot import this version of preflight:

    mkdtemp            /tmp/preflight-ship-XXXX, through the node's interpreter
    copy               the wheel, base64 on the stdin of one command over the node's SSH connection
    venv               DIR/venv with --system-site-packages, plus a .pth that adds the site
                       directories of the node's own interpreter (a venv's too), so the torch and
                       TensorFlow measured are the node's
    pip install        the wheel into that venv; requirements the node already has are kept
    the run            the node's interpreter is DIR/venv/bin/python for the whole run
    remove             DIR, after the run and when the run is interrupted (service.execute's finally)

Every step is an argv list run through the node's transport (its ControlMaster connection); what
runs there is a fixed program text, with the paths as its arguments.
"""

from __future__ import annotations

import base64
import shutil
import sys
import tempfile
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import preflight
from preflight.run.request import RunProblem
from preflight.transport.process import CommandTimeout, run_command

PREFIX = "preflight-ship-"
PROBE = "import preflight; print(preflight.__version__)"
MAKE_DIR = f"import tempfile; print(tempfile.mkdtemp(prefix={PREFIX!r}))"
WRITE = "import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.stdin.read()))"
# The venv sees what the node's interpreter sees: its site directories go in through site.addsitedir,
# so their own .pth files (a venv's editable installs, a conda env's) count too.
MAKE_VENV = """
import os, site, sys, sysconfig, venv
target = sys.argv[1]
seen = [d for d in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(d)]
venv.create(target, system_site_packages=True, with_pip=True)
lib = sysconfig.get_path('purelib', vars={'base': target, 'platbase': target})
with open(os.path.join(lib, 'zz-node-site.pth'), 'w') as pth:
    pth.write('import site; list(map(site.addsitedir, %r))\\n' % (seen,))
"""
REMOVE = ("import os, shutil, sys; d = sys.argv[1]; "
          f"os.path.basename(d).startswith({PREFIX!r}) and shutil.rmtree(d, ignore_errors=True)")
STEP_S, INSTALL_S, BUILD_S = 120.0, 600.0, 300.0
# What a source tree needs to build the wheel (pyproject.toml's packages, its readme).
SOURCES = ("pyproject.toml", "README.md", "preflight", "checks", "templates")


@dataclass
class Shipped:
    """Where the run put preflight: node name -> (its transport, the directory there, its own interpreter)."""

    places: dict[str, tuple[Any, str, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, transport: Any, directory: str, python: str) -> None:
        with self.lock:
            self.places[transport.name] = (transport, directory, python)


def source_tree() -> Path:
    """The clone this preflight runs from; RunProblem when it was installed without one."""
    root = Path(preflight.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not (pyproject.is_file() and 'name = "preflight-cluster"' in pyproject.read_text()):
        raise RunProblem(f"--ship builds preflight's wheel from its source tree, and {preflight.__file__} has none "
                         "beside it: install preflight from a clone (`pip install -e .` there), or install it on "
                         "the nodes as `preflight run` says without --ship")
    return root


def build_wheel(work: Path) -> Path:
    """This preflight as a wheel in `work` (built from a copy of the source tree)."""
    root, tree = source_tree(), work / "src"
    tree.mkdir()
    for name in SOURCES:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(source, tree / name)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(work)]
    try:
        import setuptools  # noqa: F401 - present: build with it, without fetching a build environment
        argv.append("--no-build-isolation")
    except ImportError:
        pass
    try:
        done = run_command([*argv, str(tree)], BUILD_S)
    except CommandTimeout:
        raise RunProblem(f"--ship: building preflight's wheel took longer than {BUILD_S:.0f}s") from None
    wheels = sorted(work.glob("preflight_cluster-*.whl"))
    if done.returncode != 0 or not wheels:
        raise RunProblem(f"--ship: `pip wheel` could not build preflight's wheel: {_last(done.stderr)}")
    return wheels[0]


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def requirements(wheel: Path) -> list[str]:
    """The wheel's own requirements (Requires-Dist, without those of its extras), as pip takes them."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    needs = [line.partition(":")[2].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    return [need for need in needs if "extra ==" not in need]


def lacks_preflight(transport: Any) -> bool:
    """The node was reached and its interpreter does not run this version of preflight (not: the node
    could not be reached, nor has no such interpreter: the run says so as it would without --ship)."""
    try:
        done = transport.run([transport.python, "-c", PROBE], STEP_S)
    except (CommandTimeout, OSError):
        return False
    if transport.is_transport_failure(done.returncode) or done.returncode == 127:
        return False
    return done.returncode != 0 or done.stdout.strip() != preflight.__version__


def _step(transport: Any, argv: list[str], what: str, timeout: float = STEP_S, input: str | None = None) -> str:
    try:
        done = transport.run(argv, timeout, input=input)
    except CommandTimeout:
        raise RuntimeError(f"{what} took longer than {timeout:.0f}s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {_last(done.stderr or done.stdout)}")
    return done.stdout


def ship_one(transport: Any, wheel: Path, payload: str, shipped: Shipped) -> str:
    """Install the wheel in a throwaway venv on the node and point its transport there; its path."""
    python = transport.python
    directory = _step(transport, [python, "-c", MAKE_DIR], "making a temporary directory").strip()
    if not directory or PREFIX not in directory:
        raise RuntimeError(f"making a temporary directory printed {directory!r}")
    shipped.add(transport, directory, python)  # from here on, removed after the run whatever happens
    target, venv = f"{directory}/{wheel.name}", f"{directory}/venv"
    _step(transport, [python, "-c", WRITE, target], "copying the wheel", input=payload)
    _step(transport, [python, "-c", MAKE_VENV, venv], f"making a venv with {python}")
    own = f"{venv}/bin/python"
    pip = [own, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    # The wheel itself even where the node has this version's metadata but no importable package;
    # then its requirements, of which those the node has are kept (pip sees the node's site directories).
    _step(transport, [*pip, "--no-deps", "--force-reinstall", target], "installing the wheel", INSTALL_S)
    needs = requirements(wheel)
    if needs:
        _step(transport, [*pip, *needs], "installing preflight's requirements", INSTALL_S)
    transport.python = own
    return venv


def ship(transports: list[Any], say: Callable[[str, str], None], shipped: Shipped, fanout: int = 16) -> None:
    """Ship to every SSH node that lacks preflight; record each place in `shipped` as it is made.

    A node it cannot ship to keeps its interpreter: the run reports it as it would without --ship."""
    remote = [t for t in transports if getattr(t, "kind", "") == "ssh"]
    if not remote:
        raise RunProblem("--ship installs preflight on nodes reached over SSH: give them with --nodes")
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(remote)))) as pool:
        lacking = [t for t, lacks in zip(remote, pool.map(lacks_preflight, remote)) if lacks]
    if not lacking:
        return
    with tempfile.TemporaryDirectory(prefix="pf-wheel-") as work:
        wheel = build_wheel(Path(work))
        payload = base64.b64encode(wheel.read_bytes()).decode("ascii")

        def one(transport: Any) -> None:
            try:
                venv = ship_one(transport, wheel, payload, shipped)
                say("note", f"--ship: preflight {preflight.__version__} runs on {transport.name} from {venv}, "
                            "removed after the run")
            except RuntimeError as exc:
                say("warning", f"--ship: could not install preflight on {transport.name}: {exc}")

        with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(lacking)))) as pool:
            list(pool.map(one, lacking))


def remove(shipped: Shipped, say: Callable[[str, str], None]) -> None:
    """Remove every directory the run shipped to, with the node's own interpreter; each node's
    transport gets its interpreter back."""
    for name, (transport, directory, python) in list(shipped.places.items()):
        transport.python = python
        try:
            done = transport.run([python, "-c", REMOVE, directory], STEP_S)
            ok = done.returncode == 0
        except (CommandTimeout, OSError):
            ok = False
        if not ok:
            say("warning", f"--ship: could not remove {directory} on {name}: remove it by hand")
        shipped.places.pop(name, None)
