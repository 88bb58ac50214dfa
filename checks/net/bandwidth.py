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

When the ring finds links below the floor or failed, `isolation = "adaptive"` (the default) names
what is at fault: a node, the link between two nodes, or a topology boundary, or says that the
evidence is ambiguous. Groups of nodes measure their own rings at once, bad groups are split and
searched, and each suspect is confirmed against nodes already measured good (preflight.launch.isolation,
through preflight_checks.net.isolation), in the rounds a search at the cluster's size needs (the check's
timeout grows with them): a few dozen at most where the full matrix takes 2(N-1) of all pairs. The ring is
never judged alone (preflight.launch.recheck.take_readings): a second ring always, at the end (after a first
that met the floor, two watch rings at once, counted only with a link under a quarter of it), a third when
the first was below the floor and the pass blamed nothing, a ring just under the floor measured again at
once (below it only when that one is too); links below it in every ring FAIL, in most rings (or under a
quarter of it in one, or under half of it in one with another ring below it) are an intermittent FAIL,
else a transient WARN. A link whose median met the floor in every
ring but dropped under a quarter of it in single measurements of two rings is flapping (a FAIL, acted on
by nobody: a link is no node's own); one drop is only noted.

A link whose route is local to the sender (the target is one of the sender's own addresses, or
loopback) would measure memory bandwidth, not the network, so it is ERROR and never measured.
Servers and clients (preflight.workers.iperf) run on the nodes through their transports'
`spawn`, under the guard that ends them with everything they started when the check stops them or
loses them; every iperf3 also has a bounded life, so not even a coordinator that dies mid-round
leaves one behind.
"""

from __future__ import annotations

import ipaddress
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from preflight.core.check import (
    TOO_FEW_NODES_FIXES, CannotMeasure, Check, Expect, Learnable, Outcome, outcome_from_findings, param, too_few_nodes,
)
from preflight.core.finite import dumps
from preflight.engine.context import ClusterContext
from preflight.engine.faults import fault
from preflight.launch.torchrun import run_probe
from preflight_checks.net.links import link_entry, matrix_of
from preflight_checks.net.iperf import parse_client_output, summarize_sample
from preflight.core.model import Finding, Scope, Status
from preflight.launch.pairs import full_rounds, ring_rounds
from preflight.launch.isolation_launch import isolation_method, timeout_with_pass
from preflight.launch.topology import topology_of
from preflight_checks.net.isolation import ISOLATION_METHODS, adaptive_pass, screen_reason
from preflight_checks.net.isolation import ISOLATION_IN_TIMEOUT_S, isolation_budget, isolation_rounds, round_time
from preflight.launch.isolation_findings import SHARED_CAUSE_FIX, suspect_fix
from preflight.launch.recheck import (
    INTERMITTENT_FIX, TRANSIENT_FIX, judged, readings_of, take_readings,
)
from preflight_checks.net.bandwidth_judge import (
    FLAPPING_FIX, SHORTFALL_KINDS, below_floor, flapping_part, isolation_part, judge_link, met_floor,
    deep_below, dropped_out, far_below, recheck_failure, recheck_text, rings_of, slow_finding,
)
from preflight.transport.process import RemoteProcess

INSTALL_HINT = "install iperf3 on every node (Debian/Ubuntu: apt-get install iperf3; RHEL/Fedora: dnf install iperf3)"
FIX_LINK = ("Check the named link's negotiated speed and error counters on both ends (ethtool <iface>; ethtool -S "
            "<iface>), the cable or transceiver, and the switch port.")
FIX_ROUTE = ("Make sure the nodes' addresses route over the data network, not the management interface (ip route get "
             "<peer address> on the sender).")
PATTERNS = ("ring", "full")
# Commands that worked and are kept as evidence; on a large cluster a full schedule runs thousands.
EVIDENCE_JOBS = 24


@dataclass
class Params:
    # 10 GbE is the least a data-parallel job across nodes can live with; gradient all-reduce over
    # anything slower leaves GPUs idle. Raise it to what the fabric is sold as (25/100/200 Gbit/s).
    min_gbps: float = param(10.0, kind="threshold", help="lowest TCP bandwidth of each link between nodes (Gbit/s)",
                            learn=Learnable("floor", "iperf3 bandwidth of each link", figure="link", unit="Gbit/s"))
    pattern: str = param("ring", kind="choice", choices=PATTERNS,
                         help='"ring" (each node to the next) or "full" (every ordered pair)')
    # iperf3 processes per link: one iperf3 before 3.16 is one thread and tops out well below
    # 100 Gbit/s; four processes fill a 100 GbE link on a typical server CPU.
    streams: int = param(4, kind="count", minimum=1, help="parallel iperf3 processes per link (count)")
    duration_s: int = param(5, kind="duration", help="traffic per measurement (seconds)")
    omit_s: int = param(1, kind="count", help="leading seconds left out, so TCP slow start does not count (seconds)")
    repeats: int = param(3, kind="count", minimum=1, help="measurements per link; the median is judged (count)")
    # iperf3's default port, the one cluster firewalls are usually opened for; a link uses
    # base_port .. base_port + streams - 1 on the receiving node.
    base_port: int = param(5201, kind="count", minimum=1,
                           help="first TCP port iperf3 listens on; a link uses base_port .. base_port + streams - 1")
    server_start_timeout_s: float = param(15.0, kind="duration",
                                          help="time allowed for the iperf3 server to start (seconds)")
    # The adaptive pass after a ring with slow or failed links: a few rounds of group rings.
    isolation: str = param("adaptive", kind="choice", choices=ISOLATION_METHODS,
                           help=('when the ring finds slow or failed links, name the node or link at fault by '
                                 'measuring groups of nodes: "adaptive" or "off"'))
    isolation_timeout_s: float | None = param(None, kind="duration", help=(
        "time allowed for the isolation pass, within the check's timeout; unset: its rounds times a round's time "
        "(seconds)"))
    isolation_max_rounds: int | None = param(None, kind="count", minimum=1, help=(
        "most rounds of the isolation pass; unset: 44 at 8 nodes and 4 more each time the cluster doubles (count)"))


def schedule(names: list[str], pattern: str) -> list[list[tuple[str, str]]]:
    return ring_rounds(names) if pattern == "ring" else full_rounds(names)


def pids_of(job: RemoteProcess) -> dict[str, int]:
    """Port -> PID of the iperf3 processes a job started, from its "pid PORT PID" lines."""
    found = {}
    for line in job.lines:
        match = re.fullmatch(r"pid (\d+) (\d+)", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def failure(job: RemoteProcess, node: str, what: str, limit: float) -> str:
    """Why a job produced no result: the transport's own words, or the time limit."""
    code = job.poll()
    if code is None:
        return f"{what} did not finish within {limit:.0f}s"
    text = " | ".join(line for line in job.stderr_lines[-3:] if line.strip()) or "no output"
    if job.transport_failed():
        return job.transport.unreachable(code, text)
    return f"{what} exited {job.exit_code if job.exit_code is not None else code}: {text}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


def _refuse_bad_params(params: Params) -> None:
    if params.pattern not in PATTERNS:
        raise CannotMeasure(f"pattern must be one of {', '.join(PATTERNS)}, not {params.pattern!r}")
    if params.streams < 1 or params.repeats < 1 or params.duration_s < 1:
        raise CannotMeasure("streams, repeats and duration_s must each be at least 1")
    isolation_method(params.isolation, ISOLATION_METHODS)


def runnable(rounds: list[list[tuple[str, str]]], probes: dict[str, Any],
             addresses: dict[str, str]) -> list[list[tuple[str, str]]]:
    """The rounds' pairs that are measured: not a local route, not an unresolvable address."""
    links = {pair: link_entry(pair, probes, addresses) for r in rounds for pair in r}
    to_run = [[p for p in r if not links[p]["local"] and "error" not in links[p]] for r in rounds]
    return [r for r in to_run if r]


def schedule_time(params: Params, rounds: list[list[tuple[str, str]]], probes: dict[str, Any],
                  addresses: dict[str, str]) -> float:
    """About how long one measurement of the whole schedule takes (seconds)."""
    return params.repeats * len(runnable(rounds, probes, addresses)) * round_time(params)


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
    remediation = (FIX_LINK, FIX_ROUTE, INSTALL_HINT)
    fixes = {
        **TOO_FEW_NODES_FIXES,
        "no-iperf3": INSTALL_HINT,
        "probe-failed": ("Make the node reachable from here and able to start the same Python and preflight "
                         "(the error above says which step failed)."),
        "local-route": ("Give each node in the hosts file the address other nodes reach it by; two names for one "
                        "machine, or a name that resolves to 127.x on the sender, measures nothing."),
        "not-measured": ("Open the iperf3 ports (base_port .. base_port + streams - 1) between the nodes, and read "
                         "the attempts' errors in the evidence."),
        "slow-link": f"{FIX_LINK} {FIX_ROUTE}",
        "nothing-measured": "Run with at least two reachable nodes, each with iperf3 installed.",
        # The adaptive isolation pass (preflight_checks.net.isolation): what it names, and when it cannot.
        "isolated-node": ("The node named is slow with every partner: check its NIC's negotiated speed and errors "
                          "(ethtool <iface>; ethtool -S <iface>), its MTU and offloads against its peers', and the "
                          "traffic shaping or firewall rules on it (tc qdisc show; nft list ruleset)."),
        "isolated-link": ("The path between the two nodes named, and no other: check the route and firewall rules "
                          "each has for the other's address (ip route get <peer>), then the cable, transceiver and "
                          "switch ports between them if they share one."),
        "isolated-boundary": ("The path between the two topology groups named: check the trunk or uplinks between "
                              "their switches (error counters, oversubscription, a failed member of a LAG)."),
        "straggler": ("The node named moves data slower than its peers in most of its groups, though it works: compare "
                      "its NIC's negotiated speed and errors (ethtool <iface>; ethtool -S <iface>) and its host load "
                      "with theirs; replace it if it stays slow."),
        "suspect": suspect_fix("net.bandwidth", "isolation_timeout_s"),
        "isolation-ambiguous": ('The evidence names several candidates: run again with pattern = "full" on just those '
                                "nodes (--nodes), which measures every ordered pair among them."),
        "isolation-not-reproduced": ("The ring was slow but no group reproduced it: a transient fault, or one that "
                                     "shows only under the whole ring's load; run again, and watch the switches' "
                                     "error and drop counters."),
        "transient": TRANSIENT_FIX, "intermittent": INTERMITTENT_FIX,
        "shared-cause": SHARED_CAUSE_FIX, "flapping-link": FLAPPING_FIX,
    }
    Params = Params
    timeout_s = 300.0
    # quick: one 3 s measurement per ring link; thorough: every ordered pair, five 10 s measurements.
    levels = {
        "quick": {"timeout": 30, "repeats": 1, "duration_s": 3, "pattern": "ring", "isolation": "off"},
        "thorough": {"timeout": 1800, "pattern": "full", "repeats": 5, "duration_s": 10},
    }

    @classmethod
    def timeout_at(cls, nodes: int, params: Params) -> float:
        adaptive = params.isolation == "adaptive" and params.pattern == "ring"  # the pass grows with the cluster
        return timeout_with_pass(cls.timeout_s, isolation_budget(params, nodes), nodes, ISOLATION_IN_TIMEOUT_S, adaptive)

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    # -- collect -------------------------------------------------------------------------------

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        _refuse_bad_params(params)
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
        needed = schedule_time(params, rounds, probes, addresses)
        if needed > ctx.time_left() - 5:
            raise CannotMeasure(
                f"the {params.pattern} schedule needs about {needed:.0f}s ({len(runnable(rounds, probes, addresses))} "
                f"rounds x {params.repeats} repeats x {round_time(params):.0f}s) but the check has "
                f"{ctx.time_left():.0f}s left; raise its timeout or lower repeats/duration_s"
            )

        self._evidence_budget, self._evidence_skipped = EVIDENCE_JOBS, 0
        # Tests only (preflight.engine.faults): the first schedule's iperf3 clients capped (-b), a transient.
        self._bitrate = str(fault("net.bandwidth", "bitrate_first", "") or "")
        facts["links"] = self._measure_schedule(ctx, params, rounds, probes, addresses)
        self._bitrate = ""
        if self._evidence_skipped:
            ctx.record(f"({self._evidence_skipped} more iperf3 server and client commands like the ones above "
                       "succeeded; not recorded one by one)", 0, "")
        facts["matrix_gbps"] = matrix_of(names, facts["links"])
        if params.pattern == "ring" and params.isolation == "adaptive" and len(usable) >= 3:
            def isolate(reading: dict[str, Any]) -> dict[str, Any] | None:
                reason = screen_reason(reading["links"], params.min_gbps)
                return self._isolation(ctx, params, usable, probes, addresses, reason) if reason else None

            # Never GO or NO-GO on one ring: the readings protocol of preflight.launch.recheck
            found, facts["rechecks"] = take_readings({"links": facts["links"]}, isolate,
                lambda: {"links": self._measure_schedule(ctx, params, rounds, probes, addresses)},
                lambda r: below_floor(r.get("links", []), params.min_gbps), lambda: ctx.time_left() - 5, needed,
                deep_below=lambda r: deep_below(r, params.min_gbps), dropped_out=lambda r: dropped_out(r, params.min_gbps),
                far_below=lambda r: far_below(r, params.min_gbps))
            if found is not None:
                facts["isolation"] = found
        return facts

    def _measure_schedule(self, ctx: ClusterContext, params: Params, rounds: list[list[tuple[str, str]]],
                          probes: dict[str, Any], addresses: dict[str, str]) -> list[dict[str, Any]]:
        """Every link of the schedule, `repeats` times; a local route or an unresolvable address is
        reported, never measured."""
        links = {pair: link_entry(pair, probes, addresses) for r in rounds for pair in r}
        to_run = runnable(rounds, probes, addresses)
        for _ in range(params.repeats):
            for round_pairs in to_run:
                self._run_round(ctx, params, round_pairs, probes, addresses, links)
        return list(links.values())

    def _isolation(self, ctx: ClusterContext, params: Params, nodes: list[str], probes: dict[str, Any],
                   addresses: dict[str, str], reason: str) -> dict[str, Any]:
        """The adaptive pass: each round, every group's ring at once, one measurement per link."""
        def measure_links(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
            entries = {pair: link_entry(pair, probes, addresses) for pair in pairs}
            out: dict[tuple[str, str], dict[str, Any]] = {}
            for pair, entry in entries.items():
                if entry["local"] or "error" in entry:
                    out[pair] = {"error": entry.get("error") or f"the route is local ({entry['why_local']})",
                                 "unmeasurable": True}
            runnable = [p for p in pairs if p not in out]
            if runnable:
                self._run_round(ctx, params, runnable, probes, addresses, entries)
            for pair in runnable:
                samples = entries[pair]["samples"]
                out[pair] = samples[-1] if samples else {"error": "no result"}
            return out

        round_s = round_time(params)  # a round as the schedule's estimate has it
        # The last round starts with at least round_s left, and may run over it: keep that much spare.
        budget = min(isolation_budget(params, len(nodes)), ctx.time_left() - 5 - round_s)
        return adaptive_pass(nodes, measure_links, min_gbps=params.min_gbps, budget_s=budget, round_s=round_s,
                             reason=reason, max_rounds=isolation_rounds(params, len(nodes)), topology=topology_of(ctx))

    @staticmethod
    def _probe(ctx: ClusterContext, node: str, names: list[str], addresses: dict[str, str]) -> dict[str, Any]:
        targets = [addresses[n] for n in names if n != node]
        return run_probe(ctx, node, ["--iperf3", "--bindable", addresses[node], "--targets", *targets], timeout=60)

    def _run_round(self, ctx: ClusterContext, params: Params, pairs: list[tuple[str, str]],
                   probes: dict[str, Any], addresses: dict[str, str],
                   links: dict[tuple[str, str], dict[str, Any]]) -> None:
        ports = [str(params.base_port + i) for i in range(params.streams)]
        traffic_s = params.duration_s + params.omit_s
        client_life = int(traffic_s + 15)  # connecting, the test, and the final exchange of results
        server_life = int(params.server_start_timeout_s + client_life + 10)
        servers: dict[str, RemoteProcess] = {}
        ready: dict[str, str | None] = {}
        sender = {pair[1]: pair for pair in pairs}  # each node receives from one sender a round
        before = {pair: len(links[pair]["samples"]) for pair in pairs}
        try:
            for _, dst in pairs:
                flush = ["--forceflush"] if probes[dst].get("forceflush") else []
                servers[dst] = self._start(ctx, dst, ["servers", "--life", str(server_life), *flush, *ports],
                                           server_life)
            for dst, job in servers.items():
                ready[dst] = self._wait_ready(job, dst, ports, probes[dst].get("forceflush", False),
                                              params.server_start_timeout_s)
            clients: dict[tuple[str, str], RemoteProcess] = {}
            try:
                for pair in pairs:
                    src, dst = pair
                    if ready[dst] is not None:
                        links[pair]["samples"].append({"error": ready[dst]})
                        continue
                    bind = addresses[src] if probes[src].get("own_address_bindable") and _is_ip(addresses[src]) else ""
                    args = ["clients", "--life", str(client_life), "--dst", addresses[dst], "--seconds",
                            str(params.duration_s), "--omit", str(params.omit_s), "--bind", bind, *ports]
                    args[1:1] = ["--bitrate", self._bitrate] if getattr(self, "_bitrate", "") else []
                    clients[pair] = self._start(ctx, src, args, client_life)
                limit = client_life + 5
                for pair, job in clients.items():
                    done = job.wait_until(lambda job=job: "@@done" in job.lines, limit)
                    if not done:
                        links[pair]["samples"].append({"error": failure(job, pair[0], f"iperf3 clients on {pair[0]}",
                                                                        limit)})
                        continue
                    links[pair]["samples"].append(summarize_sample(parse_client_output(job.lines), params.streams))
            finally:
                for pair, job in clients.items():
                    sample = links[pair]["samples"][-1] if links[pair]["samples"] else {"error": "no result"}
                    # The full iperf3 JSON is in the facts' figures already; evidence keeps the digest.
                    digest = "\n".join([line for line in job.lines if line.startswith(("pid ", "@@"))]
                                       + job.stderr_lines + [dumps(sample)])
                    self._stop(ctx, job, self._keep_evidence("error" in sample), digest)
        finally:
            until = time.monotonic() + 5  # one grace period for all of them, not one each
            for dst, job in servers.items():
                # Servers run one test each and exit; any that did not is stopped. One whose client
                # failed gets no test, so it is not waited for.
                mine = links[sender[dst]]["samples"][before[sender[dst]]:]
                if not any("error" in sample for sample in mine):
                    job.wait_until(lambda job=job: "@@done" in job.lines or not job.running(),
                                   max(0.0, until - time.monotonic()))
                self._stop(ctx, job, self._keep_evidence(ready.get(dst) is not None if ready else True))

    @staticmethod
    def _start(ctx: ClusterContext, node: str, args: list[str], life_s: float) -> RemoteProcess:
        return ctx.spawn_on(node, [ctx.python_on(node), "-m", "preflight.workers.iperf", *args], life_s=life_s + 10)

    @staticmethod
    def _stop(ctx: ClusterContext, job: RemoteProcess, record: bool, output: str | None = None) -> None:
        """Stop what the job started on the node; record it as evidence (with `output` in place of
        everything it printed, when given)."""
        job.stop()
        if record:
            ctx.record(job.command, job.returncode, output if output is not None else job.output(), job.duration_s)

    def _keep_evidence(self, failed: bool) -> bool:
        """Every failed command is evidence; of the ones that worked, the first few show how it ran."""
        if failed or self._evidence_budget > 0:
            self._evidence_budget -= 0 if failed else 1
            return True
        self._evidence_skipped += 1
        return False

    @staticmethod
    def _wait_ready(job: RemoteProcess, node: str, ports: list[str], flushes: bool, timeout: float) -> str | None:
        """None once every server listens, else why not."""
        def listening() -> set[str]:
            return {m.group(1) for line in job.lines for m in [re.search(r"Server listening on (\d+)", line)] if m}

        def failed() -> bool:
            return any("error" in line for line in job.lines + job.stderr_lines) or not job.running()

        if flushes:
            job.wait_until(lambda: listening() >= set(ports) or failed(), timeout)
            if listening() >= set(ports):
                return None
        else:
            # An iperf3 without --forceflush buffers its banner; the PIDs and a short pause stand in.
            job.wait_until(lambda: len(pids_of(job)) >= len(ports) or failed(), timeout)
            time.sleep(1.0)
            if len(pids_of(job)) >= len(ports) and not failed():
                return None
        if job.poll() is not None and job.transport_failed():
            return failure(job, node, f"iperf3 servers on {node}", timeout)
        text = " | ".join(line for line in (job.lines + job.stderr_lines)[-6:] if not line.startswith("pid "))
        return f"iperf3 servers on {node} did not start: {text or 'no output within %.0fs' % timeout}"

    # -- evaluate ------------------------------------------------------------------------------

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        names = facts.get("nodes", [])
        unreachable = facts.get("unreachable", [])
        too_few = too_few_nodes(type(self), names, unreachable, expect, single="there is no link between nodes to measure",
                                nothing="no link between nodes could be measured")
        if too_few:
            return too_few

        findings = self._probe_findings(names, facts.get("probe", {}))
        details: list[str] = []
        if unreachable:
            details.append(f"not measured, unreachable: {', '.join(unreachable)}; links among the other nodes only")

        measurements = []
        measured: list[tuple[float, str]] = []
        slow: list[tuple[float, str]] = []
        for link in facts.get("links", []):
            problem, m, text = judge_link(type(self), link, params.min_gbps)
            measurements.append(m)
            if problem:
                findings.append(problem)
                continue
            measured.append((m.value, m.name))
            details.append(text)
            if not m.ok:
                slow.append((m.value, m.name))
        shortfall = [slow_finding(type(self), slow, len(measured), params.min_gbps)] if slow else []
        readings = None
        if "rechecks" in facts:  # never GO or NO-GO on one ring (preflight.launch.recheck)
            readings = readings_of(facts["rechecks"], lambda r: met_floor(r, params.min_gbps), recheck_failure,
                                   far=lambda r: far_below(r, params.min_gbps),
                                   first={"links": facts["links"]}, first_below=bool(slow),
                                   out=lambda r: dropped_out(r, params.min_gbps))
            shortfall, more = judged(type(self), shortfall, SHORTFALL_KINDS, readings,
                                     recheck_text(facts["rechecks"], params.min_gbps))
            details += more
        findings += shortfall
        flapping, more = flapping_part(type(self), rings_of(facts, params.min_gbps), params.min_gbps)
        findings += flapping
        details += more
        if not measured and not findings:
            findings.append(self.finding("nothing-measured", Status.ERROR, "no link was measured"))
        isolated, more = isolation_part(type(self), facts.get("isolation"), params.min_gbps,
                                        bool(slow) or any(f.id.endswith(".not-measured") for f in findings)
                                        or bool(readings and readings.below))
        findings += isolated
        details += more
        return outcome_from_findings(findings, measurements, passed=self._passed(facts, params, measured, slow,
                                                                                  findings, details), notes=details)

    def _probe_findings(self, names: list[str], probes: dict[str, Any]) -> list[Finding]:
        """iperf3 missing on a node, or its probe failed."""
        missing = [n for n in names if not probes.get(n, {}).get("iperf3") and "error" not in probes.get(n, {})]
        found = [self.finding("no-iperf3", Status.ERROR, f"iperf3 is not installed on {', '.join(missing)}: {INSTALL_HINT}")
                 ] if missing else []
        return found + [self.finding("probe-failed", Status.ERROR, probes[n]["error"])
                        for n in names if "error" in probes.get(n, {})]

    @staticmethod
    def _passed(facts: dict[str, Any], params: Params, measured: list[tuple[float, str]],
                slow: list[tuple[float, str]], findings: list[Finding], details: list[str]) -> str:
        """The summary when every link passed (and the slowest link in the details when some other finding fired)."""
        if not measured:
            return ""
        slowest_value, slowest = min(measured)
        fastest_value, _ = max(measured)
        if findings and not slow:
            details.append(f"slowest measured link {slowest} at {slowest_value:.2f} Gbit/s")
        return (f"{len(measured)} links ({facts.get('pattern')}), all at least {params.min_gbps:g} Gbit/s; "
                f"slowest {slowest} at {slowest_value:.2f} Gbit/s, fastest {fastest_value:.2f}")
