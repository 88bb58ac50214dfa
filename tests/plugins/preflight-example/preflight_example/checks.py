"""Three checks a plugin author might write, each harmless at its defaults.

- example.echo reports the status and text it is given (to exercise verdicts and report escaping),
  and how fast this node hashes messages of a few sizes: a figure it declares (`figure=FIGURE_SIZE`),
  which the HTML report draws as a chart without knowing this check;
- example.sleep sleeps, optionally behind a child process (to exercise timeouts and tree kills);
- example.crash raises when asked to (to exercise crash handling).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from preflight.core.check import Check, Outcome, measure
from preflight.core.model import FIGURE_SIZE, Status

HASHED_SIZES = (1 << 10, 64 << 10, 1 << 20)


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
        return {"status": params.status, "text": params.text, "hash_seconds": {str(n): _hash_time(n) for n in HASHED_SIZES}}

    def evaluate(self, facts, params, expect):
        measurements = [measure("echoed characters", len(facts["text"]), "")]
        for size, seconds in sorted(facts.get("hash_seconds", {}).items(), key=lambda item: int(item[0])):
            # The declaration is all a report needs to chart it: a figure at a message size, one line per series.
            measurements.append(measure(f"sha256 rate at {size} B", round(int(size) / seconds / 1e6, 1), "MB/s",
                                        figure=FIGURE_SIZE, series="sha256", at=int(size), better="higher"))
        return Outcome(Status(facts["status"]), facts["text"], measurements)


def _hash_time(size: int, repeats: int = 5) -> float:
    """Best of a few timings of hashing `size` bytes, in seconds."""
    data = bytes(size)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        hashlib.sha256(data).digest()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


@dataclass
class SleepParams:
    seconds: float = 0.0
    with_child: bool = True  # sleep in a grandchild too, so a timeout must kill a process tree
    # Where to write its own PID and those it started, so tests can find them (`{node}` becomes the node's
    # name); the file appears whole, once the sleep has begun.
    pid_file: str = ""
    until_file: str = ""  # stop sleeping early once this file exists (a test says when)


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
            path = params.pid_file.replace("{node}", ctx.node)
            with open(f"{path}.part", "w") as fh:
                fh.write("\n".join(str(p) for p in [os.getpid(), *pids]))
            os.replace(f"{path}.part", path)
        if not params.until_file:
            time.sleep(params.seconds)
            if child:
                child.wait()
            return {"slept_s": params.seconds}
        started = time.monotonic()
        while time.monotonic() - started < params.seconds and not os.path.exists(params.until_file):
            time.sleep(0.05)
        if child:
            child.kill()
            child.wait()
        return {"slept_s": round(time.monotonic() - started, 1)}

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
