"""versions.consistency: every node runs the same stack.

Compares, field by field, the runtime stack that versions.pinned recorded on each node (Python,
torch with its CUDA/cuDNN/NCCL, tensorflow, numpy, NVIDIA driver, kernel, OS, glibc). Nodes that
disagree are named with what differs and the value most nodes have.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import ClusterContext
from preflight.core.model import Finding, Scope, Status

SOURCE_CHECK = "versions.pinned"
NAMES_SHOWN = 5  # nodes listed by name before "and N more"


def _default_fields() -> list[str]:
    # What decides whether ranks can talk and compute alike: a different NCCL or driver breaks or
    # slows collectives, a different torch/cuDNN/numpy changes kernels and numerics, a different
    # Python or glibc changes which compiled extensions load. OS and kernel drift says the nodes
    # were not built from one image, which is where the other drifts come from.
    return ["python", "torch", "torch_cuda", "cudnn", "nccl", "tensorflow", "jax", "numpy", "driver", "kernel", "os", "glibc"]


@dataclass
class Params:
    # Stack fields (as versions.pinned records them) that must be identical on every node.
    fields: list[str] = param(kind="list", factory=_default_fields,
                              help="stack fields that must be identical on every node (names, as versions.pinned "
                                   "records them)")


REBUILD = ("Rebuild or re-image the differing nodes from the same container image or lock file as the others, with "
           "the same NVIDIA driver package.")
# What to do about a field that differs: the software of one image, the driver, or the machine's own OS.
FIELD_FIXES = {
    "driver": "Install the same NVIDIA driver package on every node, and reboot the nodes that still run another.",
    "kernel": "Re-image the differing nodes from the same OS image as the others (the kernel differs).",
    "os": "Re-image the differing nodes from the same OS image as the others (the distribution differs).",
    "glibc": "Run the job in the same container image on every node, or re-image the nodes (glibc differs).",
}


def differs_kind(name: str) -> str:
    return f"{name.replace('_', '-')}-differs"


def _names(nodes: list[str]) -> str:
    if len(nodes) <= NAMES_SHOWN:
        return ", ".join(nodes)
    return f"{', '.join(nodes[:NAMES_SHOWN])} and {len(nodes) - NAMES_SHOWN} more"


def _shown(value: Any) -> str:
    return "not installed" if value is None else str(value)


def compare_field(name: str, values: dict[str, Any]) -> list[str]:
    """Problems for one field across nodes, empty when all agree.

    With a single most common value, each other node is named against it. When the most common
    values tie (two nodes that disagree, or halves), there is no majority to blame: every group
    is listed.
    """
    counts = Counter(_shown(v) for v in values.values())
    if len(counts) <= 1:
        return []
    ranked = counts.most_common()
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(_shown(value), []).append(node)
    if ranked[0][1] > ranked[1][1]:
        majority = ranked[0][0]
        return [f"node {node}: {name} {_shown(value)} differs from {majority} on {_names(groups[majority])}"
                for node, value in values.items() if _shown(value) != majority]
    listing = "; ".join(f"{value} on {_names(groups[value])}" for value, _ in ranked)
    return [f"{name} differs with no majority: {listing}"]


class VersionsConsistency(Check):
    id = "versions.consistency"
    title = "Same framework stack on every node"
    scope = Scope.CLUSTER
    tags = ("cluster", "software")
    why = (
        "Distributed training assumes every rank runs the same code. Nodes with a different NCCL or driver "
        "hang or crawl in collectives, a different torch or cuDNN computes slightly different numbers so that "
        "replicas diverge, and a checkpoint written on one node may not load on another. One node left on an "
        "old image is enough."
    )
    remediation = (
        "Rebuild or re-image the differing nodes from the same container image or lock file as the others.",
        "Pin the stack (versions.pinned) and install it on every node from the same requirements, "
        "with the same NVIDIA driver package.",
    )
    fixes = {
        "too-few-stacks": (f"Look at {SOURCE_CHECK}'s result on the nodes without facts; list every node in the "
                           "hosts file."),
        "single-node": "List every node of the cluster in the hosts file: the comparison needs two or more.",
        "no-facts": f"Look at {SOURCE_CHECK}'s result on the nodes without facts: it did not record the stack there.",
        **{differs_kind(name): FIELD_FIXES.get(name, REBUILD) for name in _default_fields()},
    }
    Params = Params
    timeout_s = 30.0
    # Compares what versions.pinned recorded on each node: no probe of its own, at every level.
    levels = {"quick": {"timeout": 10}}
    run_after = (SOURCE_CHECK,)

    def expected_to_run(self, expect: Expect) -> bool:
        return bool(expect.nodes and expect.nodes > 1)

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        nodes = list(ctx.node_names)
        nodes += [n for n in ctx.node_facts if n not in nodes]
        stacks: dict[str, Any] = {}
        no_facts: list[str] = []
        for node in nodes:
            stack = (ctx.node_facts.get(node) or {}).get(SOURCE_CHECK, {}).get("stack")
            if stack:
                stacks[node] = stack
            else:
                no_facts.append(node)
        return {"stacks": stacks, "no_facts": no_facts, "unreachable": list(ctx.unreachable)}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        stacks: dict[str, dict[str, Any]] = facts.get("stacks") or {}
        no_facts: list[str] = facts.get("no_facts") or []
        findings: list[Finding] = []

        def found(kind: str, level: Status, message: str, fix: str | None = None, node: str | None = None) -> None:
            findings.append(self.finding(kind, level, message, node=node, fix=fix))

        notes = []
        if no_facts:
            notes.append(f"no facts from {_names(no_facts)}: {SOURCE_CHECK} did not run there or failed")
        if facts.get("unreachable"):
            notes.append(f"unreachable, not compared: {_names(facts['unreachable'])}")
        compared = measure("nodes compared", len(stacks), "")
        if len(stacks) < 2:
            reason = "only one node" if len(stacks) == 1 else "no node recorded its stack"
            in_run = len(stacks) + len(no_facts)
            if (expect.nodes and expect.nodes > 1) or in_run > 1:
                # Nothing could be compared: an ERROR, like every cross-node check short of nodes.
                nodes = expect.nodes if expect.nodes and expect.nodes > 1 else in_run
                compared = measure("nodes compared", len(stacks), "", at_least=2)
                found("too-few-stacks", Status.ERROR, f"{nodes} nodes expected, but {reason} to compare "
                      f"({len(stacks)} with facts)")
            else:
                found("single-node", Status.SKIP, reason)
            return outcome_from_findings(findings, [compared], passed="", details=notes)

        differing: list[str] = []
        for name in params.fields:
            recorded = {node: stack for node, stack in stacks.items() if name in stack}
            if not recorded:
                notes.append(f"{name}: recorded by no node, not compared")
                continue
            if len(recorded) < len(stacks):
                missing = [n for n in stacks if n not in recorded]
                notes.append(f"{name}: not recorded on {_names(missing)} (an older preflight there?)")
            problems = compare_field(name, {node: stack[name] for node, stack in recorded.items()})
            if problems:
                differing.append(name)
            for problem in problems:
                node = problem.split(":", 1)[0][len("node "):] if problem.startswith("node ") else None
                # A field the team added to `fields` has no declared fix of its own: it is rebuilt like the rest.
                found(differs_kind(name), Status.FAIL, problem, FIELD_FIXES.get(name, REBUILD), node)
        measurements = [compared, measure("stack fields that differ", len(differing), "", at_most=0)]
        if no_facts and not differing:
            found("no-facts", Status.WARN,
                  f"{len(stacks)} nodes identical in {', '.join(params.fields)}; {len(no_facts)} node(s) without "
                  f"facts were not compared: {_names(no_facts)}",
                  f"Look at {SOURCE_CHECK}'s result on {_names(no_facts)}: it did not record the stack there.")
        reference = next(iter(stacks.values()))
        shown = ", ".join(f"{name} {_shown(reference.get(name))}" for name in ("python", "torch", "nccl", "driver")
                          if name in params.fields)
        return outcome_from_findings(findings, measurements, passed=f"all {len(stacks)} nodes identical ({shown})",
                                     notes=notes)
