"""`python -m preflight.integrations.kubernetes.pod --in CM --out PREFIX -- COMMAND`: the pod's end.

Runs inside the pod the bridge created (preflight.integrations.kubernetes.bridge): starts COMMAND,
feeds it what the bridge writes into the input ConfigMap, and writes what it prints into the output
ConfigMaps, with its exit code last. When the input is closed, COMMAND's stdin is closed (preflight's
guard then ends the command with everything it started); when the pod is deleted (SIGTERM), the
same happens before the container goes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from preflight.integrations.kubernetes.api import KubernetesError, core_api
from preflight.integrations.kubernetes.channel import CHUNK_BYTES, Channel
from preflight.transport.process import Here, RemoteProcess

FLUSH_S = 0.5
IDLE_POLL_S = 2.0


class Pump:
    def __init__(self, channel: Channel, proc: RemoteProcess) -> None:
        self.channel, self.proc = channel, proc
        self.fed = 0
        self.closed = False
        self.index = 0
        self.start = {"stdout": 0, "stderr": 0}  # line offsets where the current chunk begins
        self.sent: dict[str, str] = {}
        # Nobody reads the output any more (the input is gone, or the pod is being deleted): write no new
        # ConfigMap, which nothing would delete before the run's deadline.
        self.orphaned = False

    def feed(self) -> bool:
        """Pass new input to the command; True when something arrived."""
        data = self.channel.read_input()
        if data is None:  # the bridge is gone and took its ConfigMap along (or the run was cleaned up)
            self.orphaned = True
            self.close_input()
            return False
        text = data.get("stdin", "")
        got = len(text) > self.fed
        if got:
            self.proc.write(text[self.fed:])
            self.fed = len(text)
        if data.get("closed") == "1":
            self.close_input()
        return got

    def close_input(self) -> None:
        if not self.closed:
            self.closed = True
            self.proc.close_stdin()

    def flush(self, exit_code: int | None = None) -> None:
        streams = {"stdout": self.proc.raw_lines, "stderr": self.proc.stderr_lines}
        data = {key: "".join(line + "\n" for line in lines[self.start[key]:]) for key, lines in streams.items()}
        if exit_code is None and data == self.sent:
            return
        if exit_code is None and sum(len(v) for v in data.values()) > CHUNK_BYTES:
            self.channel.write_output(self.index, {**data, "sealed": "1"}, create=not self.sent)
            self.index += 1
            self.start = {key: len(lines) for key, lines in streams.items()}
            self.sent = {}
            return
        if exit_code is not None:
            data["exit"] = str(exit_code)
        if self.orphaned and not self.sent:
            return
        self.channel.write_output(self.index, data, create=not self.sent)
        self.sent = {k: v for k, v in data.items() if k != "exit"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in", dest="in_name", required=True)
    parser.add_argument("--out", dest="out_prefix", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    namespace = os.environ.get("PREFLIGHT_K8S_NAMESPACE", "default")
    try:
        api = core_api(kubeconfig=os.environ.get("KUBECONFIG") or None)
    except KubernetesError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    pod = args.in_name[: -len("-in")]
    channel = Channel(api, namespace, pod, {})
    channel.in_name, channel.out_prefix = args.in_name, args.out_prefix
    try:
        channel.adopt_input_metadata()
    except KubernetesError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    proc = RemoteProcess(Here(), command, stdin=True, guard=False)
    pump = Pump(channel, proc)
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    wait_s = FLUSH_S
    while proc.running():
        if stopping.is_set():
            pump.orphaned = True
            pump.close_input()
            if proc.wait(20) is None:
                proc.stop(grace_s=0)
            break
        try:
            got = pump.feed()
            pump.flush()
        except KubernetesError as exc:
            sys.stderr.write(f"{exc}\n")
            pump.close_input()
            proc.wait(20)
            break
        wait_s = FLUSH_S if got else min(IDLE_POLL_S, wait_s * 1.5)
        proc.wait(wait_s)
    proc.join()
    code = proc.returncode if proc.returncode is not None else 1
    try:
        pump.flush(exit_code=code)
    except KubernetesError as exc:
        sys.stderr.write(f"{exc}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
