"""What a cross-node check needs to know about a node, asked with the node's own Python.

    python -m preflight.workers.probe [--own-ip IP --own-address ADDR [--peers IP...]] [--torch]
                                      [--iperf3] [--targets ADDR...] [--bindable ADDR] [--free-port HOST]

Prints one JSON object with the sections asked for:
- `--own-ip`: host name and what it resolves to, what the node's own address resolves to, boot id,
  CPUs, interfaces, the interface that carries the address other nodes reach it at (or, when none
  does, the route to the first peer: `ip -j route get`), and a port free on that address;
- `--torch`: torch, torch.distributed, GPUs, NCCL and gloo;
- `--iperf3`: iperf3, its version and whether it has --forceflush;
- `--targets`: per target, whether it is this very node (loopback, one of its addresses, a local
  route), which would measure memory instead of the network;
- `--bindable ADDR`: whether the node can bind ADDR (to make iperf3 clients use it);
- `--free-port HOST`: a TCP port that was free on HOST a moment ago.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from typing import Any

from preflight.workers import wire


def resolve(name: str) -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)})
    except (socket.gaierror, UnicodeError):
        return []


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def free_port(host: str) -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def bindable(address: str) -> bool:
    try:
        free_port(address)
        return True
    except (OSError, ValueError):
        return False


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1" or address.startswith("::ffff:127.")


def _route(ip_tool: str, address: str) -> dict[str, Any] | None:
    try:
        out = subprocess.run([ip_tool, "-j", "route", "get", address], capture_output=True, text=True, timeout=10)
        return json.loads(out.stdout)[0]
    except Exception:  # noqa: BLE001 - no route is an answer
        return None


def node_facts(own_ip: str, own_address: str, peers: list[str]) -> dict[str, Any]:
    facts: dict[str, Any] = {"hostname": socket.gethostname(), "fqdn": socket.getfqdn(), "python": sys.executable}
    facts["hostname_addresses"] = resolve(facts["hostname"])
    facts["address_resolves_to"] = resolve(own_address)
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            facts["boot_id"] = handle.read().strip()
    except OSError:
        facts["boot_id"] = None
    try:
        facts["cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        facts["cpus"] = os.cpu_count()
    interfaces: dict[str, list[str]] = {}
    try:
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            interfaces[name] = [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
    except Exception as exc:  # noqa: BLE001 - said in the facts
        facts["interfaces_error"] = f"{type(exc).__name__}: {exc}"
    facts["interfaces"] = interfaces
    facts["interface"] = facts["ip"] = facts["interface_found_by"] = None
    # The address the coordinator resolved first; then what the node itself resolves its name to (an
    # ssh alias the coordinator could not resolve). A loopback address only for a node that was given
    # one (nodes that are the coordinator's own machine); anywhere else the route to a peer decides.
    candidates = [own_ip] + resolve(own_ip) + facts["address_resolves_to"]
    candidates = [a for a in dict.fromkeys(candidates) if _loopback(own_ip) or not _loopback(a)]
    for candidate in candidates:
        found = [name for name, addrs in sorted(interfaces.items()) if candidate in addrs]
        if found:
            facts["interface"], facts["ip"], facts["interface_found_by"] = found[0], candidate, "address"
            break
    ip_tool = shutil.which("ip")
    if facts["interface"] is None and peers and ip_tool:
        peer = (resolve(peers[0]) or [peers[0]])[0]
        route = _route(ip_tool, peer)
        if route is None:
            facts["route_error"] = f"ip route get {peer} gave no route"
        else:
            facts["interface"], facts["ip"] = route.get("dev"), route.get("prefsrc")
            facts["interface_found_by"] = f"route to {peer}"
    if facts["ip"]:
        try:
            facts["free_port"] = free_port(facts["ip"])
        except OSError as exc:
            facts["bind_error"] = f"cannot bind {facts['ip']}: {exc}"
    return facts


def torch_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        import torch
        import torch.distributed as dist

        facts["torch"] = torch.__version__
        facts["distributed"] = dist.is_available()
        facts["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        facts["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
        facts["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
        if facts["nccl"] and facts["gpus"]:
            facts["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    except ImportError as exc:
        facts["torch"] = None
        facts["torch_error"] = str(exc)
    return facts


def iperf3_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"iperf3": shutil.which("iperf3"), "version": None, "forceflush": False}
    if facts["iperf3"]:
        try:
            out = subprocess.run([facts["iperf3"], "--version"], capture_output=True, text=True, timeout=10)
            text = (out.stdout or out.stderr).strip()
            facts["version"] = text.splitlines()[0] if text else None
            out = subprocess.run([facts["iperf3"], "--help"], capture_output=True, text=True, timeout=10)
            facts["forceflush"] = "--forceflush" in out.stdout + out.stderr
        except Exception as exc:  # noqa: BLE001 - said in the facts
            facts["version_error"] = str(exc)
    return facts


def local_why(target: str) -> tuple[str | None, list[str], str | None, dict[str, Any] | None]:
    """Why traffic to `target` would never leave this node (None when it would), its addresses,
    a resolution error, and the route to it."""
    try:
        addrs = sorted({i[4][0] for i in socket.getaddrinfo(target, None, proto=socket.IPPROTO_TCP)})
    except socket.gaierror as exc:
        return None, [], f"does not resolve: {exc}", None
    ip_tool = shutil.which("ip")
    route = None
    for addr in addrs:
        bare = addr.split("%")[0]
        if _loopback(bare) or bare in ("0.0.0.0", "::"):
            return f"{target} resolves to the loopback address {addr}", addrs, None, route
        if bindable(addr):
            return f"{addr} is an address of this node", addrs, None, route
        found = _route(ip_tool, bare) if ip_tool else None
        if found:
            route = route or found
            if found.get("type") == "local" or found.get("dev") == "lo":
                return f"the route to {addr} is local (dev {found.get('dev')})", addrs, None, found
    return None, addrs, None, route


def probe(args: argparse.Namespace) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    if args.free_port:
        facts["free_port"] = free_port(args.free_port)
    if args.own_ip:
        facts.update(node_facts(args.own_ip, args.own_address or args.own_ip, args.peers))
    if args.torch:
        facts.update(torch_facts())
    if args.iperf3:
        facts.update(iperf3_facts())
    if args.bindable:
        facts["own_address_bindable"] = bindable(args.bindable)
    if args.targets is not None:
        facts["targets"] = {}
        for target in args.targets:
            why, addrs, error, route = local_why(target)
            facts["targets"][target] = {"local": why is not None, "why": why, "addresses": addrs, "error": error,
                                        "route": route}
    if args.own_ip or args.torch:
        try:
            import preflight

            facts["preflight"] = preflight.__version__
        except ImportError:
            facts["preflight"] = None
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m preflight.workers.probe")
    parser.add_argument("--own-ip", help="the IP other nodes reach this node at, as the coordinator resolved it")
    parser.add_argument("--own-address", help="this node's address as written in the hosts file")
    parser.add_argument("--peers", nargs="*", default=[], help="the IPs of the other nodes")
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--iperf3", action="store_true")
    parser.add_argument("--targets", nargs="*", default=None, help="addresses this node will send traffic to")
    parser.add_argument("--bindable", help="an address to try to bind")
    parser.add_argument("--free-port", help="print a port free on this address")
    print(wire.dumps(probe(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
