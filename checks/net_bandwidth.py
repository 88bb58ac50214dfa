"""net.bandwidth: TCP bandwidth between nodes, measured with iperf3.

Schedules (rounds run one after another; the pairs of a round run at the same time, and no node is
in two pairs of a round, so a figure belongs to its link and not to a busy neighbour):

- `ring` (default): every node sends to its successor, the direction a ring all-reduce uses. With an
  even number of nodes that is two rounds (0->1, 2->3, ... then 1->2, 3->4, ..., N-1->0). An odd
  ring cannot be split into two rounds of disjoint pairs, so the closing link N-1->0 gets a third
  round of its own.
- `full`: a round-robin tournament (circle method): N-1 rounds (N with an odd count, one node
  sitting out each round) in which every node meets one partner; each round runs one direction of
  all its pairs at once and then the other, so every ordered pair is measured, on its own, in
  2(N-1) steps (2N with an odd count). (Both directions at once would make each link carry the other direction's ACKs
  behind its data and under-measure a link that runs at its limit.)

Each link runs `streams` iperf3 client processes at once, each against its own server port, and
their receiver-side figures (`end.sum_received.bits_per_second`) are summed: iperf3 before 3.16 is
single-threaded and one process cannot fill a fast link. The whole schedule is repeated and each
link is judged on the median.

A link whose route is local to the sender (the target is one of the sender's own addresses, or
loopback) would measure memory bandwidth, not the network, so it is ERROR and never measured.
Servers and clients run on the nodes through their transports; every remote process is started by
a small shell wrapper that prints its PID, and whatever is still running afterwards is killed by PID;
each also runs under `timeout`, so not even a coordinator that dies mid-round leaves one behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from preflight.check import CannotMeasure, Check, ClusterContext, Expect, Outcome, measure, too_few_nodes
from preflight.model import Scope, Status, worst

INSTALL_HINT = "install iperf3 on every node (Debian/Ubuntu: apt-get install iperf3; RHEL/Fedora: dnf install iperf3)"
PATTERNS = ("ring", "full")
# Commands that worked and are kept as evidence; on a large cluster a full schedule runs thousands.
EVIDENCE_JOBS = 24


@dataclass
class Params:
    # 10 GbE is the least a data-parallel job across nodes can live with; gradient all-reduce over
    # anything slower leaves GPUs idle. Raise it to what the fabric is sold as (25/100/200 Gbit/s).
    min_gbps: float = 10.0
    pattern: str = "ring"  # "ring" (successor links) or "full" (every ordered pair)
    # iperf3 processes per link: one iperf3 before 3.16 is one thread and tops out well below
    # 100 Gbit/s; four processes fill a 100 GbE link on a typical server CPU.
    streams: int = 4
    duration_s: int = 5  # seconds of traffic per measurement
    omit_s: int = 1  # leading seconds iperf3 leaves out, so TCP slow start does not count
    repeats: int = 3  # each link is measured this many times and judged on the median
    # iperf3's default port, the one cluster firewalls are usually opened for; a link uses
    # base_port .. base_port + streams - 1 on the receiving node.
    base_port: int = 5201
    server_start_timeout_s: float = 15.0


# -- schedules (pure) ------------------------------------------------------------------------------


def ring_rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    n = len(names)
    if n < 2:
        return []
    if n == 2:
        return [[(names[0], names[1])], [(names[1], names[0])]]
    edges = [(names[i], names[(i + 1) % n]) for i in range(n)]
    paired = n - n % 2  # with an odd count, the closing edge goes to a round of its own
    rounds = [edges[0:paired:2], edges[1:paired:2]]
    if n % 2:
        rounds.append([edges[-1]])
    return [r for r in rounds if r]


def full_rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    players: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            # One direction, then the other: the ACKs of traffic going the other way would share the
            # link and lower the figure of a link that is at its limit.
            rounds.append([(a, b) for a, b in pairs])
            rounds.append([(b, a) for a, b in pairs])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def schedule(names: list[str], pattern: str) -> list[list[tuple[str, str]]]:
    return ring_rounds(names) if pattern == "ring" else full_rounds(names)


# -- what runs on the nodes ------------------------------------------------------------------------

# Run with the node's own Python: is iperf3 there, and is each target reached over the network or is
# it (an address of) this very node? argv: own address, then the addresses this node will send to.
PROBE = r"""
import json, shutil, socket, subprocess, sys

