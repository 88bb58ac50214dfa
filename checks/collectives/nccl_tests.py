"""nccl-tests' all_reduce_perf beside preflight's own all-reduce: the figure operators already trust.

When an `all_reduce_perf` binary (github.com/NVIDIA/nccl-tests) is on the node's PATH, collectives.local
runs it over the same GPUs and sizes and reports both figures side by side. This module builds its
command line and parses its output table; it runs nothing itself.

The table (nccl-tests src/common.cu), one row per size after `#`-prefixed headers:
    size count type redop root | time algbw busbw #wrong (out-of-place) | time algbw busbw #wrong (in-place)
with time in microseconds and algbw/busbw in GB/s (1e9 bytes/s); #wrong is "N/A" without -c 1.
"""

from __future__ import annotations

import shutil
from typing import Any

BINARY = "all_reduce_perf"


def find_binary() -> str | None:
    return shutil.which(BINARY)


def argv_for(binary: str, sizes: list[int], gpus: int, iters: int, warmup: int) -> list[str]:
    """One process driving all local GPUs (-g), doubling from the smallest to the largest size."""
    return [binary, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2", "-g", str(gpus),
            "-n", str(iters), "-w", str(warmup), "-c", "1"]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_output(text: str) -> dict[str, Any]:
    """Rows of the all_reduce_perf table, the "Avg bus bandwidth" line and the header facts.

    Returns {"rows": [{"bytes", "count", "type", "out_of_place": {...}, "in_place": {...}}],
    "avg_busbw_gbps", "n_gpus", "out_of_bounds"}; rows is empty when no table was printed.
    """
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {"rows": rows, "avg_busbw_gbps": None, "n_gpus": None, "out_of_bounds": None}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            words = stripped.lstrip("#").split()
            if "nGpus" in words and words.index("nGpus") + 1 < len(words):
                facts["n_gpus"] = int(_number(words[words.index("nGpus") + 1]) or 0) or None
            if stripped.startswith("# Avg bus bandwidth"):
                facts["avg_busbw_gbps"] = _number(stripped.split(":")[-1].strip())
            if stripped.startswith("# Out of bounds values"):
                facts["out_of_bounds"] = int(_number(stripped.split(":")[-1].split()[0]) or 0)
            continue
        fields = stripped.split()
        if len(fields) < 13 or not fields[0].isdigit():
            continue
        halves = []
        for start in (5, 9):
            time_us, algbw, busbw = (_number(v) for v in fields[start:start + 3])
            wrong = fields[start + 3]
            halves.append({"time_us": time_us, "algbw_gbps": algbw, "busbw_gbps": busbw,
                           "wrong": None if wrong == "N/A" else int(_number(wrong) or 0)})
        rows.append({"bytes": int(fields[0]), "count": int(fields[1]), "type": fields[2], "redop": fields[3],
                     "out_of_place": halves[0], "in_place": halves[1]})
    return facts


def row_at(facts: dict[str, Any], size: int) -> dict[str, Any] | None:
    for row in facts.get("rows") or []:
        if row["bytes"] == size:
            return row
    return None
