"""What torchrun printed on each node, and what one multi-node launch came to. Pure.

The ranks' own JSON reports come first (the worker protocol in preflight.workers.process_group), then
torchelastic's error files (TORCHELASTIC_ERROR_FILE, which the guard prints before it removes the log
directory), and only then torchrun's log lines, read with regular expressions as the last resort.
"""

from __future__ import annotations

import json
import re
import signal
from typing import Any, NamedTuple

from preflight.launch.nccl_log import nccl_network
from preflight.launch.nodes import names_text
from preflight.transport.process import EXIT_MARKER, PID_MARKER
from preflight.core.jsonlines import json_objects, loads


_RANKS = re.compile(r"\bglobal_ranks=\[([\d,\s]*)\]")
_GROUP_RANK = re.compile(r"\bgroup_rank=(\d+)")
# torch's log lines: Python ("I1129 16:23:51.825000 ...") and C++ ("[W1129 16:40:34.815289298 socket.cpp:207]").
_LOG_LINE = re.compile(r"^\[?[IWEDF]\d{4} \d\d:\d\d:\d\d")


def summarize_agent(stdout_lines: list[str], stderr_text: str, returncode: int | None, killed: bool,
                    duration_s: float, transport_failure: bool = False) -> dict[str, Any]:
    """One node's torchrun run, as facts: where it got to, its ranks, what the ranks reported. Pure."""
    error_files: list[dict[str, Any]] = []
    pids: dict[str, Any] = {}
    exit_code = None
    for line in stdout_lines:
        text = line.strip()
        if text.startswith(PID_MARKER):
            parts = text.split()
            if len(parts) >= 3:
                pids = {"wrapper": int(parts[1]), "torchrun": int(parts[2]),
                        "log_dir": parts[3] if len(parts) > 3 else ""}
        elif text.startswith(EXIT_MARKER):
            exit_code = int(text.split()[1])
        elif text.startswith(ERROR_FILE_MARKER):
            error_files.append(read_error_file(text[len(ERROR_FILE_MARKER):]))
    reports = json_objects(stdout_lines)  # what the ranks reported, in the worker protocol
    if "Rendezvous complete for workers" in stderr_text:
        rendezvous = "complete"
    elif "RendezvousTimeoutError" in stderr_text:
        rendezvous = "timeout"
    elif "RendezvousClosedError" in stderr_text:
        rendezvous = "closed"  # the host closed it after giving up on someone else
    elif "RendezvousConnectionError" in stderr_text or "connection to the C10d store has failed" in stderr_text:
        # Never connected (the host is absent or blocked), or connected and then lost the store
        # because the host gave up waiting for someone else and closed it.
        rendezvous = "unreachable" if "trying to connect to" in stderr_text else "host lost"
    elif "Rendezvous'ing worker group" in stderr_text:
        rendezvous = "waiting"
    else:
        rendezvous = "not started"
    ranks_match = _RANKS.search(stderr_text)
    group_match = _GROUP_RANK.search(stderr_text)
    ended_badly = killed or transport_failure or (returncode if exit_code is None else exit_code) not in (0, None)
    global_ranks = [int(r) for r in ranks_match.group(1).replace(" ", "").split(",") if r] if ranks_match else []
    last_error = ""
    if ended_badly:
        # The workers' own words first (torchelastic error files), torchrun's log lines after.
        last_error = _error_file_text(error_files, global_ranks) or _agent_error(stderr_text, rendezvous)
    return {
        "returncode": returncode if exit_code is None else exit_code,
        "killed": killed,
        "transport_failure": transport_failure,
        "duration_s": round(duration_s, 2),
        "rendezvous": rendezvous,
        "group_rank": int(group_match.group(1)) if group_match else None,
        "global_ranks": global_ranks,
        "error_files": error_files,
        "pids": pids,
        "reports": reports,
        "last_error": last_error,
        "nccl": nccl_network(list(stdout_lines) + stderr_text.splitlines()),
    }


ERROR_FILE_MARKER = "@@error-file "


