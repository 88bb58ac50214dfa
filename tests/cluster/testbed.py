"""Several hosts on one machine: Linux network namespaces on a bridge, each with its own sshd.

    host namespace                        node namespaces
    bridge pft<pid><k>br 198.18.0.B+1 ── veth ── pft<pid><k>-n1  198.18.0.B+11  sshd, own host key
                                      ── veth ── pft<pid><k>-n2  198.18.0.B+12  sshd, own host key
                                      ...

Every name starts with `pft<pid><letter>` (pid of the test process, one letter per test bed in it),
so parallel runs do not collide and the leftovers of a crashed run are recognisable: `remove_stale()`
takes down any whose process is gone. Each test bed takes its own /27 of 198.18.0.0/24 (B = 0, 32,
64, ...), chosen under a lock, so several can exist on the machine at once.

Namespaces share the filesystem, so every node runs this machine's Python environment, and a
directory under /tmp is the same directory on every node. Host keys go into a known_hosts file, so
ssh checks them as it would on a real cluster. Link speed is shaped per node with a tbf qdisc on
both ends of its veth (the node's own end limits what it sends, the bridge end what it receives).

Needs root, iproute2 (ip, tc), openssh-server and openssh-client.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from preflight.transport.ssh import SshTransport

SUBNET = ipaddress.ip_network("198.18.0.0/24")
BLOCK_SIZE = 32  # addresses per test bed: .B+1 the bridge, nodes from .B+11
FIRST_NODE_OFFSET = 11
MAX_NODES = BLOCK_SIZE - FIRST_NODE_OFFSET - 1
PREFIX = "pft"
SSHD = "/usr/sbin/sshd"
LOCK_PATH = "/run/lock/preflight-testbed.lock" if os.path.isdir("/run/lock") else "/tmp/preflight-testbed.lock"
_NAME = re.compile(rf"^{PREFIX}(\d+)([a-z])")
_beds_in_this_process = 0


class TestBedUnavailable(Exception):
    """The machine cannot host a test bed (not root, no `ip netns`, no sshd); tests skip with this."""


def unavailable_reason() -> str | None:
    """Why no test bed can be built here, or None when one can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces, veth, tc and sshd)"
    for tool in ("ip", "tc", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 openssh-client)"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip()}"
    return None


