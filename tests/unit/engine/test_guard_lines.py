"""The guard's own lines (`@@pid`, `@@exit`, `@@error-file`) share a stdout with the command it runs: each
must reach it in one write, or the command's output lands inside one (seen under load with
PYTHONUNBUFFERED=1, as many images set it: `@@pid 1 2 /tmp/preflight-torchrun.x/home/bin/python ...`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Runs the guard in a child whose stdout records every write apart, as an unbuffered stdout makes them:
# writes through sys.stdout's raw layer and through os.write to fd 1 alike, each as one chunk.
HARNESS = r'''
import io, json, os, sys
chunks = []
real_write = os.write
def write(fd, data):
    if fd == 1:
        chunks.append(bytes(data))
    return len(data) if fd == 1 else real_write(fd, data)
os.write = write
class Raw(io.RawIOBase):
    def writable(self): return True
    def write(self, b): chunks.append(bytes(b)); return len(b)
    def fileno(self): return 1
sys.stdout = io.TextIOWrapper(Raw(), write_through=True)  # as -u and PYTHONUNBUFFERED make it
from preflight.workers import guard
code = guard.main(["--", sys.executable, "-c", "pass"])
sys.stdout = sys.__stdout__
real_write(2, json.dumps([c.decode() for c in chunks]).encode())
'''


def test_each_line_of_the_guards_own_is_written_whole():
    done = subprocess.run([sys.executable, "-c", HARNESS], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    chunks = json.loads(done.stderr.strip().splitlines()[-1])
    own = [c for c in chunks if "@@" in c or c == "\n"]
    assert all(c.startswith("@@") and c.endswith("\n") and c.count("\n") == 1 for c in own), chunks
    assert [c.split()[0] for c in own] == ["@@pid", "@@exit"], chunks
