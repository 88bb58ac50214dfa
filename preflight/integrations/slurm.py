"""Slurm: the nodes of the caller's allocation, and draining or resuming nodes from a run's report.

Deciding is pure: `drain_plan` and `resume_plan` read a RunReport and the nodes' state as
`scontrol show node -o` prints it, and say what to change. Acting is one small function,
`scontrol`, that runs Slurm's own client. Without --drain or --resume nothing here changes Slurm.

A node is drained for findings that are its own: a failing node check on it, or a failing finding
of a cluster check that names exactly that node (a version that differs on it). A finding about a
link or the whole cluster drains nothing. ERROR (could not measure: a step that did not start, a
timeout) drains nothing either: Slurm marks a node whose slurmd is gone DOWN by itself, and a
coordinator-side problem must not take healthy nodes out. Resuming touches only nodes whose drain
reason starts with `preflight:` (never an operator's drain), and only when this run reached the
node and found nothing blocking on it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from preflight.core.blame import (  # noqa: F401 (used here and by callers)
    DEFAULT_BLAST_RADIUS, acting, blames, blocking_levels, held, held_text, own_findings,
)
from preflight.core.model import RunReport, Scope, Status
from preflight.integrations.slurm_state import REASON_PREFIX, NodeState, SlurmError  # noqa: F401 (callers import them here)
from preflight.transport.process import CommandTimeout, Completed, run_command

MAX_REASON_CHARS = 80  # `sinfo -R` shows 20 by default; keep the whole reason readable in scontrol
SCONTROL_TIMEOUT_S = 60.0

Runner = Callable[..., Completed]  # run_command's shape: run(argv, timeout=...)


@dataclass
class Allocation:
    jobid: str
    nodelist: str  # compressed, as Slurm writes it: gpu[001-004,007]


# -- the allocation -------------------------------------------------------------------------------


def allocation_from_env(env: Mapping[str, str] | None = None) -> Allocation | None:
    env = os.environ if env is None else env
    jobid = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not jobid or not nodelist:
        return None
    return Allocation(jobid, nodelist)


def outside_allocation_message(argv: list[str]) -> str:
    """What to type instead: the same command inside an allocation, interactive or batch."""
    command = shlex.join(["preflight", *argv])
    return ("--slurm runs inside a Slurm allocation (no SLURM_JOB_ID / SLURM_JOB_NODELIST here). Run it as "
            f"`salloc -N 4 {command}` or `sbatch -N 4 --wrap {shlex.quote(command)}` "
            "(4 nodes; take as many as you want checked), or use examples/slurm/preflight.sbatch")


def scontrol(args: list[str], run: Runner = run_command, timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """Run `scontrol ARGS`; its stdout, or SlurmError with its own words."""
    try:
        proc = run(["scontrol", *args], timeout=timeout)
    except FileNotFoundError as exc:
        raise SlurmError("scontrol is not installed here (the Slurm client tools are needed with --slurm)") from exc
    except CommandTimeout as exc:
        raise SlurmError(f"scontrol {' '.join(args)} did not answer within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise SlurmError(f"scontrol {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def expand_nodelist(nodelist: str, run: Runner = run_command) -> list[str]:
    """gpu[001-003] -> [gpu001, gpu002, gpu003], by Slurm's own `scontrol show hostnames`."""
    names = [line.strip() for line in scontrol(["show", "hostnames", nodelist], run).splitlines() if line.strip()]
    if not names:
        raise SlurmError(f"scontrol show hostnames {nodelist} named no node")
    return names


# The keys `scontrol show node` prints (src/api/node_info.c, Slurm 14.11 to 25.x), and those printed
# after Reason: a reason is free text ("Kill task failed", "some reason containing key=value entries"),
# so only these end it.
_NODE_KEYS = frozenset("""NodeName Arch CpuBind CoresPerSocket CPUAlloc CPUErr CPUEfctv CPUTot CPULoad CPUs AllocCPUs
    AvailableFeatures ActiveFeatures Features Gres GresDrain GresUsed NodeAddr NodeHostName BcastAddr Port Version OS
    RealMemory AllocMem FreeMem Sockets Boards Cores Threads CoreSpecCount CPUSpecList MemSpecLimit RestrictedCoresPerGPU
    State ThreadsPerCore TmpDisk Weight Owner MCS_label NextState Partitions BootTime SlurmdStartTime LastBusyTime
    ResumeAfterTime SuspendTime CfgTRES AllocTRES CapWatts CurrentWatts AveWatts LowestJoules ConsumedJoules
    ExtSensorsJoules ExtSensorsWatts ExtSensorsTemp PowerConsumption Reason Comment Extra InstanceId InstanceType
    ReservationName TLSCertTokenSet TLSCertLastRenewal Topology Parameters RackMidplane""".split())