def _run(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _alive(pid: int) -> bool:
    """True while the process runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _netns_pids(netns: str) -> list[int]:
    proc = _run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()] if proc.returncode == 0 else []


def _kill_pids(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL what is still there; every pid is one this test bed started."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


@dataclass
class BedNode:
    index: int  # 1-based
    name: str  # n1, n2, ...
    netns: str
    address: str
    host_if: str  # the bridge end of the veth, in the host namespace
    node_if: str  # the node end, inside the namespace
    dir: Path
    rate: str | None = None

    @property
    def pid_file(self) -> Path:
        return self.dir / "sshd.pid"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"


@dataclass
class TestBed:
    """`with TestBed(3, rates={2: "2gbit"}) as bed:` builds three nodes, node 2 shaped to 2 Gbit/s."""

    __test__ = False  # not a pytest test class

    count: int
    rates: dict[int, str] = field(default_factory=dict)
    # Node index -> directories that node sees as its own empty tmpfs instead of the shared one
    # (mounted in the mount namespace its sshd runs in): a node whose checkpoint mount is missing.
    private_dirs: dict[int, list[str]] = field(default_factory=dict)
    python: str = field(default_factory=lambda: _venv_python())
    nodes: list[BedNode] = field(default_factory=list, init=False)
    dir: Path | None = field(default=None, init=False)
    control_dir: str | None = field(default=None, init=False)
    tag: str = field(default="", init=False)
    bridge: str = field(default="", init=False)
    bridge_address: str = field(default="", init=False)
    user: str = field(default_factory=getpass.getuser, init=False)
    _transports: list[SshTransport] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_NODES:
            raise ValueError(f"a test bed holds 1 to {MAX_NODES} nodes")

    # -- life cycle ----------------------------------------------------------------------------

    def __enter__(self) -> TestBed:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        global _beds_in_this_process
        reason = unavailable_reason()
        if reason:
            raise TestBedUnavailable(reason)
        remove_stale()
        letter = "abcdefghijklmnopqrstuvwxyz"[_beds_in_this_process % 26]
        _beds_in_this_process += 1
        self.tag = f"{PREFIX}{os.getpid()}{letter}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-", dir="/tmp"))
        self.control_dir = tempfile.mkdtemp(prefix=f"{self.tag}c-", dir="/tmp")
        self.bridge = f"{self.tag}br"
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory

        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.tag} client", "-f", str(self.client_key)])
        base = self._claim_block()
        for index in range(1, self.count + 1):
            self._add_node(index, str(SUBNET.network_address + base + FIRST_NODE_OFFSET + index - 1))
        known = []
        for node in self.nodes:
            key_type, key = Path(f"{node.host_key}.pub").read_text().split()[:2]
            known.append(f"{node.address} {key_type} {key}\n")
        self.known_hosts.write_text("".join(known))
        self.ssh_config.write_text(
            "Host *\n" + "".join(f"  {line.replace('=', ' ', 1)}\n" for line in self.ssh_options())
        )
        for node in self.nodes:
            self._wait_for_sshd(node)
        for index, rate in self.rates.items():
            self.shape(self.node(index), rate)

    def stop(self) -> None:
        """Take everything down; each step on its own, so one failure does not leave the rest."""
        for transport in self._transports:
            with contextlib.suppress(Exception):
                transport.close()
        self._transports.clear()
        if self.control_dir:
            self._exit_masters(self.control_dir)
            shutil.rmtree(self.control_dir, ignore_errors=True)
        for node in self.nodes:
            _kill_pids(_netns_pids(node.netns))
            _run(["ip", "link", "del", node.host_if], check=False)
            _run(["ip", "netns", "del", node.netns], check=False)
        if self.bridge:
            _run(["ip", "link", "del", self.bridge], check=False)
        self.nodes.clear()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- construction --------------------------------------------------------------------------

    def _claim_block(self) -> int:
        """Pick a free /27 of 198.18.0.0/24 and put the bridge on it, holding a lock meanwhile."""
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                used = _addresses_in_host_namespace()
                for base in range(0, SUBNET.num_addresses, BLOCK_SIZE):
                    block = ipaddress.ip_network(f"{SUBNET.network_address + base}/27")
                    if any(ipaddress.ip_address(a) in block for a in used):
                        continue
                    self.bridge_address = str(block.network_address + 1)
                    _run(["ip", "link", "add", self.bridge, "type", "bridge"])
                    _run(["ip", "addr", "add", f"{self.bridge_address}/27", "dev", self.bridge])
                    _run(["ip", "link", "set", self.bridge, "up"])
                    return base
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        raise TestBedUnavailable("every /27 of 198.18.0.0/24 is in use by other test beds")

    def _add_node(self, index: int, address: str) -> None:
        assert self.dir is not None
        node = BedNode(
            index=index, name=f"n{index}", netns=f"{self.tag}-n{index}", address=address,
            host_if=f"{self.tag}h{index}", node_if=f"{self.tag}n{index}", dir=self.dir / f"n{index}",
        )
        node.dir.mkdir()
        self.nodes.append(node)  # before anything exists, so stop() removes a half-built node too
        _run(["ip", "netns", "add", node.netns])
        _run(["ip", "link", "add", node.host_if, "type", "veth", "peer", "name", node.node_if])
        _run(["ip", "link", "set", node.node_if, "netns", node.netns])
        _run(["ip", "link", "set", node.host_if, "master", self.bridge, "up"])
        self.exec(node, ["ip", "link", "set", "lo", "up"])
        self.exec(node, ["ip", "addr", "add", f"{address}/27", "dev", node.node_if])
        self.exec(node, ["ip", "link", "set", node.node_if, "up"])

        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name, "-f", str(node.host_key)])
        node.sshd_config.write_text("\n".join([
            f"ListenAddress {node.address}",
            "Port 22",
            f"HostKey {node.host_key}",
            f"PidFile {node.pid_file}",
            f"AuthorizedKeysFile {self.client_key}.pub",
            "StrictModes no",  # the keys live under a temp dir that sshd would find too open
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            # Multiplexed sessions count against MaxSessions; a run opens several per node at once.
            "MaxSessions 64",
            "MaxStartups 64:30:128",
            "LogLevel VERBOSE",
            "",
        ]))
        self._start_sshd(node)

    def _start_sshd(self, node: BedNode) -> None:
        sshd = [SSHD, "-f", str(node.sshd_config), "-E", str(node.sshd_log)]
        private = self.private_dirs.get(node.index, [])
        if not private:
            self.exec(node, sshd)
            return
        # `ip netns exec` gives the command its own mount namespace (a slave of the host's), so a
        # tmpfs mounted here is seen by this sshd and its sessions only.
        for path in private:
            Path(path).mkdir(parents=True, exist_ok=True)
        script = 'for d in "$@"; do mount -t tmpfs -o size=16m,mode=0755 pft-private "$d" || exit 1; done; exec "$0" -f "$SSHD_CONFIG" -E "$SSHD_LOG"'
        _run(["ip", "netns", "exec", node.netns, "env", f"SSHD_CONFIG={node.sshd_config}", f"SSHD_LOG={node.sshd_log}",
              "sh", "-c", script, SSHD, *private])

    def _wait_for_sshd(self, node: BedNode, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((node.address, 22), timeout=1) as sock:
                sock.settimeout(1)
                if sock.recv(4).startswith(b"SSH-"):
                    return
            time.sleep(0.05)
        log = node.sshd_log.read_text() if node.sshd_log.exists() else "(no log)"
        raise RuntimeError(f"sshd on {node.name} ({node.address}) did not come up: {log[-2000:]}")

    @staticmethod
    def _exit_masters(control_dir: str) -> None:
        for socket_path in Path(control_dir).glob("*"):
            _run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "pft-master"], check=False, timeout=10)

    # -- use -----------------------------------------------------------------------------------

    @property
    def client_key(self) -> Path:
        assert self.dir is not None
        return self.dir / "client_key"

    @property
    def known_hosts(self) -> Path:
        assert self.dir is not None
        return self.dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        assert self.dir is not None
        return self.dir / "ssh_config"

    def node(self, which: int | str) -> BedNode:
        for node in self.nodes:
            if which in (node.index, node.name, node.address):
                return node
        raise KeyError(which)

    def ssh_options(self) -> list[str]:
        """`-o` options that reach the nodes; what `--ssh-option` would pass. The host keys are checked."""
        return [
            f"User={self.user}",
            f"IdentityFile={self.client_key}",
            "IdentitiesOnly=yes",
            f"UserKnownHostsFile={self.known_hosts}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
            "LogLevel=ERROR",
        ]

    def transport(self, which: int | str, **kwargs) -> SshTransport:
        """An SshTransport to a node, using this bed's ssh_config; closed when the bed stops."""
        node = self.node(which)
        kwargs.setdefault("python", self.python)
        kwargs.setdefault("config_file", str(self.ssh_config))
        kwargs.setdefault("control_dir", self.control_dir)
        kwargs.setdefault("connect_timeout", 5)
        transport = SshTransport(kwargs.pop("name", node.address), node.address, **kwargs)
        self._transports.append(transport)
        return transport

    def specs(self) -> list[dict]:
        """Transport specs for every node, as a cluster check's context holds them."""
        return [self.transport(node.index).to_spec() for node in self.nodes]

    def hosts_file(self, path: str | Path, with_python: bool = False) -> Path:
        lines = [node.address + (f" python={self.python}" if with_python else "") for node in self.nodes]
        Path(path).write_text("\n".join(lines) + "\n")
        return Path(path)

    def exec(self, node: BedNode, argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run argv inside the node's namespace directly (not through ssh)."""
        return _run(["ip", "netns", "exec", node.netns, *argv], check=check, timeout=timeout)

    def shape(self, node: BedNode, rate: str) -> None:
        """Limit what the node sends and what it receives to `rate` (tc syntax, e.g. "2gbit")."""
        bits = _rate_bits(rate)
        # tbf needs a bucket of at least rate/HZ and of a full GSO super-packet (64 KiB) so that
        # it does not throttle below its rate; 4 ms worth of traffic covers both at these rates.
        burst = max(2 * 65536, int(bits / 8 * 0.004))
        tbf = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "20ms"]
        self.exec(node, ["tc", "qdisc", "replace", "dev", node.node_if, *tbf])
        _run(["tc", "qdisc", "replace", "dev", node.host_if, *tbf])
        node.rate = rate

    def unshape(self, node: BedNode) -> None:
        self.exec(node, ["tc", "qdisc", "del", "dev", node.node_if, "root"], check=False)
        _run(["tc", "qdisc", "del", "dev", node.host_if, "root"], check=False)
        node.rate = None

    def break_link(self, a: BedNode, b: BedNode) -> None:
        """Traffic between `a` and `b` only is refused (a prohibit route on each side, as a bad cable
        or switch port between two particular nodes); each still reaches every other node and the
        coordinator."""
        self.exec(a, ["ip", "route", "replace", "prohibit", f"{b.address}/32"])
        self.exec(b, ["ip", "route", "replace", "prohibit", f"{a.address}/32"])

    def mend_link(self, a: BedNode, b: BedNode) -> None:
        self.exec(a, ["ip", "route", "del", "prohibit", f"{b.address}/32"], check=False)
        self.exec(b, ["ip", "route", "del", "prohibit", f"{a.address}/32"], check=False)

    def sshd_pid(self, node: BedNode) -> int | None:
        try:
            return int(node.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop_sshd(self, node: BedNode, sessions: bool = True) -> None:
        """Stop the node's sshd (by its PID file), so new connections are refused.

        With `sessions`, the per-connection sshd processes go too, which drops the master connection
        and everything running over it: from the coordinator the node is simply gone.
        """
        pid = self.sshd_pid(node)
        pids = [pid] if pid else []
        if sessions:
            pids += [p for p in _netns_pids(node.netns) if _comm(p) == "sshd" and p not in pids]
        _kill_pids(pids)

    def kill_node(self, node: BedNode) -> None:
        """Everything running on the node ends at once, sshd included: a node that crashed."""
        _kill_pids(_netns_pids(node.netns), grace_s=0.0)

    def start_sshd(self, node: BedNode) -> None:
        if self.sshd_pid(node) and _alive(self.sshd_pid(node) or 0):
            return
        self._start_sshd(node)
        self._wait_for_sshd(node)

    def processes(self, node: BedNode) -> list[tuple[int, str]]:
        """(pid, command line) of every process in the node's namespace: what a run left behind."""
        found = []
        for pid in _netns_pids(node.netns):
            if not _alive(pid):
                continue
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((pid, cmdline.strip()))
        return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _rate_bits(rate: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not match:
        raise ValueError(f"rate {rate!r}: expected a tc rate such as 2gbit or 500mbit")
    return float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]


def _venv_python() -> str:
    import sys

    return sys.executable


def _addresses_in_host_namespace() -> list[str]:
    proc = _run(["ip", "-j", "addr", "show"], check=False)
    try:
        links = json.loads(proc.stdout or "[]")
    except ValueError:
        return []
    return [info["local"] for link in links for info in link.get("addr_info", []) if info.get("family") == "inet"]


def remove_stale() -> list[str]:
    """Take down namespaces, bridges and veths left by test processes that no longer exist."""
    removed = []
    for netns in _run(["ip", "netns", "list"], check=False).stdout.split("\n"):
        name = netns.split(" ")[0].strip()
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            _kill_pids(_netns_pids(name))
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    try:
        links = json.loads(_run(["ip", "-j", "link", "show"], check=False).stdout or "[]")
    except ValueError:
        links = []
    for link in links:
        name = link.get("ifname", "")
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            _run(["ip", "link", "del", name], check=False)
            removed.append(name)
    for path in Path("/tmp").glob(f"{PREFIX}[0-9]*-*"):
        match = _NAME.match(path.name)
        if match and not _alive(int(match.group(1))) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
    return removed


def module_bed(count: int) -> Iterator[TestBed]:
    """The body of a module-scoped fixture: a started bed of `count` nodes, stopped when the fixture
    ends, passed or failed; the module's tests skip where no bed can be built."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"multi-node test bed unavailable: {reason}")
    bed = TestBed(count)
    try:
        bed.start()
        yield bed
    finally:
        bed.stop()
