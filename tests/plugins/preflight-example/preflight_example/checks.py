"""Three checks a plugin author might write, each harmless at its defaults.

- example.echo reports the status and text it is given (to exercise verdicts and report escaping);
- example.sleep sleeps, optionally behind a child process (to exercise timeouts and tree kills);
- example.crash raises when asked to (to exercise crash handling).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

from preflight.check import Check, Outcome, measure
from preflight.model import Status


@dataclass
class EchoParams:
    status: str = "PASS"
    text: str = "example check ran"
    output: str = ""


class Echo(Check):
    id = "example.echo"
    title = "Example: echo a status"
    tags = ("example",)
    why = "Shows how a third-party check plugs into preflight."
    remediation = ("Nothing to fix: this check reports what it is told.",)
    Params = EchoParams
    timeout_s = 30.0

    def collect(self, ctx, params):
        if params.output:
            ctx.record(["echo", params.output], 0, params.output)
        return {"status": params.status, "text": params.text}

    def evaluate(self, facts, params, expect):
        return Outcome(Status(facts["status"]), facts["text"], [measure("echoed characters", len(facts["text"]), "")])


@dataclass
class SleepParams:
    seconds: float = 0.0
    with_child: bool = True  # sleep in a grandchild too, so a timeout must kill a process tree
    pid_file: str = ""  # where to write the PIDs it started, so tests can verify they are gone


class Sleep(Check):
    id = "example.sleep"
    title = "Example: sleep"
    tags = ("example",)
    why = "Stands in for a check that hangs."
    Params = SleepParams
    timeout_s = 30.0

    def collect(self, ctx, params):
        pids = []
        child = None
        if params.seconds > 0 and params.with_child:
            child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({params.seconds})"])
            pids.append(child.pid)
        if params.pid_file:
            import os

            with open(params.pid_file, "w") as fh:
                fh.write("\n".join(str(p) for p in [os.getpid(), *pids]))
        time.sleep(params.seconds)
        if child:
            child.wait()
        return {"slept_s": params.seconds}

    def evaluate(self, facts, params, expect):
        return Outcome(Status.PASS, f"slept {facts['slept_s']} s")


@dataclass
class CrashParams:
    message: str = ""


class Crash(Check):
    id = "example.crash"
    title = "Example: crash on request"
    tags = ("example",)
    why = "Stands in for a check with a bug."
    Params = CrashParams
    timeout_s = 30.0

    def collect(self, ctx, params):
        if params.message:
            raise RuntimeError(params.message)
        return {}

    def evaluate(self, facts, params, expect):
        return Outcome(Status.PASS, "did not crash")
