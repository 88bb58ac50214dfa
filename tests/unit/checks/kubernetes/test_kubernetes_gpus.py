"""kubernetes.gpus from the facts gpu.visibility recorded on each node and the allocatable count the
API gave: NVML's usable GPUs against allocatable nvidia.com/gpu."""

from __future__ import annotations

from types import SimpleNamespace

from preflight.core.check import Expect
from preflight.core.model import Status
from preflight_checks.kubernetes.gpus import KubernetesGpus

CHECK = KubernetesGpus()


def nvml(*gpus: dict) -> dict:
    return {"gpu.visibility": {"nvml": {"available": True, "device_count": len(gpus), "gpus": list(gpus)}}}


def judge(node_facts: dict, allocatable: dict) -> tuple[dict, object]:
    ctx = SimpleNamespace(nodes=[{"name": n, "allocatable_gpus": a} for n, a in allocatable.items()] + [{"name": "ssh1"}],
                          node_facts=node_facts)
    facts = CHECK.collect(ctx, CHECK.params_from({}))
    return facts, CHECK.evaluate(facts, CHECK.params_from({}), Expect())


def test_a_lost_gpu_nvml_still_lists_does_not_count_against_allocatable():
    healthy = nvml({"index": 0}, {"index": 1})
    lost = nvml({"index": 0}, {"index": 1, "lost": True, "error": "NVMLError_GpuIsLost: GPU is lost"})
    facts, outcome = judge({"a": healthy, "b": lost}, {"a": 2, "b": 2})
    assert facts["nodes"] == {"a": {"allocatable": 2, "nvml": 2}, "b": {"allocatable": 2, "nvml": 1}}
    assert [(f.id, f.node) for f in outcome.findings if f.level is Status.FAIL] == \
        [("kubernetes.gpus.allocatable-mismatch", "b")]


def test_a_node_nvml_could_not_count_warns_and_a_node_without_the_api_is_left_out():
    facts, outcome = judge({"a": {"gpu.visibility": {"nvml": {"available": False}}}}, {"a": 8})
    assert facts["nodes"] == {"a": {"allocatable": 8, "nvml": None}}
    assert [(f.id, f.level) for f in outcome.findings] == [("kubernetes.gpus.not-counted", Status.WARN)]