def local_why(target):
    try:
        addrs = sorted({i[4][0] for i in socket.getaddrinfo(target, None, proto=socket.IPPROTO_TCP)})
    except socket.gaierror as exc:
        return None, [], "does not resolve: %s" % exc, None
    ip = shutil.which("ip")
    route = None
    for addr in addrs:
        bare = addr.split("%")[0]
        if bare.startswith("127.") or bare in ("::1", "0.0.0.0", "::") or bare.startswith("::ffff:127."):
            return "%s resolves to the loopback address %s" % (target, addr), addrs, None, route
        family = socket.AF_INET6 if ":" in bare else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((addr, 0))
                return "%s is an address of this node" % addr, addrs, None, route
            except OSError:
                pass
        if ip:
            try:
                out = subprocess.run([ip, "-j", "route", "get", bare], capture_output=True, text=True, timeout=10)
                found = json.loads(out.stdout)[0]
            except Exception:
                found = None
            if found:
                route = route or found
                if found.get("type") == "local" or found.get("dev") == "lo":
                    return "the route to %s is local (dev %s)" % (addr, found.get("dev")), addrs, None, found
    return None, addrs, None, route

facts = {"iperf3": shutil.which("iperf3"), "version": None, "forceflush": False, "targets": {}}
if facts["iperf3"]:
    try:
        out = subprocess.run([facts["iperf3"], "--version"], capture_output=True, text=True, timeout=10)
        text = (out.stdout or out.stderr).strip()
        facts["version"] = text.splitlines()[0] if text else None
        out = subprocess.run([facts["iperf3"], "--help"], capture_output=True, text=True, timeout=10)
        facts["forceflush"] = "--forceflush" in out.stdout + out.stderr
    except Exception as exc:
        facts["version_error"] = str(exc)
own = sys.argv[1]
try:
    with socket.socket(socket.AF_INET6 if ":" in own else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((own, 0))
    facts["own_address_bindable"] = True
except (OSError, ValueError):
    facts["own_address_bindable"] = False
for target in sys.argv[2:]:
    why, addrs, error, route = local_why(target)
    facts["targets"][target] = {"local": why is not None, "why": why, "addresses": addrs, "error": error, "route": route}
print(json.dumps(facts))
"""

# Every iperf3 runs under `timeout` where the node has it: should the coordinator die before it can
# kill them, nothing preflight started outlives its round on the node.
_BOUNDED = 'if command -v timeout >/dev/null 2>&1; then bounded="timeout $life"; else bounded=; fi'

# One iperf3 server per port, each for a single test (-s -1); prints "pid PORT PID" for each, then
# whatever the servers print ("Server listening on PORT" when they are ready), then "@@done".
SERVER_SCRIPT = r"""
life=$1; flush=$2; shift 2
""" + _BOUNDED + r"""
for port in "$@"; do
  $bounded iperf3 -s -1 -p "$port" $flush 2>&1 &
  echo "pid $port $!"
done
wait
echo "@@done"
"""

# `streams` iperf3 clients at once, one per port; prints "pid PORT PID" for each, and when all
# have finished, per port: "@@json PORT RC", the JSON report, "@@stderr PORT", its stderr; then "@@done".
CLIENT_SCRIPT = r"""
life=$1; dst=$2; secs=$3; omit=$4; bind=$5; shift 5
""" + _BOUNDED + r"""
dir=$(mktemp -d "${TMPDIR:-/tmp}/preflight-iperf3.XXXXXX") || exit 97
started=
for port in "$@"; do
  $bounded iperf3 -c "$dst" -p "$port" -t "$secs" -O "$omit" ${bind:+-B "$bind"} -J >"$dir/$port.json" 2>"$dir/$port.err" &
  echo "pid $port $!"
  started="$started $port:$!"
done
for job in $started; do
  port=${job%%:*}
  wait "${job#*:}"
  rc=$?
  echo "@@json $port $rc"
  cat "$dir/$port.json"
  echo
  echo "@@stderr $port"
  cat "$dir/$port.err"
done
rm -rf "$dir"
echo "@@done"
"""

# Kill the given PIDs, but only while they are still ours (iperf3, or the `timeout` around it): a
# PID that exited may have been reused by something else.
KILL_SCRIPT = r"""
for pid in "$@"; do
  name=$(cat "/proc/$pid/comm" 2>/dev/null || ps -p "$pid" -o comm= 2>/dev/null)
  case "$name" in iperf3|timeout) kill "$pid" 2>/dev/null ;; esac
