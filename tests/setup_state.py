"""What scripts/test.sh is still preparing while the tests run.

The two slow parts of setting up a fresh machine, building the kube-apiserver from Debian's source
(about 17 minutes on two cores) and the second environment for the version-drift test (the same
torch, another numpy: a minute or two), run in the background while the first tests run. scripts/test.sh names a directory in
PREFLIGHT_TEST_SETUP_DIR; each background job writes `NAME.out` (what it printed on stdout) and, when
it ends, `NAME.done` holding its exit status. A test that needs one of them waits here for it; the
tests that do are ordered last (tests/conftest.py), so the wait is short or none.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "PREFLIGHT_TEST_SETUP_DIR"
WAIT_LIMIT_S = 45 * 60


class SetupFailed(RuntimeError):
    """A background setup job ended with a non-zero status."""


def pending(name: str) -> bool:
    """True when scripts/test.sh started the job `name` in the background and it has not ended yet."""
    state = os.environ.get(ENV)
    return bool(state) and (Path(state) / f"{name}.started").exists() and not (Path(state) / f"{name}.done").exists()


def started(name: str) -> bool:
    state = os.environ.get(ENV)
    return bool(state) and (Path(state) / f"{name}.started").exists()


def wait_for(name: str, limit_s: float = WAIT_LIMIT_S) -> str:
    """Wait until the background job `name` ends; return what it printed (stripped). Raises SetupFailed
    with the end of its log when it failed, TimeoutError when it outlasts `limit_s`."""
    state = Path(os.environ[ENV])
    done = state / f"{name}.done"
    deadline = time.monotonic() + limit_s
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scripts/test.sh's background job {name} did not end in {limit_s:.0f} s")
        time.sleep(2)
    status = done.read_text().strip()
    if status != "0":
        log = state / f"{name}.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise SetupFailed(f"scripts/test.sh's background job {name} exited {status}:\n{tail}")
    out = state / f"{name}.out"
    return out.read_text().strip() if out.exists() else ""
