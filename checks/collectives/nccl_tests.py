"""nccl-tests' all_reduce_perf beside preflight's own all-reduce: the figure operators already trust.

When an `all_reduce_perf` binary (github.com/NVIDIA/nccl-tests) is on the node's PATH, collectives.local
runs it over the same GPUs and sizes and reports both figures side by side. This module builds its
command line and reads what it printed; it runs nothing itself.

The table (nccl-tests src/common.cu, since 2.19 src/util.cu) is read by the names in its own header
line, because the layout changed over the years:
    2.0-2.10   size count type redop | time algbw busbw error | time algbw busbw error
               (error: the largest deviation from the expected result, a float such as 2e-07)
    2.10+      size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
               (#wrong: a count of wrong elements, "N/A" without -c)
    2.19+      the same with optional per-iteration columns (i_min i_max i_p99 i_cv%), "cputime"
               instead of "time" (-C), and a trailing timestamp (-Z)
Time is in microseconds, algbw/busbw in GB/s (1e9 bytes/s). all_gather and broadcast print no
redop (older) or no root. Lines may carry a launcher's prefix: `0: ` (srun --label), `[0] `
(mpiexec -l of MPICH and Intel MPI) or `[1,0]<stdout>:` (mpirun --tag-output). Since 2.19 `-J FILE` writes the same results as JSON,
read by `parse_json`.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

BINARY = "all_reduce_perf"

# What a launcher puts before each line: srun --label "0: ", MPICH's and Intel MPI's -l/-prepend-rank
# "[0] ", Open MPI's --tag-output "[1,0]<stdout>:" (PRRTE: "[prterun-host-1234@1,0]<stdout>: ", with
# --output tag-detailed a "[host:pid]" after it, and after a timestamp with --timestamp-output).
_LAUNCHER_PREFIX = re.compile(r"^(?:\s*\d+: |\[\d+\] |.{0,80}?\[(?:[\w.@-]+,)?\d+(?:,\d+)?\](?:\[[^\]]*\])?"
                              r"<std(?:out|err)>: ?)")
# "Test NCCL failure common.cu:1204 '...'", "Test CUDA failure ...", " .. host pid 1: Test failure
# common.cu:915", and before nccl-tests 2.x printed "Test ", "NCCL failure common.cu:921 '...'".
_FAILURE = re.compile(r"\b(?:Test (?:NCCL |CUDA )?failure|NCCL failure|CUDA failure) \S+:\d+")
_TIME_COLUMNS = ("time", "cputime")
_LEAD_NAMES = {"size": "bytes", "bytes": "bytes", "count": "count", "n": "count", "type": "type",
               "redop": "redop", "op": "redop", "root": "root"}
_HALF_NAMES = {"time": "time_us", "cputime": "time_us", "algbw": "algbw_gbps", "busbw": "busbw_gbps",
               "#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error",
               "i_min": "i_min_us", "i_max": "i_max_us", "i_p99": "i_p99_us", "i_cv%": "i_cv_pct"}


def find_binary() -> str | None:
    return shutil.which(BINARY)


def argv_for(binary: str, sizes: list[int], gpus: int, iters: int, warmup: int) -> list[str]:
    """One process driving all local GPUs (-g), doubling from the smallest to the largest size."""
    return [binary, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2", "-g", str(gpus),
            "-n", str(iters), "-w", str(warmup), "-c", "1"]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # "nan" is no figure


def _strip_prefix(line: str) -> str:
    for _ in range(3):  # srun's label before mpirun's tag, and the like
        bare = _LAUNCHER_PREFIX.sub("", line, count=1)
        if bare == line:
            break
        line = bare
    return line.strip()


# Before nccl-tests 2.0 (2017-2019) the header and the summary were printed without the leading '#':
# "nThread 1 nGpus 8 ...", "       size         count    type ...", " Out of bounds values : 2 FAILED",
# " Avg bus bandwidth    : 128.942". A forum or issue may also lose the '#' of a newer table.
_UNTAGGED_STARTS = ("nThread ", "Out of bounds values", "Avg bus bandwidth", "Using devices", "nccl-tests version",
                    "Collective test", "Blocking Enabled")


def _untagged_comment(line: str) -> bool:
    """A line nccl-tests prints as a comment, printed (or quoted) without its '#'."""
    if line.startswith(_UNTAGGED_STARTS) or re.match(r"Rank\s+\d+ (?:Group\s+\d+ )?Pid\s", line):
        return True
    words = line.split()
    return bool(words) and not words[0].isdigit() and (
        _layout_from_header(words) is not None or words[:2] == ["(B)", "(elements)"]
        or line.startswith("out-of-place"))


def _layout_from_header(words: list[str]) -> dict[str, Any] | None:
    """Column layout from the words of the header line (without the leading '#')."""
    names = [w.lower() for w in words]
    if "busbw" not in names or not ({"size", "bytes"} & set(names)):
        return None
    starts = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if not starts:
        return None
    lead = [_LEAD_NAMES.get(name, name) for name in names[:starts[0]]]
    halves = []
    for number, start in enumerate(starts[:2]):
        end = starts[number + 1] if number + 1 < len(starts) else len(names)
        half = [_HALF_NAMES[name] for name in names[start:end] if name in _HALF_NAMES]
        halves.append(half)
    return {"lead": lead, "halves": halves, "source": "header"}


def _layout_from_row(fields: list[str]) -> dict[str, Any] | None:
    """The layout of a row printed without its header line: two halves of four after the leading columns."""
    lead_count = len(fields) - 8
    if lead_count < 3 or lead_count > 5:
        return None
    lead = ["bytes", "count", "type"]
    if lead_count == 5:
        lead += ["redop", "root"]
    elif lead_count == 4:
        lead += ["root"] if _number(fields[3]) is not None else ["redop"]
    error = fields[-1]
    last = "error" if ("e" in error.lower() or "." in error) and error != "N/A" else "wrong"
    half = ["time_us", "algbw_gbps", "busbw_gbps", last]
    return {"lead": lead, "halves": [half, list(half)], "source": "row width"}


def _half(values: list[str], names: list[str]) -> dict[str, Any]:
    half: dict[str, Any] = {"time_us": None, "algbw_gbps": None, "busbw_gbps": None, "wrong": None}
    for name, text in zip(names, values):
        if name == "wrong":
            count = _number(text)
            half["wrong"] = None if count is None else int(count)
        elif name == "error":
            half["error"] = _number(text)
        else:
            half[name] = _number(text)
    return half


def _row(fields: list[str], layout: dict[str, Any]) -> dict[str, Any] | None:
    lead, halves = layout["lead"], layout["halves"]
    width = len(lead) + sum(len(h) for h in halves)
    if len(fields) < width and len(fields) != len(lead) + (len(halves[-1]) if halves else 0):
        return None
    values = dict(zip(lead, fields))
    if not values.get("bytes", "").isdigit() or not values.get("count", "0").lstrip("-").isdigit():
        return None
    row: dict[str, Any] = {"bytes": int(values["bytes"]), "count": int(values.get("count") or 0),
                           "type": values.get("type"), "redop": values.get("redop"), "root": values.get("root")}
    pos = len(lead)
    if len(fields) < width:  # trace replay prints the in-place half only
        row["out_of_place"], row["in_place"] = None, _half(fields[pos:], halves[-1])
        return row
    parts = []
    for names in halves:
        parts.append(_half(fields[pos:pos + len(names)], names))
        pos += len(names)
    row["out_of_place"] = parts[0]
    row["in_place"] = parts[1] if len(parts) > 1 else None
    return row


def parse_output(text: str) -> dict[str, Any]:
    """The table, the summary lines and the failures all_reduce_perf (or any *_perf) printed.

    Returns {"rows": [{"bytes", "count", "type", "redop", "root", "out_of_place", "in_place"}],
    "avg_busbw_gbps", "n_gpus", "out_of_bounds", "version", "failures": [line, ...],
    "unparsed": [line, ...]}. Each half holds time_us, algbw_gbps, busbw_gbps and wrong (a count, or
    None when the column is "N/A" or is the old float deviation, kept as "error"). `unparsed` lists
    the lines that look like table rows and could not be read, so a caller never mistakes a table it
    cannot read for no table at all.
    """
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {"rows": rows, "avg_busbw_gbps": None, "n_gpus": None, "out_of_bounds": None,
                             "version": None, "failures": [], "unparsed": [], "layout": None}
    layout: dict[str, Any] | None = None
    in_table = False
    for raw in text.splitlines():
        line = _strip_prefix(raw)
        if not line:
            continue
        if _FAILURE.search(line) and not line.startswith("#"):
            if line not in facts["failures"] and len(facts["failures"]) < 20:
                facts["failures"].append(line[:300])
        elif line.startswith("#") or _untagged_comment(line):
            found, starts_table = _read_comment(facts, line)
            layout = found or layout
            in_table = in_table or starts_table
        else:
            _read_row(facts, raw, line, layout, in_table)
    return facts


def _read_comment(facts: dict[str, Any], line: str) -> tuple[dict[str, Any] | None, bool]:
    """A '#' line: the table's header (its layout, and that the table starts) or a summary line, into facts."""
    body = line.lstrip("#").strip()
    words = body.split()
    found = _layout_from_header(words)
    if found:
        facts["layout"] = found
    if "nGpus" in words and words.index("nGpus") + 1 < len(words):
        facts["n_gpus"] = int(_number(words[words.index("nGpus") + 1]) or 0) or None
    if body.startswith("Avg bus bandwidth"):
        facts["avg_busbw_gbps"] = _number(body.split(":", 1)[-1].split()[0]) if ":" in body else None
    elif body.startswith("Out of bounds values"):
        facts["out_of_bounds"] = int(_number(body.split(":", 1)[-1].split()[0]) or 0)
    elif body.startswith("nccl-tests version"):
        facts["version"] = words[2] if len(words) > 2 else None
    elif body.startswith("error:") and body[6:].strip():
        facts["failures"].append(line[:300])
    return found, bool(found) or words[:2] == ["(B)", "(elements)"]


