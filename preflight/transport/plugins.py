"""Third-party plugins imported first in a child process (preflight.workers.plugin_import), where their
death is survivable: a module that ends its importer (os._exit(), a signal, a hang) is named as a load
error there and never imported by the command itself, which then imports only the plugins it needs,
knowing what each one is from what the child reported.

`probe` is what preflight.core.registry.discover and the report formats take as their `probe`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from preflight.core import registry
from preflight.core.registry import Probed
from preflight.transport.module_argv import isolated_module_argv
from preflight.transport.process import CommandTimeout, run_command

MODULE = "preflight.workers.plugin_import"
IMPORTING, OK, ERROR, DONE = "@@importing ", "@@ok ", "@@error ", "@@done"


def _read(output: str, probed: dict[str, Probed]) -> tuple[str, bool]:
    """Read the child's lines into `probed`: (the name it was importing when it stopped, or "", done)."""
    current = ""
    for line in output.splitlines():
        if line.startswith(IMPORTING):
            current = line[len(IMPORTING):]
        elif line.startswith(OK):
            name, _, text = line[len(OK):].partition(" ")
            try:
                info = json.loads(text)
            except ValueError:
                info = {}
            probed[name] = Probed(info=info if isinstance(info, dict) else {})
            current = ""
        elif line.startswith(ERROR):
            name, _, text = line[len(ERROR):].partition(" ")
            probed[name] = Probed(error=text or "its import raised")
            current = ""
        elif line == DONE:
            return "", True
    return current, False


def probe(group: str, names: list[str], limit_s: float) -> dict[str, Probed]:
    """Name -> what importing that entry point of `group` did in a child: what it is, or why it failed.
    A child that dies names the plugin it was importing, and the rest are imported in a new child;
    all of it within `limit_s`."""
    probed: dict[str, Probed] = {}
    deadline = time.monotonic() + limit_s
    pending = list(names)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            for name in pending:
                probed[name] = Probed(error=f"not imported: the plugins before it used the {limit_s:g} s all "
                                            "imports may take")
            break
        job = json.dumps({"group": group, "names": pending, "path": list(sys.path)}, allow_nan=False)
        try:
            done = run_command(isolated_module_argv(MODULE), timeout=left, input=job)
            output, ended = done.stdout, f"ended the process that imported it (exit code {done.returncode})"
        except CommandTimeout as exc:
            output, ended = exc.output, f"its import did not finish within {left:.0f} s (stopped)"
        except OSError as exc:
            for name in pending:
                probed[name] = Probed(error=f"could not be imported apart: {exc.strerror or exc}")
            break
        current, finished = _read(output, probed)
        if finished:
            break
        if current:
            probed[current] = Probed(error=ended)
        else:  # died before it began (it could not start)
            for name in pending:
                probed.setdefault(name, Probed(error=ended))
        pending = [n for n in pending if n not in probed]
    for name in names:
        probed.setdefault(name, Probed(error="no such entry point in the child"))
    return probed


def discover(**kwargs: Any) -> Any:
    """preflight.core.registry.discover, with each third party's plugin imported in a child first."""
    return registry.discover(probe=probe, **kwargs)
