"""collectives.cluster: all-reduce across the nodes is correct, and how fast it is.

The ranks run `preflight.workers.allreduce`, the program collectives.local runs on one node, here
started by torchrun on every node at once:

    env GLOO_SOCKET_IFNAME=<iface> LOGLEVEL=INFO ... <node python> -m torch.distributed.run
        --nnodes=N --nproc-per-node=K --rdzv-backend=c10d --rdzv-endpoint=<first node IP>:<port>
        --rdzv-id=<fresh id> --rdzv-conf=is_host=<1 on the first node, 0 elsewhere>,join_timeout=J,read_timeout=J
        --local-addr=<this node's IP> --max-restarts=0 --log-dir=<temporary directory>
        -m preflight.workers.allreduce --backend gloo|nccl ...

Why every address is explicit: by default torchrun publishes `socket.getfqdn()` as the address of
the node that serves the workers' store, c10d decides who hosts the rendezvous by comparing the
endpoint with the host name, and gloo binds to whatever the host name resolves to. On nodes whose
host name resolves to 127.0.0.1 or 127.0.1.1 (common /etc/hosts defaults, containers, network
namespaces), each node then advertises its own loopback and the job hangs at start. So before the
launch every node is probed with its own Python: its host name and what that resolves to, the
interface that carries its address (or, when none does, the route to a peer: `ip -j route get`),
its boot id, its torch, GPUs, NCCL and gloo. The probe's answers go into the launch as
--local-addr, the rendezvous endpoint and GLOO_SOCKET_IFNAME, and a host name that resolves only to
loopback is explained in the details.

NCCL on GPU nodes (K = GPUs per node), gloo among K CPU processes otherwise (K = gloo_ranks_per_node).
Figures follow nccl-tests: algbw = bytes / time, busbw = algbw x 2(n-1)/n over all n ranks.

When the all-reduce fails, returns wrong sums, or misses a threshold that is set, and the failure is
not already pinned on a node (one that never joined), a pairwise pass runs two-node all-reduces over
disjoint pairs at once, in round-robin rounds, within `pairwise_timeout_s`: a node whose every pair
is bad while other pairs are fine is at fault; otherwise the bad pairs are.

Processes: each torchrun runs under a small shell wrapper on its node that prints its PID, holds the
transport's stdin, and sends SIGTERM (then SIGKILL) to torchrun when that stdin closes, which is
what happens when the check stops it, when the check itself is killed, and when an ssh session
drops. Workers die with their torchrun (PR_SET_PDEATHSIG in the worker). What is still running
after that is killed by its recorded PID on the node, and the local end by its process group.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from preflight.check import Check, ClusterContext, Expect, Outcome, measure
from preflight.model import Measurement, Scope, Status, worst

MIB = 1 << 20
# The sizes collectives.local uses: on GPUs 256 MiB is where inter-node busbw reaches its plateau
# in nccl-tests; on CPU 16 MiB is past gloo's plateau and keeps a run within seconds.
GPU_SIZES = [8, MIB, 32 * MIB, 256 * MIB]
CPU_SIZES = [8, MIB, 16 * MIB]
SLACK_S = 5.0  # kept back from the check's deadline for reporting
PROBE_TIMEOUT_S = 60.0  # the probe imports torch, which takes seconds on a busy node
GRACE_S = 8.0  # after one node's torchrun fails, the others get this long to end by themselves
STOP_WAIT_S = 7.0  # after stdin closes, the wrapper's TERM then KILL (5 s) has this long to work
MIN_LAUNCH_S = 20.0
LOG_DIR_PLACEHOLDER = "{log_dir}"  # the wrapper replaces it with a fresh directory it removes

# Runs on a node with `sh -c WRAPPER sh <command...>`. Makes a private directory for torchrun's
# logs, expands a leading ~/ (a per-host python=~/venv/bin/python), starts the command with stdin
# from /dev/null and prints "@@pid <wrapper> <command> <dir>". A watcher holds the transport's stdin
# (fd 3) and, when it reads end-of-file (the check closed it, the check died, the ssh session
# dropped), signals the wrapper, which sends the command SIGTERM and, 5 s later, SIGKILL. The
# escalation runs in the wrapper itself, so nothing it starts outlives it. Prints "@@exit <code>".
WRAPPER = r"""
dir=$(mktemp -d "${TMPDIR:-/tmp}/preflight-torchrun.XXXXXX") || exit 97
for arg do
  shift
  case $arg in
    "{log_dir}") arg=$dir ;;
    "~/"*) arg=$HOME/${arg#"~/"} ;;
  esac
  set -- "$@" "$arg"
done
stop=0
trap 'stop=1' USR1
exec 3<&0 </dev/null
"$@" 3<&- &
child=$!
echo "@@pid $$ $child $dir"
( while read -r _ <&3; do :; done; kill -USR1 $$ ) 3<&3 >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait "$child"
rc=$?
if [ "$stop" = 1 ] && kill -0 "$child" 2>/dev/null; then
  kill -TERM "$child" 2>/dev/null
  i=0
  while [ "$i" -lt 50 ] && kill -0 "$child" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$child" 2>/dev/null
  wait "$child"
  rc=$?
fi
kill "$watcher" 2>/dev/null
rm -rf "$dir"
echo "@@exit $rc"
exit "$rc"
"""

# Run with the node's Python when the wrapper did not end in time: kills the command (and every
# process below it) only while its command line still starts as launched, then the wrapper shell,
# and removes the log directory. argv: wrapper pid, command pid, log dir, then the expected start
# of the command line.
KILL_PROGRAM = r"""
import os, shutil, signal, sys
wrapper, child, log_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
expected = [os.path.expanduser(a) if a.startswith("~/") else a for a in sys.argv[4:]]
try:
    import psutil
except ImportError:
    psutil = None
def kill_tree(pid, check):
    if psutil is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        return
    try:
        proc = psutil.Process(pid)
        if not check(proc):
            return
        victims = proc.children(recursive=True) + [proc]
    except psutil.Error:
        return
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass
kill_tree(child, lambda p: p.cmdline()[:len(expected)] == expected)
kill_tree(wrapper, lambda p: p.name() in ("sh", "dash", "bash", "ash", "busybox"))
if os.path.basename(log_dir).startswith("preflight-torchrun."):
    shutil.rmtree(log_dir, ignore_errors=True)
"""

# Run with the node's Python before a launch: a TCP port that was free on the given address a
# moment ago, for the rendezvous that node hosts.
PORT_PROGRAM = r"""
import socket, sys
host = sys.argv[1]
with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.bind((host, 0))
    print(sock.getsockname()[1])
"""

# Run with the node's Python: what the launch needs to know about the node. argv: the IP other
# nodes reach it at (as the coordinator resolved the node's address), the address as written, then
# the IPs of its peers. Prints one JSON object.
PROBE = r"""
import json, os, shutil, socket, subprocess, sys

own_ip, own_address, peers = sys.argv[1], sys.argv[2], sys.argv[3:]

def resolve(name):
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)})
    except (socket.gaierror, UnicodeError):
        return []

