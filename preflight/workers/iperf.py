"""iperf3 servers or clients on one node, for net.bandwidth; started under the guard.

    python -m preflight.workers.iperf servers --life S [--forceflush] PORT...
    python -m preflight.workers.iperf clients --life S --dst ADDR --seconds T --omit O [--bind ADDR] PORT...

servers: one `iperf3 -s -1` per port (a single test each); prints "pid PORT PID" for each, then what
the servers print ("Server listening on PORT" once they are ready), then "@@done" when all ended.
clients: one `iperf3 -c ... -J` per port, all at once; prints "pid PORT PID" for each and, when all
have finished, per port "@@json PORT RC", the JSON report, "@@stderr PORT", its stderr; then "@@done".

Every iperf3 lives at most --life seconds: should the coordinator die before it can stop them, and
the guard with it, nothing this program started outlives its round on the node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

POLL_S = 0.05


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _wait(children: list[tuple[str, subprocess.Popen]], life_s: float) -> None:
    """Wait for every child; at the end of its life, SIGTERM what is left, SIGKILL 2 s later."""
    from preflight.transport.process import Escalation

    deadline = time.monotonic() + life_s
    stopping = Escalation([child.pid for _, child in children], grace_s=2.0)
    while any(child.poll() is None for _, child in children):
        now = time.monotonic()
        if now >= deadline:
            stopping.begin(now)
        stopping.poll(now)
        time.sleep(POLL_S)


def servers(ports: list[str], life_s: float, forceflush: bool) -> None:
    children = []
    for port in ports:
        argv = ["iperf3", "-s", "-1", "-p", port] + (["--forceflush"] if forceflush else [])
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        children.append((port, child))
        _say(f"pid {port} {child.pid}")
    _wait(children, life_s)
    _say("@@done")


def clients(ports: list[str], life_s: float, dst: str, seconds: int, omit: int, bind: str, bitrate: str = "") -> None:
    workdir = tempfile.mkdtemp(prefix="preflight-iperf3.")
    try:
        children = []
        for port in ports:
            argv = ["iperf3", "-c", dst, "-p", port, "-t", str(seconds), "-O", str(omit)]
            argv += (["-B", bind] if bind else []) + (["-b", bitrate] if bitrate else []) + ["-J"]
            with open(os.path.join(workdir, f"{port}.json"), "wb") as out, \
                    open(os.path.join(workdir, f"{port}.err"), "wb") as err:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            children.append((port, child))
            _say(f"pid {port} {child.pid}")
        _wait(children, life_s)
        for port, child in children:
            rc = child.returncode if child.returncode >= 0 else 128 - child.returncode
            _say(f"@@json {port} {rc}")
            with open(os.path.join(workdir, f"{port}.json"), encoding="utf-8", errors="replace") as handle:
                _say(handle.read())
            _say(f"@@stderr {port}")
            with open(os.path.join(workdir, f"{port}.err"), encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            if text:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
        _say("@@done")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.iperf")
    sub = parser.add_subparsers(dest="role", required=True)
    server = sub.add_parser("servers")
    server.add_argument("--life", type=float, required=True)
    server.add_argument("--forceflush", action="store_true")
    server.add_argument("ports", nargs="+")
    client = sub.add_parser("clients")
    client.add_argument("--life", type=float, required=True)
    client.add_argument("--dst", required=True)
    client.add_argument("--seconds", type=int, required=True)
    client.add_argument("--omit", type=int, default=0)
    client.add_argument("--bind", default="")
    client.add_argument("--bitrate", default="", help=argparse.SUPPRESS)  # tests only: iperf3 -b, a slowed reading
    client.add_argument("ports", nargs="+")
    args = parser.parse_args(argv)
    if shutil.which("iperf3") is None:
        sys.exit("iperf3: command not found")
    if args.role == "servers":
        servers(args.ports, args.life, args.forceflush)
    else:
        clients(args.ports, args.life, args.dst, args.seconds, args.omit, args.bind, args.bitrate)


if __name__ == "__main__":
    main()
