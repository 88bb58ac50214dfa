"""Which network NCCL ran over, from the lines it printed at NCCL_DEBUG=INFO. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# What NCCL prints at NCCL_DEBUG=INFO about its network, by release:
#   2.3        "Using internal Network IB" (or "external" for a plugin)
#   2.6+       "Using network IB", "Using network AWS Libfabric", "Using network IBext_v8"
#   all        "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:..."   (the devices)
#              "NET/Socket : Using [0]eth0:10.0.0.1<0>"   (before 2.6 also the bootstrap's, printed
#              before NET/IB even when IB carries the traffic)
#              "Channel 00/0 : 0[0] -> 1[1] [send] via NET/AWS Libfabric/1/GDRDMA"   (what was used;
#              "Ring 00 : ..." before 2.7; network names may hold spaces)
_NCCL_USING = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NCCL_USING_OLD = re.compile(r"NCCL INFO Using (?:internal|external) Network (.+?)\s*$")
_NCCL_VIA = re.compile(r"NCCL INFO .*\bvia (.+?)\s*$")
_NCCL_VIA_NET = re.compile(r"^NET/(.+?)/\d+(?:\(\d+\))?(?:/GDRDMA(?:\(PCI\))?)?(?:/Shared)?$")
_NCCL_NET_LINE = re.compile(r"NCCL INFO NET/(.*)$")
# Merged NICs (NCCL_IB_MERGE_NICS, 2.19+) print as " [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}": a space
# after the index, and a merged device's name may join its members with '+'.
_NCCL_DEVICE = re.compile(r"\[\d+\] ?([\w.+-]+):\d+/(IB|RoCE)(/SHARP)?")
_NCCL_PLUGIN_FAILED = re.compile(r"Failed to initialize NET plugin (.+?)\s*$")
_NCCL_NO_NET = "Failed to initialize any NET plugin"
# NCCL's own messages quoted or logged without the "host:pid:tid [dev] NCCL INFO" head.
_NCCL_UNTAGGED = re.compile(r"^\s*(?:[\w.-]+:\d+:\d+ \[\d+\]\s+)?(?=NET/[^:]{1,40}: |Using network |Channel \d+/\d+ ?: .* via |"
                            r"Failed to initialize (?:any )?NET plugin)")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_NOT_A_NETWORK = {"Plugin"}


def _net_line(text: str) -> tuple[str, str]:
    """("IB", "Using [0]mlx5_0:1/IB ...") from "IB : Using ...": a name before a colon may hold spaces
    ("AWS Libfabric : ..."); without a colon the name is the first word ("OFI Selected Provider ...")."""
    head, colon, rest = text.partition(":")
    if colon and "/" not in head:
        return head.strip(), rest.strip()
    name, _, rest = text.strip().partition(" ")
    return name, rest.strip()


def _via_name(text: str) -> str:
    return "SHM" if text == "direct shared memory" else text  # NCCL <= 2.6 wrote SHM out


@dataclass
class _NcclLines:
    """What NCCL's lines said about the network, gathered line by line."""
    chosen: str | None = None  # "Using network ..."
    evidence: str = ""
    via: list[str] = field(default_factory=list)
    via_nets: list[str] = field(default_factory=list)
    devices: dict[str, str] = field(default_factory=dict)
    net_lines: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    unavailable: set[str] = field(default_factory=set)
    link_layers: list[str] = field(default_factory=list)
    sharp: bool = False
    no_network: bool = False
    version: str | None = None
    seen_nccl: bool = False


def nccl_network(lines: list[str]) -> dict[str, Any] | None:
    """Which network NCCL ran over, from its NCCL_DEBUG=INFO lines; None when NCCL printed none. Pure.

    The network NCCL chose ("Using network ..."), else what a channel used ("via NET/<name>/<dev>"),
    else the network whose devices it listed (IB over Socket: before NCCL 2.6 the bootstrap's
    NET/Socket line comes first), else a plugin that named itself (NET/GPUDirectTCPX ...). When none of
    these can be read, `network` is None and `unrecognised` holds the NET lines that were printed, so
    the report can show them instead of a bare "unknown".
    """
    seen = _NcclLines()
    for raw in lines:
        _read_line(seen, raw.rstrip())
    if not seen.seen_nccl:  # a version line alone says nothing about the network
        return None
    network, evidence = _network_used(seen)
    return {"network": network, "evidence": evidence[:300], "via": seen.via, "devices": seen.devices,
            "link_layers": seen.link_layers, "sharp": seen.sharp, "ib_unavailable": "IB" in seen.unavailable,
            "version": seen.version, "no_network": seen.no_network and network is None,
            "unrecognised": [] if network else seen.net_lines[:5]}


