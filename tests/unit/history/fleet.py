"""Synthesised fleet runs for the history tests and bench/history_scale.py.

Every result comes from the real check's evaluate() on facts shaped as that check's collect()
records them (the recorded fixtures in tests/data, as tests/data/reports/build_cluster_run.py
uses them), and the report is what the json reporter writes. The figures are synthesised, not
measured: an 8 x H100 node with NCCL all-reduce near 470 GB/s busbw at 1 GiB and host<->device
copies near 55 GB/s, each node jittered by a seeded random factor. `slow` plants nodes that lag
their peers by a factor; `image` changes the software the nodes report (and, with `busbw_factor`,
what the new image does to the all-reduce).
"""

from __future__ import annotations

import copy
import json
import random
import statistics
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
START = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)

IMAGE_A = {"driver": "550.54.15", "nccl": "2.20.5", "torch": "2.4.1", "cuda": "12.4"}
IMAGE_B = {"driver": "550.90.07", "nccl": "2.21.5", "torch": "2.4.1", "cuda": "12.4"}


@lru_cache(maxsize=None)
def check_class(check_id: str) -> Any:
    from preflight.core.registry import discover

    return discover().checks[check_id]


def _facts(relative: str) -> dict[str, Any]:
    facts = json.loads((DATA / relative).read_text())
    facts.pop("_source", None)
    return facts


def spread(value: float, count: int = 5, jitter: float = 0.01) -> list[float]:
    return [value * (1 - jitter + 2 * jitter * i / (count - 1)) for i in range(count)]


def env_facts(node: str, index: int) -> dict[str, Any]:
    facts = _facts("node_environment/healthy_gpu_node.json")
    facts["hostname"], facts["fqdn"] = node, f"{node}.cluster.internal"
    facts["hostname_addresses"] = [f"10.1.{index // 250}.{index % 250 + 2}"]
    return facts


def gpu_facts(image: dict[str, str], factor: float) -> dict[str, Any]:
    facts = copy.deepcopy(_base_gpu())
    facts["nvml"]["driver_version"] = image["driver"]
    facts["torch"]["nccl"] = image["nccl"]
    facts["torch"]["version"] = image["torch"]
    if image.get("gpu_model"):  # another node type: the same GPUs under another name
        for gpu in facts["nvml"]["gpus"]:
            gpu["name"] = image["gpu_model"]
    for device in facts["torch"]["devices"]:
        copies = device["host_device"]
        copies["h2d_gbps_samples"] = [round(v * factor, 2) for v in copies["h2d_gbps_samples"]]
        copies["d2h_gbps_samples"] = [round(v * factor, 2) for v in copies["d2h_gbps_samples"]]
    return facts


@lru_cache(maxsize=1)
def _base_gpu() -> dict[str, Any]:
    return _facts("gpu_visibility/healthy_8x_h100.json")


def stack(image: dict[str, str]) -> dict[str, Any]:
    return {"python": "3.11.9", "torch": image["torch"], "torch_cuda": image["cuda"], "cudnn": "90100",
            "nccl": image["nccl"], "tensorflow": None, "tensorflow_distribution": None, "tensorflow_cuda": None,
            "tensorflow_cudnn": None, "jax": None, "numpy": "1.26.4", "driver": image["driver"],
            "cuda_driver": image["cuda"], "os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-107-generic",
            "glibc": "2.35", "errors": {}}


def collectives_facts(at_1gib: float) -> dict[str, Any]:
    world = 8
    factor = 2 * (world - 1) / world
    peak = at_1gib * ((1 << 30) + (24 << 20)) / (1 << 30)
    sizes = []
    for size in (1 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30):
        time_s = max(size / (peak * size / (size + (24 << 20)) / factor * 1e9), 18e-6)
        times = spread(time_s, 5, 0.01)
        sizes.append({"bytes": size, "time_s": time_s, "time_samples_s": times, "algbw_gbps": size / time_s / 1e9,
                      "busbw_gbps": size / time_s / 1e9 * factor,
                      "algbw_samples_gbps": [size / t / 1e9 for t in times],
                      "busbw_samples_gbps": [size / t / 1e9 * factor for t in times],
                      "known_sum_wrong_by_rank": [0] * world})
    return {"cpu_count": 224, "runs": [{"role": "primary", "backend": "nccl", "device": "cuda", "world_size": world,
                                        "sizes": [s["bytes"] for s in sizes], "ok": True, "error": None,
                                        "result": {"sizes": sizes, "random_check": {"wrong_by_rank": [0] * world}}}],
            "notes": [], "torch_version": "2.4.1", "distributed_available": True, "gpu_count": 8,
            "nccl_available": True, "gloo_available": True, "device_kind": "cuda"}


MIN_BUSBW = 380.0  # the floor the synthesised runs are judged against; a planted slow node stays above it


def fleet_report(nodes: list[str], when: datetime, *, image: dict[str, str] | None = None,
                 slow: dict[str, float] | None = None, busbw_factor: float = 1.0, seed: int = 0,
                 busbw: float = 470.0, images: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """One run over `nodes`, as results.json has it. `slow` maps a node to the factor its figures get."""
    from preflight.core.check import Expect
    from preflight.engine.execute import result_from_outcome
    from preflight.core.model import NodeInfo, RunReport
    from preflight.reporters.json_report import render

    rng = random.Random(seed)
    image = image or IMAGE_A
    slow = slow or {}
    expect = Expect(gpus_per_node=8, nodes=len(nodes), frameworks=["torch"])
    report = RunReport(started_at=when.isoformat(), finished_at=(when + timedelta(minutes=4)).isoformat(),
                       preflight_version="0.1.0", nodes=[NodeInfo(name=n, slots=8, reachable=True) for n in nodes],
                       command="preflight run --nodes hosts.txt", level="standard")
    checks = [("node.environment", {}), ("gpu.visibility", {}), ("versions.pinned", {}),
              ("collectives.local", {"min_busbw_gbps": MIN_BUSBW})]
    report.planned = [c for c, _ in checks]
    for index, node in enumerate(nodes):
        node_image = (images or {}).get(node, image)
        jitter = 1 + rng.gauss(0, 0.006)
        factor = slow.get(node, 1.0) * jitter
        facts_of = {
            "node.environment": env_facts(node, index),
            "gpu.visibility": gpu_facts(node_image, factor),
            "versions.pinned": {"stack": stack(node_image)},
            "collectives.local": collectives_facts(busbw * busbw_factor * factor),
        }
        for check_id, overrides in checks:
            check = check_class(check_id)
            facts = facts_of[check_id]
            outcome = check().evaluate(facts, check.Params(**overrides), expect)
            report.add(result_from_outcome(check, outcome, node=node, facts=facts, duration_s=2.0,
                                           started_at=when.isoformat()))
    return json.loads(render(report))


def node_names(count: int, prefix: str = "gpu") -> list[str]:
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def series_of_runs(nodes: list[str], count: int, *, start: datetime = START, every: timedelta = timedelta(days=1),
                   seed: int = 0, **options: Any) -> list[dict[str, Any]]:
    return [fleet_report(nodes, start + i * every, seed=seed + i, **options) for i in range(count)]


def median_busbw(report: dict[str, Any]) -> float:
    values = [m["value"] for r in report["results"] if r["check_id"] == "collectives.local"
              for m in r["measurements"] if m["name"].endswith("busbw at 1 GiB")]
    return statistics.median(values)
