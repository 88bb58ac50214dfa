"""What the run was told to expect, held against what it found: the verdict's own reading of
`report.expect` (expect.* of the configuration and the profile) and of the hosts file's `slots=`.

The checks enforce the expectations they concern (gpu.visibility counts GPUs, a collective that ran
on CPU processes while GPUs are expected fails, a cross-node check short of nodes is ERROR), but a
flag can leave those checks out. So the verdict reads the expectations itself, whatever ran:

- expect.nodes = N and fewer than N nodes in the run (or reached): NO-GO, always;
- a node expected to have N GPUs (expect.gpus_per_node, or its hosts-file slots=N) whose PCI bus
  shows fewer NVIDIA GPUs (the facts of the check whose role is the inventory): NO-GO;
- a check that needs a GPU or a framework and declares what it ran on (facts `gpu_count` and
  `device_kind`, as collectives.local, scaling.multi_gpu and canary.training record them; a cross-node
  check's `choice` of device and ranks per node), measured on fewer GPUs than the nodes are expected
  to have (gloo on CPU processes): NO-GO, when the check did not already fail for it.

Each is a derived result (check id `preflight.expect`), like the baseline comparison: weighed by the
verdict and shown by every report, never stored in report.results.
"""

from __future__ import annotations

from typing import Any

from preflight.core.check import ROLE_INVENTORY
from preflight.core.model import CLUSTER_NODE, CheckResult, Finding, RunReport, Scope, Status

EXPECT_CHECK_ID = "preflight.expect"
EXPECT_TITLE = "What the configuration expects"
MEASURED_OK = (Status.PASS, Status.WARN)
FIX_NODES = "list every node in the hosts file (or allocate them all), or lower expect.nodes"
FIX_GPUS = ("run on the GPU nodes this configuration describes, or correct expect.gpus_per_node, the profile "
            "or the hosts file's slots=")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def expected_gpus(report: RunReport, node: str) -> int | None:
    """GPUs this node must have: its hosts-file slots=, else expect.gpus_per_node; None when unstated."""
    slots = next((n.slots for n in report.nodes if n.name == node), None)
    if slots is not None:
        return _count(slots)
    return _count((report.expect or {}).get("gpus_per_node"))


def gpus_used(facts: dict[str, Any] | None) -> int | None:
    """The GPUs (per node) a check says it measured on, or None if it does not say: a node check's
    facts `gpu_count` with `device_kind`, a cross-node check's `choice` (device, nproc_per_node)."""
    facts = facts or {}
    choice = facts.get("choice")
    if isinstance(choice, dict) and "device" in choice:
        if choice["device"] != "cuda":
            return 0
        return choice["nproc_per_node"] if isinstance(choice.get("nproc_per_node"), int) else None
    if "device_kind" not in facts or not isinstance(facts.get("gpu_count"), int):
        return None
    return facts["gpu_count"] if facts["device_kind"] == "cuda" else 0


def gpus_short(check_id: str, facts: dict[str, Any], expected: int | None) -> Finding | None:
    """For a check's own evaluate(): FAIL `<id>.gpus-expected` when it ran on fewer GPUs than expected."""
    used = gpus_used(facts)
    if not expected or used is None or used >= expected:
        return None
    seen = facts.get("gpu_count") or 0
    how = "on CPU processes (gloo)" if used == 0 else f"on {used} GPU{'s' if used != 1 else ''}"
    return Finding(f"{check_id}.gpus-expected", Status.FAIL,
                   f"{expected} GPUs expected on this node, but the framework sees {seen}: measured {how}, which "
                   "says nothing about the GPUs", FIX_GPUS)


def _result(node: str, scope: Scope, findings: list[Finding]) -> CheckResult:
    return CheckResult(EXPECT_CHECK_ID, node, Status.FAIL, "; ".join(f.message for f in findings),
                       title=EXPECT_TITLE, scope=scope, findings=findings,
                       remediation=list(dict.fromkeys(f.fix for f in findings if f.fix)))


