"""Run one worker module on several nodes at once with torchrun, and make sense of how it ended.

Used by the cross-node checks (collectives.cluster, scaling.multi_node). Each node is probed with
its own Python first (host name and what it resolves to, the interface that carries its address,
boot id, torch, GPUs, NCCL, gloo, a free port); torchrun is then started on every node with every
address explicit (c10d rendezvous endpoint, --local-addr, is_host, GLOO_SOCKET_IFNAME), because
host names that resolve to loopback make the defaults advertise addresses no other node can reach.

Each torchrun runs under a small shell wrapper that holds the transport's stdin and stops torchrun
when it closes (the check stopped it, the check died, the ssh session dropped); anything still
running afterwards is killed by its recorded PID on its node, and the local end by its process group.
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
from dataclasses import dataclass
from typing import Any, Callable

from preflight.check import ClusterContext

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


# -- small pure helpers --------------------------------------------------------------------------


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


def rank_text(rank: int, owners: dict[int, str]) -> str:
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
        who = ", ".join(rank_text(m, owners) for m in missing)
        out["error"] = f"{who} never reported in after torchrun started it (the workers' roll call)"
        return out
    if errors:
        out["phase"] = "collective"
        seen = []
        for node, rep in errors:
            rank = rep.get("rank")
            where = rank_text(int(rank), owners) if rank is not None else node
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


def probe_usable(ctx: ClusterContext) -> dict[str, Any]:
    """Probe every reachable node and say which can run a torchrun launch: the facts both checks start from.

    Keys: nodes, unreachable, probes; with two nodes or more also addresses, ips and usable (nodes
    whose probe found torch with torch.distributed and a routable address).
    """
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
    facts["usable"] = [n for n in names if probes[n].get("torch") and probes[n].get("distributed")
                       and probes[n].get("ip") and "error" not in probes[n]]
    return facts


def launch_and_wait(ctx: ClusterContext, *, nodes: list[str], plan: dict[str, Any], nproc: int, module: str,
                    worker_args: Callable[[float, float], list[str]], budget_s: float,
                    timeouts_s: tuple[float, float, float], port: int | None,
                    absent_node: str | None = None) -> dict[str, Any]:
    """One torchrun launch over `nodes`, run to its end: the launch's facts with its outcome.

    `timeouts_s` are the rendezvous, roll-call and process-group timeouts asked for; they are cut to
    fit `budget_s`, and `worker_args(join_s, pg_s)` builds the worker's arguments from the cut ones.
    """
    if port is None:
        return {"nodes": nodes, "host": nodes[0], "ok": False, "phase": "launch", "fault_nodes": [nodes[0]],
                "error": f"could not find a free port for the rendezvous on {nodes[0]}"}
    rdzv_s, join_s, pg_s = worker_timeouts(budget_s, *timeouts_s)
    specs, launch_facts = launch(ctx, nodes=nodes, plan=plan, nproc=nproc, module=module,
                                 worker_args=worker_args(join_s, pg_s), budget_s=budget_s, rdzv_timeout_s=rdzv_s,
                                 port=port, absent_node=absent_node)
    launch_facts["timeouts_s"].update({"join": round(join_s, 1), "pg": round(pg_s, 1)})
    return run_launch(ctx, [(specs, launch_facts)], budget_s)[0]


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