_AFTER_REASON = frozenset("Comment Extra InstanceId InstanceType ReservationName TLSCertTokenSet TLSCertLastRenewal "
                          "Topology Parameters".split())
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_REASON_STAMP = re.compile(r"\s*\[([^\]@\s]+)@([^\]]+)\]")


def _node_records(text: str) -> list[str]:
    """One string per node: `-o` prints a line each, the default output indents continuation lines."""
    records: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("NodeName="):
            records.append(stripped)
        elif records and stripped and line[:1].isspace():
            records[-1] += " " + stripped
        elif not stripped and records and records[-1]:
            records.append("")  # a blank line ends the record
    return [r for r in records if r]


def _split_fields(record: str) -> dict[str, str]:
    marks = []
    in_reason = False
    for match in _KEY.finditer(record):
        key = match.group(1)
        if in_reason:
            if key not in _AFTER_REASON:
                continue
            in_reason = False
        elif key not in _NODE_KEYS and not key[:1].isupper():
            continue
        marks.append(match)
        in_reason = key == "Reason"
    fields = {}
    for i, match in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(record)
        fields.setdefault(match.group(1), record[match.end():end].strip())
    return fields


def parse_show_node(text: str) -> dict[str, NodeState]:
    """Node name -> NodeState, from `scontrol show node`, with or without -o (one node per line).

    Fields are split at the keys Slurm prints, so values may hold spaces (OS=Linux 6.1 #1 SMP ...,
    Extra={ "load": 0.99 }); the free-text Reason ends only at a key Slurm prints after it (Comment,
    Extra, InstanceId, ReservationName, Topology, ...). The " [user@time]" Slurm appends to a reason
    goes to reason_user and reason_time."""
    nodes: dict[str, NodeState] = {}
    for record in _node_records(text):
        fields = _split_fields(record)
        name = fields.get("NodeName", "").split()[0] if fields.get("NodeName") else ""
        reason, user, when = fields.get("Reason", ""), "", ""
        stamp = _REASON_STAMP.search(reason)
        if stamp:
            user, when = stamp.group(1), stamp.group(2)
            reason = (reason[:stamp.start()] + reason[stamp.end():]).strip()
        nodes[name] = NodeState(name, fields.get("NodeAddr", ""), fields.get("State", ""), reason, fields,
                                reason_user=user, reason_time=when)
    return nodes


def show_nodes(names: list[str], run: Runner = run_command) -> dict[str, NodeState]:
    """The nodes' state and drain reasons: `scontrol --json show node` where the client has it (Slurm
    21.08+ with a data_parser plugin; its reason is exact), else `scontrol show node -o` (read at the
    keys Slurm prints)."""
    from preflight.integrations.slurm_json import node_states

    listed = ",".join(names)
    try:
        states = node_states(scontrol(["--json", "show", "node", listed], run))
        if all(name in states for name in names):
            return states
    except SlurmError:  # an older client, or one without the JSON plugin: the text every release prints
        pass
    return parse_show_node(scontrol(["show", "node", "-o", listed], run))


# -- deciding what to drain and resume (pure) ------------------------------------------------------


def drain_reason(findings: list[tuple[str, ...]], limit: int = MAX_REASON_CHARS) -> str:
    """`preflight: node.environment (node.environment.shm-small) +1 more`, at most `limit` characters;
    the component a cluster finding names follows its id (`..., GPU 3 of n5`)."""
    check_id, finding_id, *rest = findings[0]
    named = [x for x in (finding_id if finding_id != check_id else "", rest[0] if rest else "") if x]
    text = f"{REASON_PREFIX} {check_id}" + (f" ({', '.join(named)})" if named else "")
    more = f" +{len(findings) - 1} more" if len(findings) > 1 else ""
    if len(text) + len(more) > limit:
        text = text[: max(len(REASON_PREFIX) + 2, limit - len(more) - 3)] + "..."
    return text + more