def expectation_results(report: RunReport) -> list[CheckResult]:
    """The derived results of the expectations this run does not meet (none when it meets them all)."""
    derived = [r for r in [_nodes_short(report)] if r is not None]
    by_node: dict[str, list[CheckResult]] = {}
    for result in report.results:
        if result.scope is Scope.NODE:
            by_node.setdefault(result.node, []).append(result)
    expected_of = _expected_gpus_by_node(report)
    for node in report.node_names:
        expected = expected_of[node]
        findings = _node_gpu_findings(report, node, expected, by_node.get(node, [])) if expected else []
        if findings:
            derived.append(_result(node, Scope.NODE, findings))
    wanted = [g for g in expected_of.values() if g]
    across = _cluster_without_gpus(report, min(wanted)) if wanted else None
    return derived + ([across] if across is not None else [])


def _nodes_short(report: RunReport) -> CheckResult | None:
    """The derived result for a run with fewer nodes (or nodes reached) than expect.nodes, if it has."""
    wanted_nodes = _count((report.expect or {}).get("nodes"))
    if not wanted_nodes:
        return None
    total = len(report.nodes) or len(report.node_names)
    reached = [n.name for n in report.nodes if n.reachable is not False] if report.nodes else report.node_names
    if total >= wanted_nodes and len(reached) >= wanted_nodes:
        return None
    have = f"{total} node{'s' if total != 1 else ''}" + (f", {len(reached)} reached" if len(reached) < total else "")
    return _result(CLUSTER_NODE, Scope.CLUSTER, [Finding(
        f"{EXPECT_CHECK_ID}.nodes", Status.FAIL,
        f"expect.nodes = {wanted_nodes}, but this run has {have}: a cluster this size was not checked",
        FIX_NODES)])


def _expected_gpus_by_node(report: RunReport) -> dict[str, int | None]:
    """expected_gpus for every node of the run, reading the nodes and the expectations once."""
    slots: dict[str, int | None] = {}
    for info in report.nodes:
        slots.setdefault(info.name, info.slots)  # the first of a name, as expected_gpus finds it
    per_gpu = _count((report.expect or {}).get("gpus_per_node"))
    return {node: _count(slots[node]) if slots.get(node) is not None else per_gpu for node in report.node_names}


def _node_gpu_findings(report: RunReport, node: str, expected: int, mine: list[CheckResult]) -> list[Finding]:
    """What falls short of a node's expected GPUs: its PCI bus, and the node checks measured without them."""
    findings = []
    env = next((r for r in mine if (report.roles or {}).get(r.check_id) == ROLE_INVENTORY), None)
    pci = (env.facts or {}).get("nvidia_gpus") if env is not None else None
    if isinstance(pci, list) and len(pci) < expected:
        findings.append(Finding(f"{EXPECT_CHECK_ID}.gpus", Status.FAIL,
                                f"{node} is expected to have {expected} GPUs, but its PCI bus shows {len(pci)} "
                                "NVIDIA GPU" + ("s" if len(pci) != 1 else ""), FIX_GPUS, node))
    needs = report.needs or {}
    cpu_path = sorted(r.check_id for r in mine if r.status in MEASURED_OK and needs.get(r.check_id)
                      and (gpus_used(r.facts) or 0) < expected and gpus_used(r.facts) is not None)
    if cpu_path:
        findings.append(Finding(f"{EXPECT_CHECK_ID}.measured-without-gpus", Status.FAIL,
                                f"{', '.join(cpu_path)} measured {node} without its {expected} expected GPUs "
                                "(on CPU processes or fewer GPUs): not the figures the expectation is about",
                                FIX_GPUS, node))
    return findings


def _cluster_without_gpus(report: RunReport, fewest: int) -> CheckResult | None:
    """The derived result for cluster checks that measured on fewer GPUs per node than the fewest expected."""
    needs = report.needs or {}
    across = sorted(r.check_id for r in report.results if r.scope is Scope.CLUSTER and r.status in MEASURED_OK
                    and needs.get(r.check_id) and gpus_used(r.facts) is not None
                    and (gpus_used(r.facts) or 0) < fewest)
    if not across:
        return None
    return _result(CLUSTER_NODE, Scope.CLUSTER, [Finding(
        f"{EXPECT_CHECK_ID}.measured-without-gpus", Status.FAIL,
        f"{', '.join(across)} measured across the nodes without the {fewest} GPUs per node expected "
        "(on CPU processes or fewer GPUs): not the figures the expectation is about", FIX_GPUS)])
