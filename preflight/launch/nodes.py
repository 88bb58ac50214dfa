"""Pure facts and sentences about the nodes of a cross-node launch: addresses, loopback names,
nodes that share one machine, and which backend and device every node can run.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def names_text(nodes: list[str], limit: int = 6) -> str:
    if len(nodes) <= limit:
        return ", ".join(nodes)
    return f"{', '.join(nodes[:limit])} and {len(nodes) - limit} more"


def endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def coordinator_ip(address: str) -> str:
    """The IP the coordinator reaches `address` at: an IP as is, a name resolved here (non-loopback first)."""
    try:
        ipaddress.ip_address(address.split("%")[0])
        return address
    except ValueError:
        pass
    try:
        found = [info[4][0] for info in socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)]
    except (socket.gaierror, UnicodeError):
        return address
    routable = [a for a in found if not is_loopback(a)]
    ipv4 = [a for a in routable if ":" not in a]
    return (ipv4 or routable or found or [address])[0]


def loopback_findings(probes: dict[str, dict[str, Any]], resolved: dict[str, list[str]],
                      ips: dict[str, str]) -> list[str]:
    """Sentences about host names and addresses that resolve to loopback on the nodes. Pure.

    `resolved`: node -> the addresses its host name resolves to as recorded before the launch (the
    inventory check's `hostname_addresses`), for a probe that did not resolve it itself."""
    found = []
    by_name: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for node, probe in probes.items():
        hostname = probe.get("hostname")
        addresses = probe.get("hostname_addresses") or resolved.get(node) or []
        if hostname and addresses and all(is_loopback(a) for a in addresses) and not is_loopback(ips.get(node, "")):
            by_name.setdefault((hostname, tuple(addresses)), []).append(node)
        own = probe.get("address_resolves_to") or []
        if own and all(is_loopback(a) for a in own) and not is_loopback(ips.get(node, "")):
            found.append(f"{node} resolves its own address to {', '.join(own)}, while the other nodes reach it at "
                         f"{ips.get(node)}: the route to a peer was used to find its interface")
    for (hostname, addresses), nodes in by_name.items():
        found.insert(0, (
            f"on {names_text(nodes)} the host name {hostname!r} resolves only to {', '.join(addresses)}: launched "
            "with defaults, c10d would not see the first node as the rendezvous host (it compares the endpoint with "
            "what the host name resolves to), torchrun would publish that name as the workers' store address, and "
            "gloo would bind to loopback: each node reaches itself instead of its peers and the job hangs at start. This "
            "check passed --local-addr, --rdzv-endpoint, GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME explicitly; do the same in your "
            "launch scripts (or make the host name resolve to the node's routable address in /etc/hosts)"))
    return found


def shared_machine_findings(probes: dict[str, dict[str, Any]]) -> list[str]:
    """Nodes that are one kernel (network namespaces, containers on one host). Pure."""
    groups: dict[str, list[str]] = {}
    for node, probe in probes.items():
        if probe.get("boot_id"):
            groups.setdefault(probe["boot_id"], []).append(node)
    return [f"{names_text(nodes)} run on one machine (the same kernel boot id): the traffic between them never "
            "leaves it, so these figures describe that machine, not a network between nodes"
            for nodes in groups.values() if len(nodes) > 1]


def share_a_machine(probes: dict[str, dict[str, Any]], nodes: list[str]) -> bool:
    """Whether two of `nodes` are one kernel (the same boot id). Pure."""
    boots = [probes.get(n, {}).get("boot_id") for n in nodes]
    known = [b for b in boots if b]
    return len(set(known)) < len(known)


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def choose_backend(probes: dict[str, dict[str, Any]], *, backend: str | None = None,
                   gpus_per_node: int | None = None, cpu_ranks_per_node: int = 1) -> dict[str, Any]:
    """Backend, device and processes per node, from what every node has. Pure."""
    gpus = {n: p.get("gpus") or 0 for n, p in probes.items()}
    all_gpu = all(g > 0 for g in gpus.values()) and all(p.get("nccl") for p in probes.values())
    chosen = backend or ("nccl" if all_gpu else "gloo")
    notes = []
    if chosen not in ("nccl", "gloo"):
        return {"error": f"backend must be nccl or gloo, not {backend!r}"}
    if chosen == "nccl":
        if not all_gpu:
            missing = [n for n, g in gpus.items() if not g or not probes[n].get("nccl")]
            return {"error": f"NCCL needs GPUs and an NCCL build of torch on every node; {names_text(missing)} "
                             f"{'has' if len(missing) == 1 else 'have'} no GPU or no NCCL"}
        nproc = gpus_per_node or min(gpus.values())
        if len(set(gpus.values())) > 1:
            notes.append("GPU counts differ between nodes (" + ", ".join(f"{n}: {g}" for n, g in gpus.items())
                         + f"); measured with {nproc} per node")
        return {"backend": "nccl", "device": "cuda", "nproc_per_node": nproc, "notes": notes}
    without_gloo = [n for n, p in probes.items() if not p.get("gloo")]
    if without_gloo:
        return {"error": f"the torch on {names_text(without_gloo)} has no gloo backend"}
    if any(gpus.values()) and not all_gpu:
        notes.append("some nodes have GPUs and some do not (" + ", ".join(f"{n}: {g}" for n, g in gpus.items())
                     + "): measured with gloo among CPU processes")
    return {"backend": "gloo", "device": "cpu", "nproc_per_node": max(1, cpu_ranks_per_node), "notes": notes}


def processes_text(count: int, device: str | None) -> str:
    if device == "cuda":
        return f"{count} GPU" + ("" if count == 1 else "s")
    return f"{count} process" + ("" if count == 1 else "es")


def probe_problems(names: list[str], probes: dict[str, dict[str, Any]]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """What the per-node probes before a launch say about the nodes that cannot take part. Pure.

    Returns (problems, without_torch): problems as (node, cause, sentence), cause one of
    `probe-failed` (the probe itself failed: ERROR), `no-distributed` (a torch without
    torch.distributed), `no-interface` (no interface towards the others was found); and the nodes
    whose Python has no torch, for the check to say in one sentence (it knows whether torch is expected)."""
    problems: list[tuple[str, str, str]] = []
    without_torch = []
    for node in names:
        probe = probes.get(node, {})
        if "error" in probe:
            problems.append((node, "probe-failed", probe["error"]))
        elif probe.get("torch") is None:
            without_torch.append(node)
        elif not probe.get("distributed", True):
            problems.append((node, "no-distributed", f"the torch on {node} has no torch.distributed"))
        elif not probe.get("ip"):
            why = probe.get("route_error") or "no interface carries its address and no route to a peer was found"
            problems.append((node, "no-interface", f"could not find the interface {node} reaches the others through: "
                                                   f"{why}"))
    return problems, without_torch
