"""The links of net.bandwidth's facts: one link as collect() records it before it is measured, and the
matrix of every pair's median. Pure."""

from __future__ import annotations

import statistics
from typing import Any


def link_entry(pair: tuple[str, str], probes: dict[str, Any], addresses: dict[str, str]) -> dict[str, Any]:
    """A link as the facts hold it, before it is measured: whether its route is local to the sender,
    or its address did not resolve there (either: never measured)."""
    src, dst = pair
    target = probes[src].get("targets", {}).get(addresses[dst], {})
    entry = {"src": src, "dst": dst, "dst_address": addresses[dst], "local": bool(target.get("local")),
             "why_local": target.get("why"), "route": target.get("route"), "samples": []}
    if target.get("error"):
        entry["error"] = f"{addresses[dst]} {target['error']} on {src}"
    return entry


def matrix_of(names: list[str], links: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Every cell's median, None where the pattern does not measure that pair (and on the diagonal)."""
    matrix: dict[str, dict[str, float | None]] = {a: {b: None for b in names if b != a} for a in names}
    for link in links:
        values = [s["gbps"] for s in link["samples"] if "gbps" in s]
        matrix[link["src"]][link["dst"]] = round(statistics.median(values), 3) if values else None
    return matrix
