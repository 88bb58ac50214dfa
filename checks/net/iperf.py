"""What iperf3 printed, as facts: the per-port output of preflight.workers.iperf's clients and one
measurement of a link from it. Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any


def parse_client_output(lines: list[str]) -> dict[str, dict[str, Any]]:
    """Per port: {"rc", "report" (the parsed iperf3 -J document or None), "stderr"}."""
    results: dict[str, dict[str, Any]] = {}
    port, part, buffer = None, None, []

    def flush() -> None:
        if port is None:
            return
        text = "\n".join(buffer).strip()
        if part == "json":
            try:
                results[port]["report"] = json.loads(text) if text else None
            except ValueError:
                results[port]["report"] = None
                results[port]["unparsed"] = text[-500:]
        elif part == "stderr":
            results[port]["stderr"] = text[-500:]

    for line in lines:
        json_marker = re.fullmatch(r"@@json (\d+) (\d+)", line)
        stderr_marker = re.fullmatch(r"@@stderr (\d+)", line)
        if json_marker or stderr_marker or line == "@@done":
            flush()
            buffer = []
            if json_marker:
                port, part = json_marker.group(1), "json"
                results[port] = {"rc": int(json_marker.group(2)), "report": None, "stderr": ""}
            elif stderr_marker:
                port, part = stderr_marker.group(1), "stderr"
            else:
                port, part = None, None
        elif port is not None:
            buffer.append(line)
    flush()
    return results


def summarize_sample(per_port: dict[str, dict[str, Any]], streams: int) -> dict[str, Any]:
    """One measurement of one link: the summed receiver figure, or the first error."""
    gbps, errors, connected = [], [], []
    for port in sorted(per_port, key=int):
        entry = per_port[port]
        report = entry.get("report") or {}
        received = (report.get("end") or {}).get("sum_received") or {}
        if report.get("error") or "bits_per_second" not in received:
            text = report.get("error") or entry.get("stderr") or entry.get("unparsed") or f"iperf3 exited {entry.get('rc')}"
            errors.append(f"port {port}: {text}")
            continue
        gbps.append(received["bits_per_second"] / 1e9)
        for conn in (report.get("start") or {}).get("connected") or []:
            connected.append([conn.get("local_host"), conn.get("remote_host")])
    if len(per_port) < streams and not errors:
        errors.append(f"{streams - len(per_port)} of {streams} iperf3 clients did not report")
    sample: dict[str, Any] = {"per_process_gbps": [round(g, 4) for g in gbps], "connected": connected[:1]}
    if errors:
        sample["error"] = "; ".join(errors)
    else:
        sample["gbps"] = round(sum(gbps), 4)
    return sample
