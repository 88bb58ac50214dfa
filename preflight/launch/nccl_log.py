"""Which network NCCL ran over, from the lines it printed at NCCL_DEBUG=INFO. Pure."""

from __future__ import annotations

import re
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


def nccl_network(lines: list[str]) -> dict[str, Any] | None:
    """Which network NCCL ran over, from its NCCL_DEBUG=INFO lines; None when NCCL printed none. Pure.

    The network NCCL chose ("Using network ..."), else what a channel used ("via NET/<name>/<dev>"),
    else the network whose devices it listed (IB over Socket: before NCCL 2.6 the bootstrap's
    NET/Socket line comes first), else a plugin that named itself (NET/GPUDirectTCPX ...). When none of
    these can be read, `network` is None and `unrecognised` holds the NET lines that were printed, so
    the report can show them instead of a bare "unknown".
    """
    chosen: str | None = None
    evidence = ""
    via: list[str] = []
    via_nets: list[str] = []
    devices: dict[str, str] = {}
    net_lines: list[str] = []
    plugins: list[str] = []
    unavailable: set[str] = set()
    link_layers: list[str] = []
    sharp = False
    no_network = False
    version = None
    seen_nccl = False
    for raw in lines:
        line = raw.rstrip()
        found = _NCCL_VERSION.search(line)
        if found:
            version = version or found.group(1)
        if _NCCL_NO_NET in line:  # NCCL's WARN, or torch's "Last error:" line: no network at all
            no_network, seen_nccl = True, True
            net_lines.append(line.strip())
            continue
        if "NCCL INFO" not in line:
            untagged = _NCCL_UNTAGGED.match(line)
            if not untagged:
                continue
            line = "NCCL INFO " + line[untagged.end():]
        seen_nccl = True
        found = _NCCL_USING.search(line) or _NCCL_USING_OLD.search(line)
        if found and chosen is None:
            chosen, evidence = found.group(1), line.strip()
            continue
        found = _NCCL_VIA.search(line)
        if found:
            name = _via_name(found.group(1))
            if name not in via:
                via.append(name)
            net = _NCCL_VIA_NET.match(name)
            if net and net.group(1) not in via_nets:
                via_nets.append(net.group(1))
            continue
        if "collnet plugin SHARP" in line or "CollNet" in line and "SHARP" in line:
            sharp = True
        failed = _NCCL_PLUGIN_FAILED.search(line)
        if failed:  # one plugin (its name may hold spaces: "AWS Libfabric") did not start
            unavailable.add(failed.group(1))
        found = _NCCL_NET_LINE.search(line)
        if not found:
            continue
        name, rest = _net_line(found.group(1))
        if name in _NOT_A_NETWORK:
            continue
        net_lines.append(line.strip())
        if rest.startswith("No device found"):
            unavailable.add(name)
        elif rest.startswith("Using [0]"):
            listed = rest[len("Using"):].strip()
            devices.setdefault(f"NET/{name}", listed[:200])
            for _dev, layer, with_sharp in _NCCL_DEVICE.findall(listed) if name == "IB" else []:
                if layer not in link_layers:
                    link_layers.append(layer)
                sharp = sharp or bool(with_sharp)
        elif name not in plugins:
            plugins.append(name)
    if not seen_nccl and version is None:
        return None
    network = chosen
    if network is None and via_nets:
        network, evidence = via_nets[0], f"via NET/{via_nets[0]}"
    if network is None:
        listed = [d.split("/", 1)[1] for d in devices if d.split("/", 1)[1] not in unavailable]
        preferred = [n for n in listed if n != "Socket"] or listed
        if preferred:
            network = preferred[0]
            evidence = next(l for l in net_lines if f"NET/{network}" in l)
    if network is None:
        named = [p for p in plugins if p not in unavailable and p not in ("IB", "Socket", "OFI")]
        if named:
            network = named[0]
            evidence = next(l for l in net_lines if f"NET/{network}" in l)
    if no_network and chosen is None and not via_nets:
        network, evidence = None, ""  # a plugin that printed its name and then failed is no network
    if network is None and not via and not devices and not net_lines and not seen_nccl:
        return None
    return {"network": network, "evidence": evidence[:300], "via": via, "devices": devices,
            "link_layers": link_layers, "sharp": sharp, "ib_unavailable": "IB" in unavailable, "version": version,
            "no_network": no_network and network is None,
            "unrecognised": [] if network else net_lines[:5]}


def nccl_by_node(agents: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Node -> the network NCCL used, and node -> the NET lines that named none preflight could read."""
    nccl = {node: agent.get("nccl") or {} for node, agent in agents.items()}
    return ({node: info.get("network") for node, info in nccl.items()},
            {node: info["unrecognised"] for node, info in nccl.items() if info.get("unrecognised")})