facts = {"hostname": socket.gethostname(), "fqdn": socket.getfqdn(), "python": sys.executable}
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

interfaces = {}
try:
    import psutil
    for name, addrs in psutil.net_if_addrs().items():
        interfaces[name] = [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
except Exception as exc:
    facts["interfaces_error"] = "%s: %s" % (type(exc).__name__, exc)
facts["interfaces"] = interfaces
facts["interface"] = facts["ip"] = facts["interface_found_by"] = None
# The address the coordinator resolved first; then what the node itself resolves its name to (an
# ssh alias the coordinator could not resolve). A loopback address only for a node that was given
# one (nodes that are the coordinator's own machine); anywhere else the route to a peer decides.
def loopback(a):
    return a.startswith("127.") or a == "::1" or a.startswith("::ffff:127.")
candidates = [own_ip] + resolve(own_ip) + facts["address_resolves_to"]
candidates = [a for a in dict.fromkeys(candidates) if loopback(own_ip) or not loopback(a)]
for candidate in candidates:
    found = [name for name, addrs in sorted(interfaces.items()) if candidate in addrs]
    if found:
        facts["interface"], facts["ip"], facts["interface_found_by"] = found[0], candidate, "address"
        break
ip_tool = shutil.which("ip")
if facts["interface"] is None and peers and ip_tool:
    peer = (resolve(peers[0]) or [peers[0]])[0]
    try:
        out = subprocess.run([ip_tool, "-j", "route", "get", peer], capture_output=True, text=True, timeout=10)
        route = json.loads(out.stdout)[0]
        facts["interface"], facts["ip"] = route.get("dev"), route.get("prefsrc")
        facts["interface_found_by"] = "route to %s" % peer
    except Exception as exc:
        facts["route_error"] = "%s: %s" % (type(exc).__name__, exc)

if facts["ip"]:
    try:
        with socket.socket(socket.AF_INET6 if ":" in facts["ip"] else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((facts["ip"], 0))
            facts["free_port"] = sock.getsockname()[1]
    except OSError as exc:
        facts["bind_error"] = "cannot bind %s: %s" % (facts["ip"], exc)

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
try:
    import preflight
    facts["preflight"] = preflight.__version__
except ImportError:
    facts["preflight"] = None
print(json.dumps(facts))
"""


@dataclass
class Params:
    # Unset: busbw is measured and reported, not judged; the right floor depends on the fabric
    # (8 x 400 Gbit/s InfiniBand per node gives nccl-tests around 350-390 GB/s busbw across H100
    # nodes, a single 100 GbE link about 10). Set it from a known-good run on the same fabric; a
    # run below it also starts the pairwise pass that names the node or pair at fault.
    min_busbw_gbps: float | None = None
    # Unset likewise: the latency at the smallest size is reported, judged only when this is set.
    max_latency_us: float | None = None
    # "nccl", "gloo", or None: NCCL when every node has GPUs and NCCL, gloo on CPU otherwise.
    backend: str | None = None
    # Message sizes; the smallest gives the latency, the largest the busbw that min_busbw_gbps
    # judges. None: GPU_SIZES with NCCL, CPU_SIZES with gloo.
    sizes_bytes: list[int] | None = None
    # nccl-tests' defaults: 5 warm-up operations, 20 timed iterations.
    iters: int = 20
    warmup: int = 5
    check_elements: int = 1 << 20  # elements of the random-data correctness tensor
    # CPU processes per node with gloo. One: the network between nodes is what this measures, and
    # more processes per node share the same link while adding CPU load.
    gloo_ranks_per_node: int = 1
    # GPUs per node with NCCL. None: the smallest GPU count torch sees on any node.
    gpus_per_node: int | None = None
    # The rendezvous port on the first node. None: one that was free there a moment before the
    # launch. Set it where only known ports are open between nodes.
    rdzv_port: int | None = None
    # How long torchrun waits for every node to join the rendezvous (c10d join_timeout); a node
    # that has not joined by then is named. A minute covers a slow interpreter start on a busy node.
    rdzv_timeout_s: float = 60.0
    # How long rank 0 waits for every rank to report in, once torchrun started them.
    join_timeout_s: float = 60.0
    # init_process_group(timeout=...): a collective that waits longer fails. Always kept shorter
    # than what is left of this check's own timeout.
    pg_timeout_s: float = 60.0
    # GLOO_SOCKET_IFNAME on every node. None: on each node the interface that carries the address
    # other nodes reach it at, as the probe found it there.
    socket_ifname: str | None = None
    # Extra environment for torchrun on every node (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...).
    env: dict[str, str] = field(default_factory=dict)
    # The pairwise pass: on when the all-reduce fails or misses a threshold, within this many seconds.
    pairwise: bool = True
    pairwise_timeout_s: float = 120.0
    pairwise_iters: int = 5
    # Fault injection, for tests and demonstrations only: on this node a process that never joins
    # the rendezvous stands in for torchrun (it stays alive until it is killed).
    inject_absent_node: str | None = None
    # Fault injection: this global rank never joins the workers' roll call.
    inject_absent_rank: int | None = None


# -- small pure helpers --------------------------------------------------------------------------


def human_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


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


def torchrun_argv(python: str, *, nnodes: int, nproc: int, rdzv_endpoint: str, run_id: str, is_host: bool,
                  local_addr: str, rdzv_timeout_s: float, env: dict[str, str], module: str,
                  worker_args: list[str]) -> list[str]:
    """The command run on one node (inside WRAPPER). Pure."""
    timeout = max(1, int(round(rdzv_timeout_s)))
    return [
        "env", *[f"{k}={v}" for k, v in sorted(env.items())],
        python, "-m", "torch.distributed.run",
        f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host={1 if is_host else 0},join_timeout={timeout},read_timeout={timeout}",
        f"--local-addr={local_addr}", "--max-restarts=0", f"--log-dir={LOG_DIR_PLACEHOLDER}",
        "-m", f"preflight.workers.{module}", *worker_args,
    ]


def absent_argv(python: str) -> list[str]:
    """Fault injection: a process that stays alive and never joins the rendezvous."""
    return [python, "-c", "import time\nwhile True: time.sleep(3600)", "never-joins"]


def round_robin(names: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint pairs in which every pair of nodes meets once (circle method). Pure."""
    players: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


# -- what torchrun printed (pure) ------------------------------------------------------------------

_RANKS = re.compile(r"\bglobal_ranks=\[([\d,\s]*)\]")
_GROUP_RANK = re.compile(r"\bgroup_rank=(\d+)")
# torch's log lines: Python ("I1129 16:23:51.825000 ...") and C++ ("[W1129 16:40:34.815289298 socket.cpp:207]").
_LOG_LINE = re.compile(r"^\[?[IWEDF]\d{4} \d\d:\d\d:\d\d")


def summarize_agent(stdout_lines: list[str], stderr_text: str, returncode: int | None, killed: bool,
                    duration_s: float, transport_failure: bool = False) -> dict[str, Any]:
    """One node's torchrun run, as facts: where it got to, its ranks, what the ranks reported. Pure."""
    reports = []
    pids: dict[str, Any] = {}
    exit_code = None
    for line in stdout_lines:
        text = line.strip()
        if text.startswith("@@pid "):
            parts = text.split()
            if len(parts) >= 3:
                pids = {"wrapper": int(parts[1]), "torchrun": int(parts[2]),
                        "log_dir": parts[3] if len(parts) > 3 else ""}
        elif text.startswith("@@exit "):
            exit_code = int(text.split()[1])
        elif text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                reports.append(value)
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
    last_error = _agent_error(stderr_text, rendezvous) if ended_badly else ""
    return {
        "returncode": returncode if exit_code is None else exit_code,
        "killed": killed,
        "transport_failure": transport_failure,
        "duration_s": round(duration_s, 2),
        "rendezvous": rendezvous,
        "group_rank": int(group_match.group(1)) if group_match else None,
        "global_ranks": [int(r) for r in ranks_match.group(1).replace(" ", "").split(",") if r] if ranks_match else [],
        "pids": pids,
        "reports": reports,
        "last_error": last_error,
    }


_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$")


def _agent_error(stderr_text: str, rendezvous: str) -> str:
    """The sentence that says why a torchrun ended badly, from its stderr. Pure."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip() and not _LOG_LINE.match(line)]
    if "ChildFailedError" in stderr_text and "Root Cause" in stderr_text:
        # torchrun's summary table: the first worker that failed, its exit code or signal.
        tail = stderr_text.split("Root Cause", 1)[1].splitlines()
        fields = {m.group(1): m.group(2).strip() for m in map(_ROOT_FIELD.match, tail) if m}
        if fields:
            text = f"worker rank {fields.get('rank', '?')} failed: exit code {fields.get('exitcode', '?')}"
            if fields.get("traceback") and fields["traceback"] != "<N/A>" and "Signal" in fields["traceback"]:
                text += f" ({fields['traceback']})"
            return text[:300]
    if rendezvous == "unreachable":
        # The inner error says where it tried to connect; the outer one only that it failed.
        inner = [line for line in lines if "trying to connect to" in line]
        if inner:
            return inner[-1][-300:]
    meaningful = [line for line in lines if not set(line) <= set("=-_* ")]
    return meaningful[-1][-300:] if meaningful else ""


def rank_nodes(agents: dict[str, dict[str, Any]]) -> dict[int, str]:
    """Global rank -> node, from what each torchrun logged when the rendezvous completed. Pure."""
    owners = {}
    for node, agent in agents.items():
        for rank in agent.get("global_ranks", []):
            owners[rank] = node
    return owners


def _rank_text(rank: int, owners: dict[int, str]) -> str:
    return f"rank {rank} ({owners[rank]})" if rank in owners else f"rank {rank}"


def interpret_run(agents: dict[str, dict[str, Any]], host: str, rdzv_timeout_s: float,
                  launch_timeout_s: float) -> dict[str, Any]:
    """What one multi-node launch came to. Pure.

    Returns ok, result (rank 0's report without "ok"), phase ("launch", "rendezvous", "roll call",
    "collective", "timeout"), error (a sentence naming nodes and ranks) and fault_nodes (nodes the
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

    lost = [n for n, a in agents.items() if a.get("transport_failure")]
    if lost:
        out["phase"] = "launch"
        out["fault_nodes"] = lost
        out["error"] = "; ".join(f"lost contact with {n} during the launch: {agents[n].get('last_error') or 'connection closed'}"
                                 for n in lost)
        return out

    incomplete = {n: a for n, a in agents.items() if a.get("rendezvous") != "complete"}
    if incomplete:
        out["phase"] = "rendezvous"
        texts = []
        # Nodes that waited at the rendezvous (and gave up, were stopped, or saw the host close it)
        # are victims; the others never got there. Nobody can join a rendezvous whose host is absent: then only the host is named.
        culprits = [n for n, a in incomplete.items() if a.get("rendezvous") not in ("timeout", "waiting", "closed", "host lost")]
        if host in culprits:
            culprits = [host]
        out["fault_nodes"] = culprits
        texts += [_not_joined_text(n, agents[n], rdzv_timeout_s, hosting=n == host) for n in culprits]
        if not culprits:
            texts.append(f"the rendezvous did not complete: {names_text(list(incomplete))} waited for the others "
                         f"(up to {rdzv_timeout_s:.0f}s) in vain")
        joined = [n for n in agents if n not in incomplete]
        if joined:
            texts.append(f"completed on {names_text(joined)} only")
        out["error"] = "; ".join(texts)
        return out

    errors = [(node, rep) for node, rep in reports if not rep.get("ok")]
    missing = sorted({int(m) for _, rep in errors for m in rep.get("missing_ranks", [])})
    if missing:
        out["phase"] = "roll call"
        out["fault_nodes"] = sorted({owners[m] for m in missing if m in owners})
        who = ", ".join(_rank_text(m, owners) for m in missing)
        out["error"] = f"{who} never reported in after torchrun started it (the workers' roll call)"
        return out
    if errors:
        out["phase"] = "collective"
        seen = []
        for node, rep in errors:
            rank = rep.get("rank")
            where = _rank_text(int(rank), owners) if rank is not None else node
            seen.append(f"{where}: {rep.get('error') or 'failed'}")
        out["error"] = "; ".join(seen[:4]) + (f"; and {len(seen) - 4} more ranks" if len(seen) > 4 else "")
        return out
    stuck = [n for n, a in agents.items() if a.get("killed")]
    if stuck and not [n for n, a in agents.items() if not a.get("killed") and a.get("returncode") not in (0, None)]:
        out["phase"] = "timeout"
        out["error"] = (f"still running on {names_text(stuck)} after {launch_timeout_s:.0f}s and stopped "
                        "(no rank reported an error: a collective that hangs)")
        return out
    out["phase"] = "collective"
    exited = [(n, a) for n, a in agents.items() if a.get("returncode") not in (0, None) and not a.get("killed")]
    if exited:
        node, agent = exited[0]
        out["error"] = f"torchrun on {node} exited with code {agent['returncode']}: {agent.get('last_error') or 'no output'}"
    else:
        out["error"] = "no rank reported a result"
    return out


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


def run_figures(result: dict[str, Any]) -> dict[str, Any]:
    """Latency (smallest size), busbw and algbw (largest), wrong elements, from a worker report. Pure."""
    sizes = sorted(result.get("sizes", []), key=lambda s: s["bytes"])
    wrong = sum(sum(s.get("known_sum_wrong_by_rank", [])) for s in sizes)
    wrong += sum(result.get("random_check", {}).get("wrong_by_rank", []))
    if not sizes:
        return {"wrong": wrong}
    return {
        "latency_us": sizes[0]["time_s"] * 1e6,
        "busbw_gbps": sizes[-1]["busbw_gbps"],
        "algbw_gbps": sizes[-1]["algbw_gbps"],
        "largest_bytes": sizes[-1]["bytes"],
        "smallest_bytes": sizes[0]["bytes"],
        "wrong": wrong,
    }


def shortfalls(figures: dict[str, Any], params: Params) -> list[str]:
    """Why a measured run is not good enough (wrong sums, thresholds). Pure."""
    problems = []
    if figures.get("wrong"):
        problems.append(f"{figures['wrong']} wrong elements")
    if params.min_busbw_gbps is not None and figures.get("busbw_gbps") is not None \
            and figures["busbw_gbps"] < params.min_busbw_gbps:
        problems.append(f"busbw {figures['busbw_gbps']:.2f} GB/s below {params.min_busbw_gbps:g}")
    if params.max_latency_us is not None and figures.get("latency_us") is not None \
            and figures["latency_us"] > params.max_latency_us:
        problems.append(f"latency {figures['latency_us']:.0f} us above {params.max_latency_us:g}")
    return problems


def pairwise_reason(run: dict[str, Any], params: Params, node_count: int) -> str | None:
    """Why the pairwise pass should run after the main launch, or None. Pure."""
    if node_count < 3:
        return None  # with two nodes the only pair is the run itself
    if not run.get("ok"):
        if run.get("fault_nodes"):
            return None  # already pinned on a node
        return "the all-reduce across all nodes failed"
    problems = shortfalls(run_figures(run["result"]), params)
    return "; ".join(problems) if problems else None


def attribute(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Which nodes or pairs the pairwise results point at. Pure.

    A node is at fault when every pair it was in is bad and some pair without it is good. The bad
    pairs that involve no such node are at fault as pairs. All pairs bad: nothing to single out.
    """
    measured = [p for p in pairs if p.get("state") in ("good", "bad")]
    nodes = sorted({n for p in measured for n in p["nodes"]})
    good = [p for p in measured if p["state"] == "good"]
    bad = [p for p in measured if p["state"] == "bad"]
    at_fault_nodes = []
    for node in nodes:
        mine = [p for p in measured if node in p["nodes"]]
        if mine and all(p["state"] == "bad" for p in mine) and any(node not in p["nodes"] for p in good):
            at_fault_nodes.append(node)
    at_fault_pairs = [p["nodes"] for p in bad if not set(p["nodes"]) & set(at_fault_nodes)]
    return {"nodes": at_fault_nodes, "pairs": at_fault_pairs, "all_bad": bool(measured) and not good,
            "measured": len(measured), "bad": len(bad)}


# -- running torchrun on the nodes ---------------------------------------------------------------


@dataclass
class AgentSpec:
    node: str
    argv: list[str]  # the command on the node; run inside WRAPPER
    group: str  # agents of one group end together: one failing gives the others GRACE_S
    expected_prefix: list[str]  # how the command line starts, for the kill program's identity check


class NodeAgent:
    """One torchrun on one node, started through the node's transport under WRAPPER."""

    def __init__(self, ctx: ClusterContext, spec: AgentSpec) -> None:
        self.ctx, self.spec = ctx, spec
        self.transport = ctx.transport(spec.node)
        self.command = ["sh", "-c", WRAPPER, "sh", *spec.argv]
        self.started = time.monotonic()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.stop_requested_at: float | None = None
        self.killed = False
        self.ended_at: float | None = None
        self.proc = self.transport.popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1, errors="replace")
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True)]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def running(self) -> bool:
        if self.proc.poll() is None:
            return True
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        return False

    def failed(self) -> bool:
        return not self.running() and self.proc.returncode != 0

    def request_stop(self) -> None:
        """Close the wrapper's stdin: it sends torchrun SIGTERM, then SIGKILL."""
        if self.stop_requested_at is not None or not self.running():
            return
        self.killed = True
        self.stop_requested_at = time.monotonic()
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def force_stop(self) -> None:
        """Kill by PID on the node what the wrapper did not end, then the local end."""
        if not self.running():
            return
        self.killed = True
        pids = next((line.split() for line in self.stdout if line.startswith("@@pid ")), None)
        if pids and len(pids) >= 3 and self.transport.kind != "local":
            argv = [self.transport.python, "-c", KILL_PROGRAM, pids[1], pids[2],
                    pids[3] if len(pids) > 3 else "", *self.spec.expected_prefix]
            try:
                self.transport.run(argv, timeout=15)
            except (subprocess.TimeoutExpired, OSError):
                pass
        from preflight.launch import kill_tree

        kill_tree(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.running()

    def close_stdin(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def facts(self) -> dict[str, Any]:
        for reader in self._readers:
            reader.join(timeout=5)
        end = self.ended_at or time.monotonic()
        code = self.proc.returncode
        return summarize_agent(list(self.stdout), "\n".join(self.stderr), code, self.killed, end - self.started,
                               transport_failure=code is not None and self.transport.is_transport_failure(code)
                               and not any(line.startswith("@@exit ") for line in self.stdout))

    def record(self) -> None:
        end = self.ended_at or time.monotonic()
        output = "\n".join(self.stdout + self.stderr)
        self.ctx.record(f"[on {self.spec.node}] " + shlex.join(self.spec.argv), self.proc.returncode, output,
                        end - self.started)


def run_agents(ctx: ClusterContext, specs: list[AgentSpec], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Start every agent at once and wait for all, at most `timeout_s`; nothing outlives this call.

    Returns facts per node (summarize_agent). When one agent of a group fails, the others of the
    group get GRACE_S to end by themselves (they see the broken group) before they are stopped.
    """
    agents: list[NodeAgent] = []
    start = time.monotonic()
    deadline = start + timeout_s
    failures: dict[str, float] = {}
    start_errors: dict[str, str] = {}
    try:
        for spec in specs:
            try:
                agents.append(NodeAgent(ctx, spec))
            except OSError as exc:
                start_errors[spec.node] = f"could not start it here: {exc}"
                failures.setdefault(spec.group, time.monotonic())
        while True:
            now = time.monotonic()
            live = [a for a in agents if a.running()]
            for agent in agents:
                if agent.failed() and not agent.killed:
                    failures.setdefault(agent.spec.group, now)
            if not live:
                break
            for agent in live:
                failed_at = failures.get(agent.spec.group)
                if now >= deadline or (failed_at is not None and now >= failed_at + GRACE_S):
                    agent.request_stop()
                if agent.stop_requested_at is not None and now >= agent.stop_requested_at + STOP_WAIT_S:
                    agent.force_stop()
            time.sleep(0.05)
    finally:
        for agent in agents:
            if agent.running():
                agent.request_stop()
        stop_by = time.monotonic() + STOP_WAIT_S
        while any(a.running() for a in agents) and time.monotonic() < stop_by:
            time.sleep(0.05)
        for agent in agents:
            agent.force_stop()
            agent.close_stdin()
    results: dict[str, dict[str, Any]] = {}
    for agent in agents:
        agent.record()
        results[agent.spec.node] = agent.facts()
    for node, error in start_errors.items():
        results[node] = summarize_agent([], error, 127, False, 0.0)
    return results


def probe_nodes(ctx: ClusterContext, names: list[str], ips: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run PROBE on every node at once with the node's own Python."""
    addresses = {spec["name"]: spec.get("address") or spec["name"] for spec in ctx.nodes}

    def probe(node: str) -> dict[str, Any]:
        transport = ctx.transport(node)
        peers = [ips[n] for n in names if n != node]
        argv = [transport.python, "-c", PROBE, ips[node], addresses[node], *peers]
        try:
            proc = ctx.run_on(node, argv, timeout=min(PROBE_TIMEOUT_S, max(5.0, ctx.time_left() - SLACK_S)))
        except Exception as exc:  # noqa: BLE001 - CannotMeasure, OSError: said about this node
            return {"error": str(exc)}
        if proc.returncode != 0:
            text = (proc.stderr.strip() or proc.stdout.strip())[-300:] or "no output"
            if transport.is_transport_failure(proc.returncode):
                return {"error": f"{node} could not be reached (ssh exit {proc.returncode}): {text}"}
            return {"error": f"{transport.python} on {node} could not run the probe (exit {proc.returncode}): {text}"}
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"the probe on {node} printed no result: {proc.stdout[-300:]}"}

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(names)))) as pool:
        return dict(zip(names, pool.map(probe, names)))


