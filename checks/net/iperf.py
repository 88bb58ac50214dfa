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
            report, unparsed = report_from_text(text)
            results[port]["report"] = report
            if unparsed:
                results[port]["unparsed"] = unparsed
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


def report_from_text(text: str) -> tuple[dict[str, Any] | None, str]:
    """The iperf3 -J document in `text`, and what could not be read ("" when all was read).

    Two documents one after the other (a log appended to twice) give the last one; text after a
    document (a warning printed to the same stream) is left out."""
    decoder, pos, last = json.JSONDecoder(), 0, None
    text = text.strip()
    while pos < len(text):
        start = text.find("{", pos)
        if start < 0:
            break
        try:
            doc, pos = decoder.raw_decode(text, start)
        except ValueError:
            return last, "" if last is not None else text[-500:]
        if isinstance(doc, dict):
            last = doc
    return last, "" if last is not None or not text else text[-500:]


def _received(report: dict[str, Any]) -> dict[str, Any]:
    end = report.get("end") or {}
    received = end.get("sum_received") or {}
    if "bits_per_second" not in received and (report.get("start") or {}).get("test_start", {}).get("protocol") == "UDP":
        received = end.get("sum") or {}  # UDP before 3.12 sums the datagrams the server got in end.sum
    return received


def summarize_sample(per_port: dict[str, dict[str, Any]], streams: int) -> dict[str, Any]:
    """One measurement of one link: the summed receiver figure, or the first error."""
    gbps, errors, connected = [], [], []
    for port in sorted(per_port, key=int):
        entry = per_port[port]
        report = entry.get("report") or {}
        received = _received(report)
        if report.get("error") or "bits_per_second" not in received:
            text = (report.get("error") or entry.get("stderr") or entry.get("unparsed")
                    or f"no result (iperf3 exited {entry.get('rc')}; its JSON has no end.sum_received)")
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
