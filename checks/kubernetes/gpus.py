"""kubernetes.gpus: the GPUs NVML sees on each node against the node's allocatable nvidia.com/gpu.

A node whose GPU fell off the bus (an Xid 79, a failed NVLink) stays Ready, and the NVIDIA device
plugin may keep advertising the old count: the scheduler then places an 8-GPU job on a node that can
run 7. The coordinator knows each node's allocatable count from the API (it is in the node's
transport spec), and gpu.visibility's facts say what NVML counts there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.core.check import Check, Expect, Outcome, measure, outcome_from_findings
from preflight.core.model import Scope, Status
from preflight.engine.context import ClusterContext

SOURCE_CHECK = "gpu.visibility"
SPEC_KEY = "allocatable_gpus"  # set in the spec of nodes that come from the Kubernetes API

FIXES = {
    "allocatable-mismatch": "Drain the node's pods, look for Xid errors (`dmesg | grep -i xid`) and a GPU missing "
                            "from `nvidia-smi -L`; restart the NVIDIA device plugin pod on that node so it "
                            "advertises what is really there, or replace the GPU.",
    "not-counted": "gpu.visibility did not count the GPUs on this node (see its result): fix that first.",
}


@dataclass
class Params:
    pass


class KubernetesGpus(Check):
    id = "kubernetes.gpus"
    title = "GPUs NVML counts match the node's allocatable nvidia.com/gpu"
    scope = Scope.CLUSTER
    tags = ("cluster", "gpu", "kubernetes")
    why = ("The scheduler places GPU jobs by the node's allocatable nvidia.com/gpu; a node that lost a GPU but still "
           "advertises it takes a job that then fails to start or runs short.")
    remediation = (FIXES["allocatable-mismatch"],)
    fixes = FIXES
    Params = Params
    run_after = (SOURCE_CHECK,)
    transports = ("k8s",)
    timeout_s = 30.0
    levels = {"quick": {"timeout": 5}}

    def collect(self, ctx: ClusterContext, params: Params) -> dict[str, Any]:
        nodes = {}
        for spec in ctx.nodes:
            if SPEC_KEY not in spec:
                continue
            nvml = (ctx.node_facts.get(spec["name"], {}).get(SOURCE_CHECK) or {}).get("nvml") or {}
            # A GPU NVML still lists but has lost (NVML_ERROR_GPU_IS_LOST, Xid 79) cannot take a job.
            usable = [g for g in nvml.get("gpus") or [] if not g.get("lost")]
            nodes[spec["name"]] = {"allocatable": spec[SPEC_KEY], "nvml": len(usable) if nvml.get("available") else None}
        return {"nodes": nodes}

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        nodes = facts.get("nodes") or {}
        if not nodes:
            return outcome_from_findings([self.finding("not-applicable", Status.SKIP,
                                                       "no node of this run comes from the Kubernetes API")], passed="")
        findings, measurements = [], []
        for node, seen in sorted(nodes.items()):
            allocatable, nvml = int(seen.get("allocatable") or 0), seen.get("nvml")
            if nvml is None:
                if allocatable:
                    findings.append(self.finding("not-counted", Status.WARN,
                                                 f"{node}: NVML did not count its GPUs; {allocatable} allocatable",
                                                 node=node))
                continue
            measurements.append(measure(f"{node} NVML GPUs", nvml, "GPUs", equals=allocatable, node=node))
            if nvml != allocatable:
                findings.append(self.finding("allocatable-mismatch", Status.FAIL,
                                             f"{node}: NVML counts {nvml} GPUs, the node offers {allocatable} to the "
                                             "scheduler", node=node))
        counted = len(measurements)
        return outcome_from_findings(findings, measurements,
                                     passed=f"NVML's GPU count matches allocatable nvidia.com/gpu on {counted} "
                                            f"node{'s' if counted != 1 else ''}")