def pick_port(ctx: ClusterContext, node: str, ip: str) -> int | None:
    transport = ctx.transport(node)
    try:
        proc = ctx.run_on(node, [transport.python, "-c", PORT_PROGRAM, ip], timeout=30)
        return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except Exception:  # noqa: BLE001 - no port is an answer the caller turns into an error
        return None


def node_plan(ctx: ClusterContext, probes: dict[str, dict[str, Any]], nodes: list[str], *,
              socket_ifname: str | None, extra_env: dict[str, str], threads: int) -> dict[str, Any]:
    """Per node: python, local address, interface and environment for torchrun."""
    plan = {}
    for node in nodes:
        probe = probes[node]
        env = {"LOGLEVEL": "INFO", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "PYTHONUNBUFFERED": "1"}
        iface = socket_ifname or probe.get("interface")
        if iface:
            env["GLOO_SOCKET_IFNAME"] = iface
        env.update(extra_env)
        plan[node] = {"python": ctx.transport(node).python, "ip": probe.get("ip"), "interface": iface, "env": env}
    return plan


def launch(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
           worker_args: list[str], budget_s: float, rdzv_timeout_s: float, port: int | None,
           group: str = "all", absent_node: str | None = None) -> tuple[list[AgentSpec], dict[str, Any]]:
    """Agent specs for one torchrun launch over `nodes`, hosted by the first; and the launch's facts."""
    host = nodes[0]
    run_id = f"preflight-{uuid.uuid4().hex[:12]}"
    rdzv = endpoint(plan[host]["ip"], port) if port else None
    specs = []
    for node in nodes:
        entry = plan[node]
        if node == absent_node:
            argv = absent_argv(entry["python"])
        else:
            argv = torchrun_argv(entry["python"], nnodes=len(nodes), nproc=nproc, rdzv_endpoint=rdzv or "",
                                 run_id=run_id, is_host=node == host, local_addr=entry["ip"],
                                 rdzv_timeout_s=rdzv_timeout_s, env=entry["env"], module=module,
                                 worker_args=worker_args)
        specs.append(AgentSpec(node=node, argv=argv, group=group, expected_prefix=argv[argv.index(entry["python"]):][:3]))
    facts = {"nodes": list(nodes), "host": host, "rdzv_endpoint": rdzv, "run_id": run_id, "nproc_per_node": nproc,
             "world_size": nproc * len(nodes), "timeouts_s": {"launch": round(budget_s, 1),
                                                                "rendezvous": round(rdzv_timeout_s, 1)}}
    return specs, facts