def _read_row(facts: dict[str, Any], raw: str, line: str, layout: dict[str, Any] | None, in_table: bool) -> None:
    """A table row, by the header's layout or else by its own shape; a row that looks like one and
    cannot be read goes to facts["unparsed"]."""
    fields = line.split()
    if not fields[0].isdigit():
        return
    use = layout or _layout_from_row(fields)
    row = _row(fields, use) if use else None
    if row is None:
        if in_table or len(fields) >= 8:
            facts["unparsed"].append(raw.strip()[:300])
        return
    if layout is None and facts["layout"] is None:
        facts["layout"] = use
    facts["rows"].append(row)


def _json_half(half: Any) -> dict[str, Any] | None:
    if not isinstance(half, dict):
        return None

    def figure(key: str) -> float | None:
        value = half.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    wrong = half.get("nwrong")
    return {"time_us": figure("time") if "time" in half else figure("cpu_time"), "algbw_gbps": figure("alg_bw"),
            "busbw_gbps": figure("bus_bw"), "wrong": int(wrong) if isinstance(wrong, (int, float)) else None}


def parse_json(text: str) -> dict[str, Any]:
    """The document `-J FILE` writes (nccl-tests 2.19+), in the shape parse_output returns."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return {"rows": [], "avg_busbw_gbps": None, "n_gpus": None, "out_of_bounds": None, "version": None,
                "failures": [], "unparsed": [f"not JSON: {exc}"], "layout": None}
    config = doc.get("config") or {}
    rows = []
    for result in doc.get("results") or []:
        if not isinstance(result, dict) or not isinstance(result.get("size"), int):
            continue
        rows.append({"bytes": result["size"], "count": result.get("count"), "type": result.get("type"),
                     "redop": result.get("redop"), "root": str(result.get("root", "")).strip() or None,
                     "out_of_place": _json_half(result.get("out_of_place")),
                     "in_place": _json_half(result.get("in_place"))})
    bounds = doc.get("out_of_bounds") or {}
    average = doc.get("average_bus_bandwidth") or {}
    return {"rows": rows, "avg_busbw_gbps": average.get("bandwidth"), "n_gpus": config.get("ngpus"),
            "out_of_bounds": bounds.get("count"), "version": doc.get("version"),
            "failures": [str(e)[:300] for e in doc.get("errors") or [] if e], "unparsed": [],
            "layout": {"source": "json"}}


def run_error(returncode: int | None, parsed: dict[str, Any]) -> str | None:
    """Why a run counts as failed, in words that show what it printed; None when it did not fail."""
    if parsed["failures"]:
        return parsed["failures"][0]
    if parsed["rows"] and parsed["unparsed"]:
        return f"some table rows could not be read: {parsed['unparsed'][0]}"
    if parsed["unparsed"]:
        return f"exit status {returncode}; its table could not be read: {parsed['unparsed'][0]}"
    if returncode not in (0, None):
        return f"exit status {returncode}" + ("" if parsed["rows"] else ", no result table")
    if not parsed["rows"]:
        return "no result table"
    return None


def row_at(facts: dict[str, Any], size: int) -> dict[str, Any] | None:
    for row in facts.get("rows") or []:
        if row["bytes"] == size:
            return row
    return None