def operator_drained(report: RunReport, states: Mapping[str, NodeState]) -> dict[str, NodeState]:
    """The nodes with blocking findings of their own that an operator already drained: left as they
    are (their drain and its reason are someone's decision), and said."""
    return {node: states[node] for node in sorted(blames(report))
            if node in states and states[node].drained and not states[node].drained_by_preflight}


def state_text(state: NodeState) -> str:
    """`DRAIN in Slurm: "bad DIMM" (root, 2024-05-01T10:00:00)`."""
    who = ", ".join(x for x in (state.reason_user, state.reason_time) if x)
    reason = f'"{state.reason}"' if state.reason else "no reason given"
    return f"{state.state} in Slurm: {reason}" + (f" ({who})" if who else "")


def unavailable(state: NodeState) -> bool:
    """Drained, draining, down or failed: Slurm starts no new job there (sinfo's short forms too:
    drng, drain, down, fail, failg)."""
    return any(word in state.state.upper() for word in ("DRAIN", "DRNG", "DOWN", "FAIL"))


def drain_plan(report: RunReport, states: Mapping[str, NodeState], radius: float = DEFAULT_BLAST_RADIUS,
               groups: Mapping[str, str] | None = None) -> dict[str, str]:
    """Node -> reason, for each node with blocking findings of its own, within the blast radius
    (preflight.core.blame.acting: past it, none). A node an operator already drained keeps its drain
    and reason; one preflight drained gets this run's reason."""
    plan = {}
    for node, findings in sorted(acting(report, radius, groups).nodes.items()):
        state = states.get(node)
        if state is not None and state.drained and not state.drained_by_preflight:
            continue
        plan[node] = drain_reason(findings)
    return plan


def node_passes(report: RunReport, node: str) -> bool:
    """This run reached the node, ran its node checks, and nothing on it blocks or is unmeasured."""
    info = next((n for n in report.nodes if n.name == node), None)
    if info is None or info.reachable is False:
        return False
    mine = [r for r in report.results if r.scope is Scope.NODE and r.node == node]
    if not mine or any(r.status is Status.ERROR for r in mine):
        return False
    return node not in own_findings(report)


def resume_plan(report: RunReport, states: Mapping[str, NodeState]) -> list[str]:
    """Nodes preflight drained (reason `preflight:`) that pass in this run; never an operator's drain."""
    return sorted(name for name, state in states.items()
                  if state.drained_by_preflight and name in report.node_names and node_passes(report, name))


# -- acting ------------------------------------------------------------------------------------------


@dataclass
class Action:
    node: str
    what: str  # "drain", "resume", "hold" (a link, a boundary, a shared cause, or past the blast radius:
    # no node drained, `reason` says why and names them) or "keep" (an operator's drain left as it is)
    reason: str = ""
    error: str = ""

    def describe(self) -> str:
        if self.error:
            return f"could not {self.what} {self.node}: {self.error}"
        if self.what == "hold":
            return f"not drained: {self.reason}"
        if self.what == "keep":
            return f"not drained again: {self.node} is {self.reason}"
        return f"{'drained' if self.what == 'drain' else 'resumed'} {self.node}" + (f": {self.reason}" if self.reason else "")


def apply(report: RunReport, drain: bool, resume: bool, run: Runner = run_command, radius: float = DEFAULT_BLAST_RADIUS,
          groups: Mapping[str, str] | None = None) -> list[Action]:
    """Drain (within the blast radius) and/or resume this run's nodes in Slurm; one Action per node
    touched or failed, and one for what is not drained and why."""
    try:
        states = show_nodes(report.node_names, run)
    except SlurmError as exc:
        return [Action(", ".join(report.node_names), "drain" if drain else "resume", error=str(exc))]
    actions = []
    if drain:
        actions += [Action(b.component, "hold", held_text(b)) for b in held(report)]
        actions += [Action(node, "keep", f"already {state_text(state)}; left as it is")
                    for node, state in operator_drained(report, states).items()]
        withheld = acting(report, radius, groups).why
        if withheld:
            actions.append(Action("", "hold", withheld))
        for node, reason in drain_plan(report, states, radius, groups).items():
            action = Action(node, "drain", reason)
            try:
                scontrol(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"], run)
            except SlurmError as exc:
                action.error = str(exc)
            actions.append(action)
    if resume:
        for node in resume_plan(report, states):
            action = Action(node, "resume")
            try:
                scontrol(["update", f"NodeName={node}", "State=RESUME"], run)
            except SlurmError as exc:
                action.error = str(exc)
            actions.append(action)
    return actions