def worker_timeouts(budget_s: float, rdzv_s: float, join_s: float, pg_s: float) -> tuple[float, float, float]:
    """Rendezvous, roll-call and process-group timeouts that all end before the launch's deadline."""
    rdzv = max(5.0, min(rdzv_s, budget_s * 0.4))
    left = budget_s - rdzv - 10.0  # interpreter and torch start-up after the rendezvous
    join = max(3.0, min(join_s, left / 3))
    pg = max(5.0, min(pg_s, left - 1.5 * join - 5.0))
    return rdzv, join, pg


def run_launch(ctx: ClusterContext, specs_and_facts: list[tuple[list[AgentSpec], dict[str, Any]]],
               budget_s: float) -> list[dict[str, Any]]:
    """Run several launches at once (disjoint nodes); returns each launch's facts with its outcome."""
    specs = [spec for batch, _ in specs_and_facts for spec in batch]
    agents = run_agents(ctx, specs, budget_s)
    out = []
    for batch, facts in specs_and_facts:
        mine = {spec.node: agents[spec.node] for spec in batch}
        outcome = interpret_run(mine, facts["host"], facts["timeouts_s"]["rendezvous"], budget_s)
        out.append({**facts, **outcome, "agents": _compact_agents(mine)})
    return out


def _compact_agents(agents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Agent facts without the (large) worker reports, which live in the launch's result."""
    return {node: {k: v for k, v in agent.items() if k != "reports"} |
            {"errors": [r for r in agent.get("reports", []) if not r.get("ok")]}
            for node, agent in agents.items()}


def loopback_findings(probes: dict[str, dict[str, Any]], node_facts: dict[str, dict[str, Any]],
                      ips: dict[str, str]) -> list[str]:
    """Sentences about host names and addresses that resolve to loopback on the nodes. Pure."""
    found = []
    by_name: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for node, probe in probes.items():
        env_facts = node_facts.get(node, {}).get("node.environment", {})
        hostname = probe.get("hostname") or env_facts.get("hostname")
        addresses = probe.get("hostname_addresses") or env_facts.get("hostname_addresses") or []
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
            "check passed --local-addr, --rdzv-endpoint and GLOO_SOCKET_IFNAME explicitly; do the same in your "
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


# -- the check -----------------------------------------------------------------------------------


class CollectivesCluster(Check):
    id = "collectives.cluster"
    title = "All-reduce across all nodes (torchrun, NCCL or gloo)"
    scope = Scope.CLUSTER
    tags = ("cluster", "collectives", "torch", "nccl", "gloo", "network")
    why = (
        "A multi-node job all-reduces gradients across every node on every step. If one node cannot "
        "join (a host name that resolves to 127.0.0.1, a firewall on the rendezvous or gloo ports, a "
        "wrong interface), the whole job hangs at start; if one node or link is slow, every step runs at "
        "its pace; wrong sums silently corrupt the model."
    )
    remediation = (
        "A node that never joined: check that it can reach the first node's rendezvous port, and that "
        "torch and preflight are installed for the Python it runs (--remote-python or python= in the hosts file).",
        "Host names that resolve to loopback: fix /etc/hosts, or launch with --local-addr and "
        "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming the interface that carries training traffic.",
        "A slow or failing node or pair named by the pairwise pass: check that link (net.bandwidth, "
        "ethtool, the switch port) and, for NCCL, NCCL_DEBUG=INFO for the transport it picked (IB or socket).",
        "Wrong sums: a hardware fault on the named node (GPU diagnostics, e.g. `dcgmi diag -r 3`) or a "
        "broken NCCL build.",
    )
    Params = Params
    timeout_s = 300.0

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        names = ctx.node_names
        facts: dict[str, Any] = {"nodes": names, "unreachable": list(ctx.unreachable), "probes": {}}
        if len(names) < 2:
            return facts
        addresses = {spec["name"]: spec.get("address") or spec["name"] for spec in ctx.nodes}
        ips = {n: coordinator_ip(addresses[n]) for n in names}
        facts["addresses"] = addresses
        facts["ips"] = ips
        probes = probe_nodes(ctx, names, ips)
        facts["probes"] = probes
        facts["hostnames"] = {n: ctx.node_facts.get(n, {}).get("node.environment", {}).get("hostname_addresses")
                              for n in names}
        usable = [n for n in names if probes[n].get("torch") and probes[n].get("distributed")
                  and probes[n].get("ip") and "error" not in probes[n]]
        facts["usable"] = usable
        if len(usable) < 2:
            return facts

        choice = choose_backend({n: probes[n] for n in usable}, backend=params.backend,
                                gpus_per_node=params.gpus_per_node, cpu_ranks_per_node=params.gloo_ranks_per_node)
        facts["choice"] = choice
        if choice.get("error"):
            return facts
        choice["sizes"] = params.sizes_bytes or (GPU_SIZES if choice["device"] == "cuda" else CPU_SIZES)
        plan = node_plan(ctx, probes, usable, socket_ifname=params.socket_ifname, extra_env=params.env, threads=1)
        facts["plan"] = plan

        # Time kept for the pairwise pass, which only runs when the all-node run goes wrong.
        reserve = min(params.pairwise_timeout_s, 0.4 * ctx.time_left()) if params.pairwise and len(usable) >= 3 else 0.0
        budget = max(MIN_LAUNCH_S, ctx.time_left() - SLACK_S - reserve)
        port = params.rdzv_port or probes[usable[0]].get("free_port")
        facts["run"] = self._allreduce(ctx, params, usable, plan, choice, choice["sizes"], params.iters,
                                       params.warmup, budget, port, absent_node=params.inject_absent_node)
        reason = pairwise_reason(facts["run"], params, len(usable))
        if reason and params.pairwise:
            budget = min(params.pairwise_timeout_s, ctx.time_left() - SLACK_S)
            facts["pairwise"] = self._pairwise(ctx, params, usable, plan, choice, reason, budget)
        return facts

    def _allreduce(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                   choice: dict[str, Any], sizes: list[int], iters: int, warmup: int, budget_s: float,
                   port: int | None, absent_node: str | None = None) -> dict[str, Any]:
        rdzv_s, join_s, pg_s = worker_timeouts(budget_s, params.rdzv_timeout_s, params.join_timeout_s,
                                               params.pg_timeout_s)
        args = self._worker_args(params, choice, sizes, iters, warmup, join_s, pg_s)
        if port is None:
            return {"nodes": nodes, "host": nodes[0], "ok": False, "phase": "launch", "fault_nodes": [nodes[0]],
                    "error": f"could not find a free port for the rendezvous on {nodes[0]}"}
        specs, launch_facts = launch(ctx, nodes=nodes, plan=plan, nproc=choice["nproc_per_node"], module="allreduce",
                                     worker_args=args, budget_s=budget_s, rdzv_timeout_s=rdzv_s, port=port,
                                     absent_node=absent_node)
        launch_facts["timeouts_s"].update({"join": round(join_s, 1), "pg": round(pg_s, 1)})
        return run_launch(ctx, [(specs, launch_facts)], budget_s)[0]

    @staticmethod
    def _worker_args(params: Params, choice: dict[str, Any], sizes: list[int], iters: int, warmup: int,
                     join_s: float, pg_s: float) -> list[str]:
        args = ["--backend", choice["backend"], "--device", choice["device"],
                "--sizes", ",".join(str(s) for s in sizes), "--iters", str(iters), "--warmup", str(warmup),
                "--check-elements", str(params.check_elements),
                "--join-timeout-s", f"{join_s:.1f}", "--pg-timeout-s", f"{pg_s:.1f}"]
        if params.inject_absent_rank is not None:
            args += ["--absent-rank", str(params.inject_absent_rank)]
        return args

    def _pairwise(self, ctx: ClusterContext, params: Params, nodes: list[str], plan: dict[str, Any],
                  choice: dict[str, Any], reason: str, budget_s: float) -> dict[str, Any]:
        rounds = round_robin(nodes)
        sizes = sorted({min(choice["sizes"]), max(choice["sizes"])})
        out: dict[str, Any] = {"reason": reason, "rounds": [[list(p) for p in r] for r in rounds], "pairs": [],
                               "not_run": [], "budget_s": round(budget_s, 1)}
        deadline = time.monotonic() + budget_s
        for index, pairs in enumerate(rounds):
            left = deadline - time.monotonic()
            share = left / (len(rounds) - index)
            if share < MIN_LAUNCH_S:
                out["not_run"] += [list(p) for r in rounds[index:] for p in r]
                break
            rdzv_s, join_s, pg_s = worker_timeouts(share, params.rdzv_timeout_s, params.join_timeout_s,
                                                   params.pg_timeout_s)
            args = self._worker_args(params, choice, sizes, params.pairwise_iters, 2, join_s, pg_s)
            batches = []
            for a, b in pairs:
                port = params.rdzv_port or pick_port(ctx, a, plan[a]["ip"])
                if port is None:
                    out["pairs"].append({"nodes": [a, b], "state": "error",
                                         "error": f"no free port for the rendezvous on {a}"})
                    continue
                specs, facts = launch(ctx, nodes=[a, b], plan=plan, nproc=choice["nproc_per_node"],
                                      module="allreduce", worker_args=args, budget_s=share, rdzv_timeout_s=rdzv_s,
                                      port=port, group=f"{a}+{b}")
                batches.append((specs, facts))
            for result in run_launch(ctx, batches, share) if batches else []:
                out["pairs"].append(judge_pair(result, params))
        out["attribution"] = attribute(out["pairs"])
        return out

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        total = len(names) + len(unreachable)
        if total < 2:
            if self.expected_to_run(expect):
                return Outcome(Status.ERROR, f"the configuration expects {expect.nodes} nodes but this run has "
                               f"{total}: there is nothing to all-reduce across",
                               remediation=["list every node in the hosts file"])
            return Outcome(Status.SKIP, "one node: there is nothing to all-reduce across nodes "
                                        "(collectives.local covers the node's own devices)")
        if len(names) < 2:
            return Outcome(Status.ERROR, f"only {len(names)} of {total} nodes reachable ({names_text(unreachable)} "
                           "unreachable): no all-reduce across nodes was possible")

        problems: list[tuple[Status, str]] = []
        details: list[str] = []
        measurements: list[Measurement] = []
        probes = facts.get("probes", {})
        without_torch = []
        for node in names:
            probe = probes.get(node, {})
            if "error" in probe:
                problems.append((Status.ERROR, probe["error"]))
            elif probe.get("torch") is None:
                without_torch.append(node)
            elif not probe.get("distributed", True):
                problems.append((Status.FAIL, f"the torch on {node} has no torch.distributed"))
            elif not probe.get("ip"):
                why = probe.get("route_error") or "no interface carries its address and no route to a peer was found"
                problems.append((Status.ERROR, f"could not find the interface {node} reaches the others through: {why}"))
        if without_torch:
            everywhere = len(without_torch) == len(names)
            text = (f"torch is not installed for the Python preflight runs on {names_text(without_torch)}"
                    + ("" if everywhere else ": those nodes cannot take part in a torch job"))
            if everywhere and "torch" not in (expect.frameworks or []) and not self.expected_to_run(expect):
                return Outcome(Status.SKIP, text + "; collectives are measured through torch.distributed")
            problems.append((Status.FAIL, text))
        if unreachable:
            details.append(f"not measured, unreachable: {names_text(unreachable)}; all-reduce among the other nodes only")
        details += loopback_findings(probes, {n: {"node.environment": {"hostname_addresses": a}}
                                              for n, a in (facts.get("hostnames") or {}).items() if a},
                                     facts.get("ips", {}))
        details += shared_machine_findings({n: p for n, p in probes.items() if "error" not in p})
        choice = facts.get("choice") or {}
        details += choice.get("notes", [])
        if choice.get("error"):
            problems.append((Status.FAIL, choice["error"]))

        run = facts.get("run")
        label = ""
        if run:
            label = (f"{choice.get('backend')} across {len(run['nodes'])} nodes x "
                     f"{processes_text(choice.get('nproc_per_node') or 0, choice.get('device'))}")
            details.append(f"rendezvous on {run.get('host')} at {run.get('rdzv_endpoint')}; " + ", ".join(
                f"{n}: --local-addr={p.get('ip')} GLOO_SOCKET_IFNAME={p.get('interface')}"
                for n, p in (facts.get("plan") or {}).items()))
            if run.get("ok"):
                run_problems, run_measurements = judge_main(run, params, label)
                problems += run_problems
                measurements += run_measurements
            else:
                status = Status.FAIL if run.get("phase") == "collective" else Status.ERROR
                problems.append((status, f"{label}: {run.get('error')}"))
        elif len(facts.get("usable", [])) < 2 and not problems:
            problems.append((Status.ERROR, "fewer than two nodes could run torch: nothing was measured"))

        pairwise = facts.get("pairwise")
        if pairwise:
            text, pair_measurements, pair_details = judge_pairwise(pairwise, params)
            measurements += pair_measurements
            details += pair_details
            if problems:
                problems.append((worst([s for s, _ in problems]), text))
            else:
                details.append(text)

        status = worst([s for s, _ in problems], default=Status.PASS)
        if problems:
            summary = "; ".join(text for s, text in problems if s is status)
        else:
            figures = run_figures(run["result"])
            summary = (f"{label}: sums exact, latency {figures['latency_us']:.0f} us at "
                       f"{human_bytes(figures['smallest_bytes'])}, busbw {figures['busbw_gbps']:.2f} GB/s at "
                       f"{human_bytes(figures['largest_bytes'])}")
            if unreachable:
                summary += f" ({names_text(unreachable)} unreachable, not measured)"
        details = [text for _, text in problems] + details
        return Outcome(status, summary, measurements, details=_unique(details))


def _unique(items: list[str]) -> list[str]:
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


def judge_main(run: dict[str, Any], params: Params, label: str) -> tuple[list[tuple[Status, str]], list[Measurement]]:
    """Problems and measurements of a successful all-node run. Pure."""
    result = run["result"]
    owners = {int(r): n for r, n in (run.get("rank_nodes") or {}).items()}
    problems: list[tuple[Status, str]] = []
    measurements: list[Measurement] = []
    sizes = sorted(result["sizes"], key=lambda s: s["bytes"])
    wrong_total = 0
    for entry in sizes:
        bad = {rank: n for rank, n in enumerate(entry["known_sum_wrong_by_rank"]) if n}
        if bad:
            wrong_total += sum(bad.values())
            problems.append((Status.FAIL, f"{label}: wrong known sums at {human_bytes(entry['bytes'])} on "
                             + ", ".join(f"{_rank_text(r, owners)}: {n} elements" for r, n in bad.items())))
    random_bad = {rank: n for rank, n in enumerate(result["random_check"]["wrong_by_rank"]) if n}
    if random_bad:
        wrong_total += sum(random_bad.values())
        problems.append((Status.FAIL, f"{label}: random-data sums differ from the reference on "
                         + ", ".join(f"{_rank_text(r, owners)}: {n} elements" for r, n in random_bad.items())))
    measurements.append(measure(f"{label}: wrong elements (known sums, random data)", wrong_total, "", at_most=0))

    small = sizes[0]
    latency_us = small["time_s"] * 1e6
    m = measure(f"{label}: latency at {human_bytes(small['bytes'])}", round(latency_us, 1), "us",
                at_most=params.max_latency_us, samples=[round(t * 1e6, 2) for t in small["time_samples_s"]])
    measurements.append(m)
    if m.ok is False:
        problems.append((Status.FAIL, f"{label}: latency {latency_us:.1f} us above {params.max_latency_us:g} us"))
    largest = sizes[-1]
    for entry in sizes[1:] or sizes:
        is_largest = entry is largest
        m = measure(f"{label}: busbw at {human_bytes(entry['bytes'])}", round(entry["busbw_gbps"], 3), "GB/s",
                    at_least=params.min_busbw_gbps if is_largest else None,
                    samples=[round(v, 3) for v in entry["busbw_samples_gbps"]])
        measurements.append(m)
        if m.ok is False:
            problems.append((Status.FAIL, f"{label}: busbw {entry['busbw_gbps']:.2f} GB/s at "
                                          f"{human_bytes(entry['bytes'])}, below {params.min_busbw_gbps:g} GB/s"))
    measurements.append(measure(f"{label}: algbw at {human_bytes(largest['bytes'])}", round(largest["algbw_gbps"], 3),
                                "GB/s", samples=[round(v, 3) for v in largest["algbw_samples_gbps"]]))
    return problems, measurements


def judge_pair(launch_result: dict[str, Any], params: Params) -> dict[str, Any]:
    """One pair's two-node run as good / bad / error with its figures. Pure."""
    pair = {"nodes": launch_result["nodes"]}
    if not launch_result.get("ok"):
        pair.update(state="bad", error=launch_result.get("error"), phase=launch_result.get("phase"))
        return pair
    figures = run_figures(launch_result["result"])
    problems = shortfalls(figures, params)
    pair.update(state="bad" if problems else "good", problems=problems,
                **{k: figures.get(k) for k in ("latency_us", "busbw_gbps", "largest_bytes", "smallest_bytes", "wrong")})
    pair["busbw_samples_gbps"] = sorted(launch_result["result"]["sizes"], key=lambda s: s["bytes"])[-1]["busbw_samples_gbps"]
    return pair


def judge_pairwise(pairwise: dict[str, Any], params: Params) -> tuple[str, list[Measurement], list[str]]:
    """The sentence naming what the pairwise pass found, its measurements and details. Pure."""
    measurements = []
    details = []
    for pair in pairwise.get("pairs", []):
        a, b = pair["nodes"]
        label = f"{a} <-> {b}"
        if pair.get("busbw_gbps") is not None:
            measurements.append(measure(f"pair {label}: busbw at {human_bytes(pair['largest_bytes'])}",
                                        round(pair["busbw_gbps"], 3), "GB/s", at_least=params.min_busbw_gbps,
                                        samples=[round(v, 3) for v in pair.get("busbw_samples_gbps", [])], node=label))
            details.append(f"pair {label}: {'good' if pair['state'] == 'good' else '; '.join(pair.get('problems') or ['bad'])}"
                           f" (busbw {pair['busbw_gbps']:.2f} GB/s, latency {pair['latency_us']:.0f} us)")
        else:
            details.append(f"pair {label}: {pair.get('error') or 'failed'}")
    if pairwise.get("not_run"):
        details.append(f"pairwise pass stopped at its time limit ({pairwise.get('budget_s')}s): "
                       f"{len(pairwise['not_run'])} pairs not run")
    found = pairwise.get("attribution") or attribute(pairwise.get("pairs", []))
    prefix = f"pairwise pass ({pairwise.get('reason')}): "
    if found["nodes"]:
        text = prefix + f"{names_text(found['nodes'])} {'is' if len(found['nodes']) == 1 else 'are'} at fault: every pair with " \
               + ("it" if len(found["nodes"]) == 1 else "them") + " is bad while other pairs are good"
        if found["pairs"]:
            text += "; also the pairs " + ", ".join(f"{a} <-> {b}" for a, b in found["pairs"])
    elif found["pairs"]:
        listed = ", ".join(f"{a} <-> {b}" for a, b in found["pairs"])
        text = prefix + (f"the pair {listed} is" if len(found["pairs"]) == 1 else f"the pairs {listed} are") + \
            " at fault; every node is good with some other node"
    elif found["all_bad"]:
        text = prefix + "every pair is bad: the problem is common to all nodes (the fabric, a shared setting)"
    elif found["measured"]:
        text = prefix + (f"all {found['measured']} pairs are good on their own: the problem appears only with all "
                         "nodes together (congestion, an oversubscribed uplink, or the size of the job)")
    else:
        text = prefix + "no pair could be measured"
    return text, measurements, details