done
exit 0
"""


class RemoteJob:
    """A command on a node, started through its transport, with its output read as it comes."""

    def __init__(self, ctx: ClusterContext, node: str, argv: list[str], label: str) -> None:
        self.ctx, self.node, self.label = ctx, node, label
        self.transport = ctx.transport(node)
        self.wrapped = self.transport.wrap(argv)
        self.started = time.monotonic()
        self.lines: list[str] = []
        self.stderr: list[str] = []
        self.pids: dict[str, int] = {}  # port -> remote pid
        self.changed = threading.Condition()
        self.proc = self.transport.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1, errors="replace")
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            line = line.rstrip("\n")
            with self.changed:
                into.append(line)
                match = re.fullmatch(r"pid (\d+) (\d+)", line) if into is self.lines else None
                if match:
                    self.pids[match.group(1)] = int(match.group(2))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def finished(self) -> bool:
        return "@@done" in self.lines[-3:] or self.proc.poll() is not None

    def wait_until(self, predicate: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                    return predicate()
                self.changed.wait(min(left, 0.2))
            return True

    def failure(self, what: str, limit: float) -> str:
        """Why the job produced no result: the transport's own words, or the time limit."""
        code = self.proc.poll()
        if code is None:
            return f"{what} did not finish within {limit:.0f}s"
        text = " | ".join(line for line in self.stderr[-3:] if line.strip()) or "no output"
        if self.transport.is_transport_failure(code):
            return f"{self.node} could not be reached (ssh exit {code}): {text}"
        return f"{what} exited {code}: {text}"

    def stop(self, record: bool = True, output: str | None = None) -> None:
        """Kill what the job started on the node (by PID), then the local end; record it as evidence
        (with `output` in place of everything it printed, when given)."""
        if "@@done" not in self.lines and self.pids:
            with_pids = ["sh", "-c", KILL_SCRIPT, "sh", *map(str, self.pids.values())]
            try:
                self.transport.run(with_pids, timeout=15)
            except (subprocess.TimeoutExpired, OSError):
                pass
        if self.proc.poll() is None:
            # The wrapper exits once its children are gone; give it a moment before ending it.
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        if record:
            text = output if output is not None else "\n".join(self.lines + self.stderr)
            self.ctx.record(self.wrapped, self.proc.returncode, text, time.monotonic() - self.started)


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


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


# -- the check -------------------------------------------------------------------------------------


