"""Import third-party plugins where their death is survivable, and say what each one is.

    python -m preflight.workers.plugin_import < {"group": ..., "names": [...], "path": [...]}

preflight.transport.plugins starts this before a command imports a third party's plugin itself: a
module that ends its importer (os._exit(), a signal, a crash of a C extension) ends this process
instead, and the one that was being imported is named. Protocol, one line each, on the original
standard output (whatever a plugin prints, or writes to file descriptor 1, goes to standard error):

    @@importing NAME
    @@ok NAME {"id": ..., "scope": ..., "tags": [...], ...}     (a check; {"filename": ...} for a format)
    @@error NAME TEXT                                          (it raised; the text names what)
    @@done
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from typing import Any, TextIO

IMPORTING, OK, ERROR, DONE = "@@importing ", "@@ok ", "@@error ", "@@done"


def describe(obj: Any, ep: Any, group: str) -> dict[str, Any]:
    """What a command needs to know of a plugin before it imports it: a check's declarations, or a
    format's file. An entry of the checks' group that is no check, or not the check its name says, raises."""
    from preflight.core.check import Check
    from preflight.core.registry import GROUP

    if group == GROUP:
        if not (isinstance(obj, type) and issubclass(obj, Check)):
            raise TypeError(f"{ep.value} is not a preflight.core.check.Check subclass")
        if obj.id != ep.name:
            raise ValueError(f"entry point name {ep.name!r} differs from the check's id {obj.id!r}")
        return {"id": str(obj.id), "scope": getattr(obj.scope, "value", str(obj.scope)),
                "tags": [str(t) for t in obj.tags], "hook": bool(obj.hook), "run_after": [str(d) for d in obj.run_after]}
    return {"filename": str(getattr(obj, "FILENAME", "") or "")}


def _line(out: TextIO, text: str) -> None:
    out.write(text.replace("\n", " ") + "\n")
    out.flush()


def main(stdin: TextIO, protocol: TextIO) -> None:
    job = json.load(stdin)
    sys.path[:] = [str(p) for p in job.get("path") or sys.path]  # the importer's own path
    names = set(job.get("names") or [])
    for ep in metadata.entry_points(group=str(job["group"])):
        if ep.name not in names:
            continue
        names.discard(ep.name)
        _line(protocol, IMPORTING + ep.name)
        try:
            info = describe(ep.load(), ep, str(job["group"]))
        except BaseException as exc:  # noqa: BLE001 - sys.exit() and KeyboardInterrupt of a plugin too
            _line(protocol, f"{ERROR}{ep.name} {type(exc).__name__}" + (f": {exc}" if str(exc) else ""))
            continue
        _line(protocol, f"{OK}{ep.name} {json.dumps(info, default=str, allow_nan=False)}")
    _line(protocol, DONE)


if __name__ == "__main__":
    # The protocol keeps the real standard output; everything else written to fd 1 lands on stderr.
    protocol_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    main(sys.stdin, protocol_out)
    protocol_out.flush()
    os._exit(0)  # a plugin's atexit handler or a thread it left may not decide how this ends
