"""Where a run's files go: one run, one set of files.

- Without --out, every run writes into its own directory, `preflight-report/<UTC timestamp>/`, and
  `preflight-report/latest` (a symbolic link) points at the newest. An earlier run, perhaps the
  team's known-good baseline, is never overwritten.
- With --out DIR, the run writes into DIR and first removes every report file an earlier run left
  there (results.jsonl and the file of every installed report format, and only those), so DIR never
  holds two runs' verdicts side by side. Other files in DIR are left as they are; DIR is never
  emptied. An --out that would replace the command's own input (the baseline, the results being
  re-rendered, the config file) is refused, and so is a directory where a report file should go.
- One run at a time in an --out DIR: a run (or `preflight report`) holds an exclusive flock on DIR
  itself from before it clears the directory until the process ends; a second one is refused (exit
  2 naming DIR and the process that holds it) before it touches anything, so the first run's
  results.jsonl is never removed and results.json never comes from another run than results.jsonl.
  Locking the directory, not a file in it, leaves nothing behind.
- A run's scratch space is a directory the run creates itself in its output directory
  (`.preflight-scratch-*`, one per run) and removes at the end; nothing else is removed.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import tempfile
from pathlib import Path

from preflight.core.redact import redact_text

# The files of the built-in formats; owned_files() adds those of every installed report format.
RESULTS_LOG = "results.jsonl"
OWNED_FILES = (RESULTS_LOG, "results.json", "report.md", "report.html", "junit.xml", "preflight.prom")
LATEST = "latest"
_held: dict[Path, int] = {}  # directory -> the descriptor of its lock file, held until this process ends


class OutputDirError(Exception):
    pass


def owned_files() -> tuple[str, ...]:
    """Every file name a run or `preflight report` may write into its directory: results.jsonl and the
    FILENAME of each installed reporter (plugins too), so that no earlier run's report of any format
    is left beside this run's. A name with a path separator is never one of them."""
    from preflight.reporters import available

    names = [*OWNED_FILES, *(r.filename for r in available().values())]
    return tuple(n for n in dict.fromkeys(names) if n and "/" not in n and os.sep not in n and n not in (".", ".."))


def lock(base: Path) -> None:
    """Hold an exclusive flock on the directory itself for the rest of this process, or OutputDirError
    naming the process that holds it. A file system without such locks is used without one."""
    if base in _held:
        return  # this process holds it already (an earlier command in the same process)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise OutputDirError(f"--out {base} is in use by another preflight run ({_holder(base)}); wait for it "
                                 "to finish or choose another --out directory") from None
        return
    _held[base] = fd


def _holder(base: Path) -> str:
    """The process holding the lock on `base`, as /proc/locks and its command line tell."""
    from preflight.reporters.safe_text import single_line

    try:
        inode = os.stat(base).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
                    pid = parts[4]
                    with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                        argv = cmd.read(4096).split(b"\0")
                    text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
                    return single_line(f"pid {pid}: {redact_text(text)}")[:300]
    except OSError:
        pass
    return "holder unknown"


def _check_writable(out: Path) -> None:
    fd, probe = tempfile.mkstemp(prefix=".preflight-write-test-", dir=out)
    os.close(fd)
    os.unlink(probe)


def _refuse_inputs(base: Path, names: tuple[str, ...], inputs: list[tuple[str, str | Path]]) -> None:
    """OutputDirError when a file the command reads is one this directory's cleanup or writing replaces."""
    owned = {(base / name).resolve(strict=False) for name in names}
    for flag, given in inputs:
        where = Path(given)
        if where.resolve(strict=False) in owned or where.absolute() in {base.absolute() / n for n in names}:
            raise OutputDirError(
                f"--out {base} would replace {given} ({flag}): preflight writes {where.name} there; "
                "choose another --out directory")


def run_directory(path: str | Path, *, per_run: bool, now: dt.datetime | None = None,
                  inputs: list[tuple[str, str | Path]] | None = None, writes: list[str] | None = None) -> Path:
    """The directory this run writes into, made ready (see the module docstring).

    `inputs` are (flag, path) of the files the command reads; `writes` the file names it will write
    (a directory at one of those names is refused before anything runs).
    """
    # Absolute: checks hand paths under it to programs that run in other working directories.
    base = Path(path).absolute()
    names = owned_files()
    if not per_run:
        _refuse_inputs(base, names, inputs or [])
        for name in writes or []:
            if (base / name).is_dir() and not (base / name).is_symlink():
                raise OutputDirError(f"{base / name} is a directory: preflight writes its {name} there; "
                                     "move it away or choose another --out directory")
    try:
        if per_run:
            moment = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
            stamp = moment.strftime("%Y-%m-%dT%H-%M-%SZ")
            base.mkdir(parents=True, exist_ok=True)
            out, n = base / stamp, 1
            while out.exists():  # two runs within one second
                n += 1
                out = base / f"{stamp}-{n}"
            out.mkdir()
            _check_writable(out)
            point_latest(base, out.name)
            return out
        base.mkdir(parents=True, exist_ok=True)
        _check_writable(base)
        lock(base)  # before anything of an earlier run is removed
        for name in names:
            stale = base / name
            if stale.is_symlink() or stale.is_file():
                stale.unlink()  # a link is removed, never followed
        return base
    except OSError as exc:
        raise OutputDirError(f"output directory {path} cannot be written: {exc.strerror or exc}") from None


def point_latest(base: Path, name: str) -> None:
    """Make base/latest a link to base/name, replacing an older link atomically; a real file or
    directory called `latest` (not preflight's) is left alone."""
    link = base / LATEST
    if link.exists() and not link.is_symlink():
        return
    tmp = base / f".{LATEST}.{os.getpid()}"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(name, target_is_directory=True)
    os.replace(tmp, link)