def read_error_file(text: str) -> dict[str, Any]:
    """One "@@error-file LOCAL_RANK JSON" line: the local rank and the message of a torchelastic error
    file ({"message": {"message": ..., "extraInfo": {...}}}). Pure."""
    local_rank, _, payload = text.partition(" ")
    try:
        content = loads(payload)
    except ValueError:
        content = {}
    message = content.get("message") if isinstance(content, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    return {"local_rank": int(local_rank) if local_rank.isdigit() else None, "message": str(message or "")[:300]}


def _error_file_text(error_files: list[dict[str, Any]], global_ranks: list[int]) -> str:
    """The first worker failure a torchelastic error file recorded, with its global rank. Pure."""
    for entry in sorted(error_files, key=lambda e: (e.get("local_rank") is None, e.get("local_rank") or 0)):
        if entry.get("message"):
            local = entry.get("local_rank")
            rank = global_ranks[local] if local is not None and local < len(global_ranks) else local
            first = entry["message"].strip().splitlines()[0]
            return f"worker rank {rank if rank is not None else '?'} failed: {first}"[:300]
    return ""


_SUMMARY_PREFIX = re.compile(r"^(?:stderr: |stdout: |\[\d+,\d+\]<std(?:out|err)>: ?)")
_SUMMARY_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback|msg)\s*:\s*(.*)$")
_SUMMARY_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
# The elastic agent's own line, in each of torch's log formats ("ERROR:torch.distributed...:failed",
# "[2024-05-08 ...] ... [ERROR] failed", "E0325 20:57:27.620000 2606 .../api.py:869] failed").
_AGENT_FAILED = re.compile(r"\bfailed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_JSON_MESSAGE = re.compile(r'"message":\s*"((?:[^"\\]|\\.)*)"')
# ProcessGroupNCCL's watchdog, the cause behind a worker's SIGABRT (exit code -6): "[Rank 7] Watchdog
# caught collective operation timeout: WorkNCCL(SeqNum=806, OpType=BROADCAST, [NumelIn=.., NumelOut=..,]
# Timeout(ms)=1800000) ran for 1801027 milliseconds before timing out."
_WATCHDOG = re.compile(r"(?:\[Rank (\d+)\] )?Watchdog caught collective operation timeout: "
                       r"(WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)\)) ran for (\d+) milliseconds")


def _summary_entry(fields: dict[str, str]) -> dict[str, Any]:
    rank = re.match(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", fields.get("rank", ""))
    code = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", fields.get("exitcode", ""))
    entry: dict[str, Any] = {
        "rank": int(rank.group(1)) if rank else None,
        "local_rank": int(rank.group(2)) if rank and rank.group(2) else None,
        "exitcode": int(code.group(1)) if code else None, "pid": int(code.group(2)) if code and code.group(2) else None,
        "host": fields.get("host") or None, "time": fields.get("time") or None,
        "error_file": None if fields.get("error_file") in (None, "<N/A>") else fields["error_file"],
        "traceback": None if fields.get("traceback", "<N/A>").startswith(("<N/A>", "To enable traceback"))
        else fields["traceback"],
        "message": None,
    }
    msg = fields.get("msg", "")
    if msg:
        try:
            content = json.loads(msg)
            entry["message"] = content.get("message") if isinstance(content, dict) else None
        except ValueError:
            found = _JSON_MESSAGE.search(msg)
            entry["message"] = json.loads(f'"{found.group(1)}"') if found else None
        if isinstance(entry["message"], dict):
            entry["message"] = entry["message"].get("message")
    return entry


def parse_failure_summary(text: str) -> dict[str, Any]:
    """torchrun's ChildFailedError summary and the elastic agent's "failed (exitcode: ...)" line. Pure.

    Returns {"root_cause": entry or None, "failures": [entry, ...], "agent_failure": {...} or None};
    an entry holds rank, local_rank, exitcode, pid, host, time, error_file, traceback and message (the
    worker's exception, from the `msg:` JSON torch 1.10 printed). torch 1.10 wrote "rank: 0 (local_rank:
    0)", later releases align the names ("rank      : 0 (local_rank: 0)"); launchers may prefix every line.
    """
    out: dict[str, Any] = {"root_cause": None, "failures": [], "agent_failure": None, "nccl_watchdog": None}
    section, fields, key = None, None, None

    def close() -> None:
        if fields is not None and section is not None:
            entry = _summary_entry(fields)
            if section == "root":
                out["root_cause"] = out["root_cause"] or entry
            else:
                out["failures"].append(entry)

    for raw in text.splitlines():
        line = _SUMMARY_PREFIX.sub("", raw.rstrip())
        watchdog = _WATCHDOG.search(line) if out["nccl_watchdog"] is None else None
        if watchdog:
            rank = watchdog.group(1)
            out["nccl_watchdog"] = {"rank": int(rank) if rank else None, "op": watchdog.group(4),
                                    "seq": int(watchdog.group(3)), "timeout_ms": int(watchdog.group(5)),
                                    "ran_ms": int(watchdog.group(6)),
                                    "text": (f"[Rank {rank}] " if rank else "") + f"{watchdog.group(2)} ran for "
                                            f"{watchdog.group(6)} milliseconds"}
        agent = _AGENT_FAILED.search(line)
        if agent and out["agent_failure"] is None:
            out["agent_failure"] = {"exitcode": int(agent.group(1)), "local_rank": int(agent.group(2)),
                                    "pid": int(agent.group(3))}
        stripped = line.strip()
        if stripped.startswith("Root Cause") or stripped == "Failures:":
            close()
            section, fields, key = ("root" if stripped.startswith("Root Cause") else "failures"), None, None
            continue
        if section is None:
            continue
        entry = _SUMMARY_ENTRY.match(line)
        if entry:
            close()
            fields, key = {}, None
            continue
        found = _SUMMARY_FIELD.match(line)
        if fields is not None and found:
            key = found.group(1)
            fields[key] = found.group(2).strip()
        elif fields is not None and key == "msg" and stripped and not set(stripped) <= set("=-"):
            fields["msg"] += "\n" + stripped
        elif stripped and set(stripped) <= set("=-"):
            close()
            fields, key = None, None
            if stripped.startswith("="):
                section = None
    close()
    return out


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return ""
    try:
        return f" ({signal.Signals(-exitcode).name})"
    except ValueError:
        return ""


def failure_text(summary: dict[str, Any]) -> str:
    """One sentence: the first worker that failed, by its global rank, with its exception or exit code
    (and, when it was aborted (SIGABRT), the NCCL watchdog's timeout that aborted it)."""
    text = _failure_text(summary)
    watchdog = summary.get("nccl_watchdog")
    if text and watchdog and "(SIGABRT)" in text:  # the watchdog aborts its process; another exit is not its
        text = f"{text} after the NCCL watchdog timed out: {watchdog['text']}"
    return text[:300]


def _failure_text(summary: dict[str, Any]) -> str:
    entry = summary.get("root_cause") or next(iter(summary.get("failures") or []), None)
    if entry:
        why = entry.get("message") or f"exit code {entry.get('exitcode', '?')}{_signal_name(entry.get('exitcode'))}"
        if entry.get("traceback") and "Signal" in entry["traceback"] and not entry.get("message"):
            why += f" ({entry['traceback']})"
        rank = entry.get("rank")
        return f"worker rank {'?' if rank is None else rank} failed: {why}"[:300]
    agent = summary.get("agent_failure")
    if agent:
        return (f"worker local rank {agent['local_rank']} failed: exit code {agent['exitcode']}"
                f"{_signal_name(agent['exitcode'])}")
    return ""


def _agent_error(stderr_text: str, rendezvous: str) -> str:
    """The sentence that says why a torchrun ended badly, from its stderr. Pure."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip() and not _LOG_LINE.match(line)]
    if "ChildFailedError" in stderr_text or "Root Cause" in stderr_text or _AGENT_FAILED.search(stderr_text):
        # torchrun's summary table (or, without it, the agent's "failed (exitcode: ...)" line): the first
        # worker that failed, its exit code or signal.
        text = failure_text(parse_failure_summary(stderr_text))
        if text:
            return text
    if rendezvous == "unreachable":
        # The inner error says where it tried to connect; the outer one only that it failed.
        inner = [line for line in lines if "trying to connect to" in line]
        if inner:
            return inner[-1][-300:]
    kept, frame = _outside_frames(stderr_text)
    meaningful = [line for line in kept if not set(line) <= set("=-_* ")]
    if frame and (not meaningful or meaningful[-1].startswith("Traceback (most recent call last)")):
        # cut inside a traceback: its last source line ("elastic_launch(") is no one's error
        return f"torchrun's output ends inside a traceback, before any error or failure summary (last frame: {frame})"
    if frame and meaningful[-1].rstrip(": ").endswith("ChildFailedError"):
        return "a worker failed (torchrun raised ChildFailedError), but the output ends before the summary that names it"
    return meaningful[-1][-300:] if meaningful else ""


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def _outside_frames(stderr_text: str) -> tuple[list[str], str]:
    """stderr's lines without Python traceback frames (`File "...", line N, in f` and the source
    lines, carets and locals printed under it), and the last frame seen ("torch/distributed/run.py,
    line 715, in run"; "" without one)."""
    kept: list[str] = []
    frame, in_frame = "", False
    for raw in stderr_text.splitlines():
        line = _SUMMARY_PREFIX.sub("", raw.rstrip())
        found = _FRAME.match(line)
        if found:
            path = "/".join(found.group(1).replace("\\", "/").split("/")[-3:])
            frame, in_frame = f"{path}, line {found.group(2)}, in {found.group(3)}", True
            continue
        if in_frame and line[:1].isspace():
            continue
        in_frame = False
        if line.strip() and not _LOG_LINE.match(line):
            kept.append(line.strip())
    return kept, frame


def rank_nodes(agents: dict[str, dict[str, Any]]) -> dict[int, str]:
    """Global rank -> node, from what each torchrun logged when the rendezvous completed. Pure."""
    owners = {}
    for node, agent in agents.items():
        for rank in agent.get("global_ranks", []):
            owners[rank] = node
    return owners


def rank_text(rank: int, owners: dict[int, str]) -> str:
    return f"rank {rank} ({owners[rank]})" if rank in owners else f"rank {rank}"


class _Launch(NamedTuple):
    """One multi-node launch, as the judging functions below read it."""
    agents: dict[str, dict[str, Any]]
    owners: dict[int, str]
    reports: list[tuple[str, dict[str, Any]]]
    host: str
    rdzv_timeout_s: float
    launch_timeout_s: float


# What a launch that did not succeed came to: (phase, error, fault_nodes), or None when this reading does not apply.
_Failure = tuple[str, str, list[str]] | None


def interpret_run(agents: dict[str, dict[str, Any]], host: str, rdzv_timeout_s: float,
                  launch_timeout_s: float) -> dict[str, Any]:
    """What one multi-node launch came to. Pure.

    Returns ok, result (rank 0's report without "ok"), phase ("launch", "rendezvous", "roll call",
    "stopped" (a rank that went silent inside a collective), "collective", "timeout"), error (a sentence naming nodes and ranks) and fault_nodes (nodes the
    failure is pinned on; empty when the launch alone cannot tell, which the pairwise pass is for).
    """
    owners = rank_nodes(agents)
    out: dict[str, Any] = {"ok": False, "result": None, "phase": None, "error": None, "fault_nodes": [],
                           "rank_nodes": {str(r): n for r, n in sorted(owners.items())}}
    reports = [(node, rep) for node, agent in agents.items() for rep in agent.get("reports", [])]
    head = next((rep for _, rep in reports if rep.get("ok")), None)
    failed = [n for n, a in agents.items() if a.get("killed") or a.get("returncode") not in (0, None)]
    if head is not None and not failed:
        out["ok"] = True
        out["phase"] = "done"
        out["result"] = {k: v for k, v in head.items() if k != "ok"}
        return out
    launch = _Launch(agents, owners, reports, host, rdzv_timeout_s, launch_timeout_s)
    for reading in (_lost_contact, _rendezvous_failure, _roll_call_failure, _stopped_ranks, _failed_ranks,
                    _hung_launch):
        failure = reading(launch)
        if failure is not None:
            break
    else:
        failure = _unexplained_failure(launch)
    out["phase"], out["error"], out["fault_nodes"] = failure
    return out


def _lost_contact(launch: _Launch) -> _Failure:
    lost = [n for n, a in launch.agents.items() if a.get("transport_failure")]
    if not lost:
        return None
    error = "; ".join(f"lost contact with {n} during the launch: "
                      f"{launch.agents[n].get('last_error') or 'connection closed'}" for n in lost)
    return "launch", error, lost


def _rendezvous_failure(launch: _Launch) -> _Failure:
    agents = launch.agents
    incomplete = {n: a for n, a in agents.items() if a.get("rendezvous") != "complete"}
    if not incomplete:
        return None
    # Nodes that waited at the rendezvous (and gave up, were stopped, or saw the host close it)
    # are victims; the others never got there. Nobody can join a rendezvous whose host is absent: then only the host is named.
    culprits = [n for n, a in incomplete.items() if a.get("rendezvous") not in ("timeout", "waiting", "closed", "host lost")]
    if launch.host in culprits:
        culprits = [launch.host]
    texts = [_not_joined_text(n, agents[n], launch.rdzv_timeout_s, hosting=n == launch.host) for n in culprits]
    if not culprits:
        texts.append(f"the rendezvous did not complete: {names_text(list(incomplete))} waited for the others "
                     f"(up to {launch.rdzv_timeout_s:.0f}s) in vain")
    joined = [n for n in agents if n not in incomplete]
    if joined:
        texts.append(f"completed on {names_text(joined)} only")
    return "rendezvous", "; ".join(texts), culprits


def _failed_reports(launch: _Launch) -> list[tuple[str, dict[str, Any]]]:
    return [(node, rep) for node, rep in launch.reports if not rep.get("ok")]


def _roll_call_failure(launch: _Launch) -> _Failure:
    owners = launch.owners
    missing = sorted({int(m) for _, rep in _failed_reports(launch) for m in rep.get("missing_ranks", [])})
    if not missing:
        return None
    who = ", ".join(rank_text(m, owners) for m in missing)
    return ("roll call", f"{who} never reported in after torchrun started it (the workers' roll call)",
            sorted({owners[m] for m in missing if m in owners}))


def _report_place(node: str, report: dict[str, Any], owners: dict[int, str]) -> str:
    """The rank a report came from, with its node; the node alone when the report names no rank."""
    rank = report.get("rank")
    return rank_text(int(rank), owners) if rank is not None else node


def _stopped_ranks(launch: _Launch) -> _Failure:
    # Ranks that joined (torchrun started them), then said nothing at all, on nodes where no rank
    # said anything, while the others failed waiting for them: the ones that stopped inside a
    # collective (hung, or died without a word) and were ended by their torchrun or by us.
    owners = launch.owners
    errors = _failed_reports(launch)
    reporting_nodes = {node for node, _ in launch.reports}
    stopped = sorted(r for r, node in owners.items() if node not in reporting_nodes)
    if not (errors and stopped):
        return None
    if any(_CONNECT_FAILED.search(str(rep.get("error") or "")) for _, rep in errors):
        # A rank that could not connect to a peer names the fault better than a rank that said nothing: on
        # a loaded machine a slower rank is ended with the launch before it reports the same error. The
        # ranks' errors are listed and nobody is singled out (the isolation pass measures the pairs).
        return None
    first_node, first = errors[0]
    where = _report_place(first_node, first, owners)
    error = (f"{', '.join(rank_text(r, owners) for r in stopped)} stopped inside a collective: "
             f"{'it' if len(stopped) == 1 else 'they'} reported nothing, while the others failed waiting "
             f"({where}: {first.get('error') or 'failed'})")
    return "stopped", error, sorted({owners[r] for r in stopped})


# A connection a rank could not make (gloo's "connect: Connection refused", NCCL's socket errors): a fault of a
# path between nodes, not of the rank that kept silent.
_CONNECT_FAILED = re.compile(r"connect: |Connection refused|No route to host|Network is unreachable|"
                             r"Connection timed out", re.IGNORECASE)


def _failed_ranks(launch: _Launch) -> _Failure:
    errors = _failed_reports(launch)
    if not errors:
        return None
    seen = [f"{_report_place(node, rep, launch.owners)}: {rep.get('error') or 'failed'}" for node, rep in errors]
    return "collective", "; ".join(seen[:4]) + (f"; and {len(seen) - 4} more ranks" if len(seen) > 4 else ""), []


def _exited_agents(launch: _Launch) -> list[tuple[str, dict[str, Any]]]:
    """The torchruns that ended on their own with a non-zero exit code."""
    return [(n, a) for n, a in launch.agents.items() if a.get("returncode") not in (0, None) and not a.get("killed")]


def _hung_launch(launch: _Launch) -> _Failure:
    stuck = [n for n, a in launch.agents.items() if a.get("killed")]
    if not stuck or _exited_agents(launch):
        return None
    error = (f"still running on {names_text(stuck)} after {launch.launch_timeout_s:.0f}s and stopped "
             "(no rank reported an error: a collective that hangs)")
    return "timeout", error, []


def _unexplained_failure(launch: _Launch) -> tuple[str, str, list[str]]:
    exited = _exited_agents(launch)
    if exited:
        node, agent = exited[0]
        error = f"torchrun on {node} exited with code {agent['returncode']}: {agent.get('last_error') or 'no output'}"
        return "collective", error, []
    return "collective", "no rank reported a result", []


def _not_joined_text(node: str, agent: dict[str, Any], rdzv_timeout_s: float, hosting: bool = False) -> str:
    state = agent.get("rendezvous")
    role = " (the rendezvous host)" if hosting else ""
    if state == "unreachable":
        return f"{node}{role} could not reach the rendezvous: {agent.get('last_error')}"
    if agent.get("killed"):
        if state == "waiting":
            return f"torchrun on {node}{role} was still waiting at the rendezvous when it was stopped"
        return f"torchrun on {node}{role} never joined the rendezvous within {rdzv_timeout_s:.0f}s (still running; stopped)"
    return (f"torchrun on {node}{role} exited with code {agent.get('returncode')} before joining the rendezvous: "
            f"{agent.get('last_error') or 'no output'}")
