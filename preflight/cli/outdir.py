"""Where a run's files go: one run, one set of files.

- Without --out, every run writes into its own directory, `preflight-report/<UTC timestamp>/`, and
  `preflight-report/latest` (a symbolic link) points at the newest. An earlier run, perhaps the
  team's known-good baseline, is never overwritten.
- With --out DIR, the run writes into DIR and first removes every report file an earlier run left
  there (the files preflight writes, and only those), so DIR never holds two runs' verdicts side by
  side. Other files in DIR are left as they are; DIR is never emptied.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

# Every file a run or `preflight report` writes into its directory.
OWNED_FILES = ("results.jsonl", "results.json", "report.md", "report.html", "junit.xml")
LATEST = "latest"


class OutputDirError(Exception):
    pass


def _check_writable(out: Path) -> None:
    probe = out / ".preflight-write-test"
    probe.write_text("ok")
    probe.unlink()


def run_directory(path: str | Path, *, per_run: bool, now: dt.datetime | None = None,
                  keep: Path | None = None) -> Path:
    """The directory this run writes into, made ready (see the module docstring). `keep` is a file
    never removed: the results `preflight report` re-renders, which belong to the same run."""
    # Absolute: checks hand paths under it to programs that run in other working directories.
    base = Path(path).absolute()
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
        for name in OWNED_FILES:
            stale = base / name
            if keep is not None and stale.resolve() == keep.resolve():
                continue
            if stale.is_file() or stale.is_symlink():
                stale.unlink()
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