def _read_line(seen: _NcclLines, line: str) -> None:
    found = _NCCL_VERSION.search(line)
    if found:
        seen.version = seen.version or found.group(1)
    if _NCCL_NO_NET in line:  # NCCL's WARN, or torch's "Last error:" line: no network at all
        seen.no_network, seen.seen_nccl = True, True
        seen.net_lines.append(line.strip())
        return
    if "NCCL INFO" not in line:
        untagged = _NCCL_UNTAGGED.match(line)
        if not untagged:
            return
        line = "NCCL INFO " + line[untagged.end():]
    seen.seen_nccl = True
    if _read_using(seen, line) or _read_via(seen, line):
        return
    if "collnet plugin SHARP" in line or "CollNet" in line and "SHARP" in line:
        seen.sharp = True
    failed = _NCCL_PLUGIN_FAILED.search(line)
    if failed:  # one plugin (its name may hold spaces: "AWS Libfabric") did not start
        seen.unavailable.add(failed.group(1))
    _read_net_line(seen, line)


def _read_using(seen: _NcclLines, line: str) -> bool:
    """The network NCCL chose; the first such line counts."""
    found = _NCCL_USING.search(line) or _NCCL_USING_OLD.search(line)
    if not found or seen.chosen is not None:
        return False
    seen.chosen, seen.evidence = found.group(1), line.strip()
    return True


def _read_via(seen: _NcclLines, line: str) -> bool:
    """What a channel went over."""
    found = _NCCL_VIA.search(line)
    if not found:
        return False
    name = _via_name(found.group(1))
    if name not in seen.via:
        seen.via.append(name)
    net = _NCCL_VIA_NET.match(name)
    if net and net.group(1) not in seen.via_nets:
        seen.via_nets.append(net.group(1))
    return True


def _read_net_line(seen: _NcclLines, line: str) -> None:
    """A NET/<name> line: no device, the devices it uses, or a plugin naming itself."""
    found = _NCCL_NET_LINE.search(line)
    if not found:
        return
    name, rest = _net_line(found.group(1))
    if name in _NOT_A_NETWORK:
        return
    seen.net_lines.append(line.strip())
    if rest.startswith("No device found"):
        seen.unavailable.add(name)
    elif rest.startswith("Using [0]"):
        listed = rest[len("Using"):].strip()
        seen.devices.setdefault(f"NET/{name}", listed[:200])
        for _dev, layer, with_sharp in _NCCL_DEVICE.findall(listed) if name == "IB" else []:
            if layer not in seen.link_layers:
                seen.link_layers.append(layer)
            seen.sharp = seen.sharp or bool(with_sharp)
    elif name not in seen.plugins:
        seen.plugins.append(name)


def _network_used(seen: _NcclLines) -> tuple[str | None, str]:
    """(network, the line that shows it): chosen, else used by a channel, else with devices listed, else
    a plugin that named itself; none when NCCL said no NET plugin started and named none it used."""
    if seen.chosen is not None:
        return seen.chosen, seen.evidence
    if seen.via_nets:
        return seen.via_nets[0], f"via NET/{seen.via_nets[0]}"
    listed = [d.split("/", 1)[1] for d in seen.devices if d.split("/", 1)[1] not in seen.unavailable]
    preferred = [n for n in listed if n != "Socket"] or listed
    named = [p for p in seen.plugins if p not in seen.unavailable and p not in ("IB", "Socket", "OFI")]
    network = (preferred or named or [None])[0]
    evidence = next(l for l in seen.net_lines if f"NET/{network}" in l) if network is not None else ""
    if seen.no_network:
        return None, ""  # a plugin that printed its name and then failed is no network
    return network, evidence


def nccl_by_node(agents: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Node -> the network NCCL used, and node -> the NET lines that named none preflight could read."""
    nccl = {node: agent.get("nccl") or {} for node, agent in agents.items()}
    return ({node: info.get("network") for node, info in nccl.items()},
            {node: info["unrecognised"] for node, info in nccl.items() if info.get("unrecognised")})