class NetBandwidth(Check):
    id = "net.bandwidth"
    title = "TCP bandwidth between nodes (iperf3)"
    scope = Scope.CLUSTER
    tags = ("cluster", "network")
    why = (
        "Every training step ends with gradients crossing the network between nodes; a single link that runs "
        "at a fraction of its rate (a cable that negotiated 1 Gbit/s, a bad transceiver, a switch port with "
        "errors, traffic leaving through the management network) slows the whole job to its pace."
    )
    remediation = (
        "Check the named link's negotiated speed and error counters on both ends (ethtool <iface>; ethtool -S "
        "<iface>), the cable or transceiver, and the switch port.",
        "Make sure the nodes' addresses route over the data network, not the management interface "
        "(ip route get <peer address> on the sender).",
        INSTALL_HINT,
    )
    Params = Params
    # One line per parameter for `preflight explain`: what it means, and its unit.
    param_help = {
        "min_gbps": "lowest TCP bandwidth of each link between nodes (Gbit/s)",
        "pattern": "\"ring\" (each node to the next) or \"full\" (every ordered pair)",
        "streams": "parallel iperf3 processes per link (count)",
        "duration_s": "traffic per measurement (seconds)",
        "omit_s": "leading seconds left out, so TCP slow start does not count (seconds)",
        "repeats": "measurements per link; the median is judged (count)",
        "base_port": "first TCP port iperf3 listens on; a link uses base_port .. base_port + streams - 1",
        "server_start_timeout_s": "time allowed for the iperf3 server to start (seconds)",
    }
    timeout_s = 300.0
    # quick: one 3 s measurement per ring link; thorough: every ordered pair, five 10 s measurements.
    levels = {
        "quick": {"timeout": 30, "repeats": 1, "duration_s": 3, "pattern": "ring"},
        "thorough": {"timeout": 1800, "pattern": "full", "repeats": 5, "duration_s": 10},
    }

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        if params.pattern not in PATTERNS:
            raise CannotMeasure(f"pattern must be one of {', '.join(PATTERNS)}, not {params.pattern!r}")
        if params.streams < 1 or params.repeats < 1 or params.duration_s < 1:
            raise CannotMeasure("streams, repeats and duration_s must each be at least 1")
        names = ctx.node_names
        addresses = {spec["name"]: spec.get("address") or spec["name"] for spec in ctx.nodes}
        facts: dict[str, Any] = {
            "pattern": params.pattern, "nodes": names, "unreachable": list(ctx.unreachable),
            "addresses": addresses, "streams": params.streams, "duration_s": params.duration_s,
            "repeats": params.repeats, "probe": {}, "links": [], "rounds": [], "matrix_gbps": {},
        }
        if len(names) < 2:
            return facts

        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            probes = dict(zip(names, pool.map(lambda n: self._probe(ctx, n, names, addresses), names)))
        facts["probe"] = probes
        usable = [n for n in names if probes[n].get("iperf3")]
        rounds = schedule(usable, params.pattern)
        facts["rounds"] = [[list(pair) for pair in r] for r in rounds]

        links: dict[tuple[str, str], dict[str, Any]] = {}
        for pair in (p for r in rounds for p in r):
            src, dst = pair
            target = probes[src].get("targets", {}).get(addresses[dst], {})
            links[pair] = {
                "src": src, "dst": dst, "dst_address": addresses[dst], "local": bool(target.get("local")),
                "why_local": target.get("why"), "route": target.get("route"), "samples": [],
            }
            if target.get("error"):
                links[pair]["error"] = f"{addresses[dst]} {target['error']} on {src}"

        # A local route or an unresolvable address is reported, never measured.
        to_run = [[p for p in r if not links[p]["local"] and "error" not in links[p]] for r in rounds]
        to_run = [r for r in to_run if r]
        per_round = params.duration_s + params.omit_s + 3  # traffic, plus starting and reporting
        needed = params.repeats * len(to_run) * per_round
        if needed > ctx.time_left() - 5:
            raise CannotMeasure(
                f"the {params.pattern} schedule needs about {needed:.0f}s ({len(to_run)} rounds x {params.repeats} "
                f"repeats x {per_round:.0f}s) but the check has {ctx.time_left():.0f}s left; raise its timeout "
                "or lower repeats/duration_s"
            )

        self._evidence_budget, self._evidence_skipped = EVIDENCE_JOBS, 0
        for _ in range(params.repeats):
            for round_pairs in to_run:
                self._run_round(ctx, params, round_pairs, probes, addresses, links)
        if self._evidence_skipped:
            ctx.record(f"({self._evidence_skipped} more iperf3 server and client commands like the ones above "
                       "succeeded; not recorded one by one)", 0, "")

        facts["links"] = list(links.values())
        # Every cell, None where the pattern does not measure that pair (and on the diagonal).
        matrix: dict[str, dict[str, float | None]] = {a: {b: None for b in names if b != a} for a in names}
        for link in facts["links"]:
            values = [s["gbps"] for s in link["samples"] if "gbps" in s]
            matrix[link["src"]][link["dst"]] = round(statistics.median(values), 3) if values else None
        facts["matrix_gbps"] = matrix
        return facts

    def _probe(self, ctx: ClusterContext, node: str, names: list[str], addresses: dict[str, str]) -> dict[str, Any]:
        transport = ctx.transport(node)
        targets = [addresses[n] for n in names if n != node]
        argv = [transport.python, "-c", PROBE, addresses[node], *targets]
        try:
            proc = ctx.run_on(node, argv, timeout=60)
        except CannotMeasure as exc:
            return {"error": str(exc)}
        if proc.returncode != 0:
            text = (proc.stderr.strip() or proc.stdout.strip())[-300:]
            if transport.is_transport_failure(proc.returncode):
                return {"error": f"{node} could not be reached (ssh exit {proc.returncode}): {text or 'connection lost'}"}
            return {"error": f"the probe on {node} failed (exit {proc.returncode}): {text or 'no output'}"}
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"probe printed no result: {proc.stdout[-300:]}"}

    def _run_round(self, ctx: ClusterContext, params: Params, pairs: list[tuple[str, str]],
                   probes: dict[str, Any], addresses: dict[str, str],
                   links: dict[tuple[str, str], dict[str, Any]]) -> None:
        ports = [str(params.base_port + i) for i in range(params.streams)]
        traffic_s = params.duration_s + params.omit_s
        client_life = int(traffic_s + 15)  # connecting, the test, and the final exchange of results
        server_life = int(params.server_start_timeout_s + client_life + 10)
        servers: dict[str, RemoteJob] = {}
        ready: dict[str, str | None] = {}
        try:
            for _, dst in pairs:
                flush = "--forceflush" if probes[dst].get("forceflush") else ""
                servers[dst] = RemoteJob(ctx, dst, ["sh", "-c", SERVER_SCRIPT, "sh", str(server_life), flush, *ports],
                                         "iperf3 servers")
            for dst, job in servers.items():
                ready[dst] = self._wait_ready(job, ports, probes[dst].get("forceflush", False),
                                              params.server_start_timeout_s)
            clients: dict[tuple[str, str], RemoteJob] = {}
            try:
                for pair in pairs:
                    src, dst = pair
                    if ready[dst] is not None:
                        links[pair]["samples"].append({"error": ready[dst]})
                        continue
                    bind = addresses[src] if probes[src].get("own_address_bindable") and _is_ip(addresses[src]) else ""
                    argv = ["sh", "-c", CLIENT_SCRIPT, "sh", str(client_life), addresses[dst], str(params.duration_s),
                            str(params.omit_s), bind, *ports]
                    clients[pair] = RemoteJob(ctx, src, argv, "iperf3 clients")
                limit = client_life + 5
                for pair, job in clients.items():
                    done = job.wait_until(lambda job=job: "@@done" in job.lines, limit)
                    if not done:
                        links[pair]["samples"].append({"error": job.failure(f"iperf3 clients on {pair[0]}", limit)})
                        continue
                    links[pair]["samples"].append(summarize_sample(parse_client_output(job.lines), params.streams))
            finally:
                for pair, job in clients.items():
                    sample = links[pair]["samples"][-1] if links[pair]["samples"] else {"error": "no result"}
                    # The full iperf3 JSON is in the facts' figures already; evidence keeps the digest.
                    digest = "\n".join([line for line in job.lines if line.startswith(("pid ", "@@"))] + job.stderr
                                       + [json.dumps(sample)])
                    job.stop(record=self._keep_evidence("error" in sample), output=digest)
        finally:
            for dst, job in servers.items():
                # Servers run one test each and exit; any that did not (its client failed) is killed.
                job.wait_until(job.finished, 5)
                job.stop(record=self._keep_evidence(ready.get(dst) is not None if ready else True))

    def _keep_evidence(self, failed: bool) -> bool:
        """Every failed command is evidence; of the ones that worked, the first few show how it ran."""
        if failed or self._evidence_budget > 0:
            self._evidence_budget -= 0 if failed else 1
            return True
        self._evidence_skipped += 1
        return False

    @staticmethod
    def _wait_ready(job: RemoteJob, ports: list[str], flushes: bool, timeout: float) -> str | None:
        """None once every server listens, else why not."""
        def listening() -> set[str]:
            return {m.group(1) for line in job.lines for m in [re.search(r"Server listening on (\d+)", line)] if m}

        def failed() -> bool:
            return any("error" in line for line in job.lines + job.stderr) or job.proc.poll() is not None

        if flushes:
            job.wait_until(lambda: listening() >= set(ports) or failed(), timeout)
            if listening() >= set(ports):
                return None
        else:
            # An iperf3 without --forceflush buffers its banner; the PIDs and a short pause stand in.
            job.wait_until(lambda: len(job.pids) >= len(ports) or failed(), timeout)
            time.sleep(1.0)
            if len(job.pids) >= len(ports) and not failed():
                return None
        code = job.proc.poll()
        if code is not None and job.transport.is_transport_failure(code):
            return job.failure(f"iperf3 servers on {job.node}", timeout)
        text = " | ".join(line for line in (job.lines + job.stderr)[-6:] if not line.startswith("pid "))
        return f"iperf3 servers on {job.node} did not start: {text or 'no output within %.0fs' % timeout}"

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        too_few = too_few_nodes(names, unreachable, expect, single="there is no link between nodes to measure",
                                nothing="no link between nodes could be measured")
        if too_few:
            return too_few

        problems: list[tuple[Status, str]] = []
        details: list[str] = []
        remediation: list[str] = []
        probes = facts.get("probe", {})
        missing = [n for n in names if not probes.get(n, {}).get("iperf3") and "error" not in probes.get(n, {})]
        broken = {n: probes[n]["error"] for n in names if "error" in probes.get(n, {})}
        if missing:
            problems.append((Status.ERROR, f"iperf3 is not installed on {', '.join(missing)}: {INSTALL_HINT}"))
            remediation.append(INSTALL_HINT)
        for node, error in broken.items():
            problems.append((Status.ERROR, error))
        if unreachable:
            details.append(f"not measured, unreachable: {', '.join(unreachable)}; links among the other nodes only")

        measurements = []
        measured: list[tuple[float, str]] = []
        slow: list[tuple[float, str]] = []
        for link in facts.get("links", []):
            label = f"{link['src']} -> {link['dst']}"
            local_why = link.get("why_local") if link.get("local") else None
            samples = link.get("samples", [])
            for sample in samples:
                for local_host, remote_host in sample.get("connected", []):
                    if local_host and local_host == remote_host:
                        local_why = local_why or f"iperf3 connected {local_host} to itself"
            if local_why:
                problems.append((Status.ERROR, f"{label}: the route is local to {link['src']} ({local_why}); "
                                 "a figure over it would be memory bandwidth, not the network"))
                measurements.append(measure(label, None, "Gbit/s", at_least=params.min_gbps, node=label))
                continue
            values = [s["gbps"] for s in samples if "gbps" in s]
            errors = [s["error"] for s in samples if "error" in s] + ([link["error"]] if link.get("error") else [])
            if not values:
                problems.append((Status.ERROR, f"{label}: not measured: {errors[0] if errors else 'no samples'}"))
                measurements.append(measure(label, None, "Gbit/s", at_least=params.min_gbps, node=label))
                continue
            median = round(statistics.median(values), 3)
            m = measure(label, median, "Gbit/s", at_least=params.min_gbps, samples=values, node=label)
            measurements.append(m)
            measured.append((median, label))
            text = f"{label}: {median:.2f} Gbit/s (samples {', '.join(f'{v:.2f}' for v in values)})"
            if errors:
                text += f"; {len(errors)} failed attempt(s): {errors[0]}"
            details.append(text)
            if not m.ok:
                slow.append((median, label))
        if slow:
            slow.sort()
            listed = ", ".join(f"{label} {value:.2f}" for value, label in slow[:6])
            more = f" and {len(slow) - 6} more" if len(slow) > 6 else ""
            problems.append((Status.FAIL, f"{len(slow)} of {len(measured)} links below {params.min_gbps:g} Gbit/s: "
                             f"{listed}{more} Gbit/s; slowest {slow[0][1]}"))
        if not measured and not problems:
            problems.append((Status.ERROR, "no link was measured"))

        status = worst([s for s, _ in problems], default=Status.PASS)
        if status is Status.PASS:
            slowest_value, slowest = min(measured)
            fastest_value, _ = max(measured)
            summary = (f"{len(measured)} links ({facts.get('pattern')}), all at least {params.min_gbps:g} Gbit/s; "
                       f"slowest {slowest} at {slowest_value:.2f} Gbit/s, fastest {fastest_value:.2f}")
        else:
            ordered = sorted(problems, key=lambda p: -p[0].severity)
            summary = "; ".join(text for _, text in ordered[:3])
            if len(ordered) > 3:
                summary += f"; and {len(ordered) - 3} more (see details)"
            if measured and not slow:
                slowest_value, slowest = min(measured)
                summary += f" (slowest measured link {slowest} at {slowest_value:.2f} Gbit/s)"
        if slow:
            remediation += list(self.remediation[:2])
        if any("route is local" in text for _, text in problems):
            remediation.append("Give each node in the hosts file the address other nodes reach it by; two names for "
                               "one machine, or a name that resolves to 127.x on the sender, measures nothing.")
        details = [text for _, text in problems] + details
        return Outcome(status, summary, measurements, details=details, remediation=remediation or None)
