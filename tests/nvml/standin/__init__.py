"""The stand-in libnvidia-ml.so.1 (nvml_standin.c), built with gcc for the tests that run NVML paths.

`library_dir()` compiles it once per source version into a cache directory and returns that
directory; `standin_env(description)` is the environment that makes pynvml, in a process started
with it, load the stand-in (its ctypes.CDLL("libnvidia-ml.so.1") follows LD_LIBRARY_PATH) and answer
from the node description (tests/nvml/descriptions/).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvml_standin.c"
DESCRIPTIONS = HERE.parent / "descriptions"
ENV = "PREFLIGHT_NVML_STANDIN"
LIBRARY = "libnvidia-ml.so.1"
# Where the dynamic loader looks for system libraries it has no cache entry for (Debian's multiarch
# directory), and the shell step that lays $LIBS over it ($SYSLIB) in a private mount namespace: how a
# test bed gives one node the stand-in as an installed driver.
SYSTEM_LIBRARY_DIR = f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or 'x86_64-linux-gnu'}"
OVERLAY_LIBS = 'mount -t overlay pft-libs -o "lowerdir=$LIBS:$SYSLIB" "$SYSLIB" && '


def build(dest: Path) -> Path:
    """Compile the stand-in into dest/libnvidia-ml.so.1 (gcc and libcjson-dev, installed by scripts/test.sh)."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / LIBRARY
    partial = dest / f".{LIBRARY}.{os.getpid()}"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(partial), str(SOURCE),
                    "-lcjson"], check=True, capture_output=True, text=True)
    partial.replace(target)
    return target


def library_dir() -> Path:
    """The directory holding the built stand-in, built once per version of its source."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    dest = Path(tempfile.gettempdir()) / f"preflight-nvml-standin-{digest}"
    if not (dest / LIBRARY).is_file():
        build(dest)
    return dest


def node_driver(dest: Path, name_or_path: str | Path) -> Path:
    """A directory holding the stand-in and its node description side by side (nvml-standin.json), as
    a node's system library directory would hold the driver's library: a process finds both without
    any environment variable once the directory is among the places the loader searches."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(library_dir() / LIBRARY, dest / LIBRARY)
    path = Path(name_or_path) if isinstance(name_or_path, Path) else description(name_or_path)
    shutil.copy2(path, dest / "nvml-standin.json")
    return dest


def description(name: str) -> Path:
    path = DESCRIPTIONS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def standin_env(name_or_path: str | Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose processes load the stand-in answering from this description."""
    env = dict(os.environ if base is None else base)
    path = Path(name_or_path) if isinstance(name_or_path, Path) else description(name_or_path)
    env[ENV] = str(path)
    libdir = str(library_dir())
    env["LD_LIBRARY_PATH"] = libdir + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env
