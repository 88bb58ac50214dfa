"""Build cluster_run.json: a synthesised 3-node run report with data for every chart.

    python tests/data/reports/build_cluster_run.py

Every result comes from the real check's evaluate() on facts shaped as that check's collect()
records them; the facts are synthesised, not measured: figures typical of an 8 x H100 node on a
100 GbE network (scaling of a ResNet-50-sized step, a loader that falls short on one node, a link
that carries 4.2 Gbit/s, a slow checkpoint writer). Re-run it after changing a check's evaluate(),
and look at the diff of the JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from preflight.core.check import Expect  # noqa: E402
from preflight.engine.execute import result_from_outcome  # noqa: E402
from preflight.engine.head import record_declarations  # noqa: E402
from preflight.core.model import NodeInfo, RunReport  # noqa: E402
import preflight_checks.checkpoint.roundtrip as checkpoint_roundtrip  # noqa: E402
import preflight_checks.collectives.local as collectives_local  # noqa: E402
import preflight_checks.dataloader.throughput as dataloader_throughput  # noqa: E402
import preflight_checks.gpu.visibility as gpu_visibility  # noqa: E402
import preflight_checks.net.bandwidth as net_bandwidth  # noqa: E402
import preflight_checks.node.environment as node_environment  # noqa: E402
import preflight_checks.scaling.multi_gpu as scaling_multi_gpu  # noqa: E402
import preflight_checks.versions.pinned as versions_pinned  # noqa: E402

NODES = ["gpu01", "gpu02", "gpu03"]
EXPECT = Expect(gpus_per_node=8, nodes=3, frameworks=["torch"])
SOURCE = ("synthesised by tests/data/reports/build_cluster_run.py: facts shaped as each check records them, "
          "figures typical of an 8 x H100 node on 100 GbE; not measured")
MB = 1_000_000

# samples/s at 1, 2, 4, 8 GPUs per node: gpu01 scales to 86%, gpu03 to 91%.
SCALING = {"gpu01": [2900, 5690, 11020, 20010], "gpu02": [2910, 5730, 11180, 20480],
           "gpu03": [2890, 5760, 11300, 21040]}
# The loader on gpu02 reads from a slow volume: 70% of what its GPUs consume.
LOADER = {"gpu01": 30420.0, "gpu02": 14336.0, "gpu03": 26050.0}
# torch.save (write, read) and DCP (write, read) GB/s; gpu03 writes below 1 GB/s.
CHECKPOINT = {"gpu01": ((2.21, 3.52), (2.84, 4.11)), "gpu02": ((2.05, 3.38), (2.77, 3.96)),
              "gpu03": ((0.62, 3.21), (0.81, 3.70))}
# Gbit/s, sender -> receiver; gpu02 -> gpu03 is the bad link.
LINKS = {("gpu01", "gpu02"): [93.1, 94.0, 93.6], ("gpu02", "gpu01"): [92.8, 93.9, 93.5],
         ("gpu01", "gpu03"): [92.2, 93.4, 93.0], ("gpu03", "gpu01"): [61.0, 93.1, 94.2],
         ("gpu02", "gpu03"): [4.1, 4.2, 4.3], ("gpu03", "gpu02"): [91.7, 93.2, 92.9]}


def spread_samples(value: float, count: int = 5, jitter: float = 0.02) -> list[float]:
    """`count` figures spread evenly over value ± jitter; their median is value."""
    return [value * (1 - jitter + 2 * jitter * i / (count - 1)) for i in range(count)]


def node_environment_facts(node: str) -> dict:
    facts = json.loads((ROOT / "tests/data/node_environment/healthy_gpu_node.json").read_text())
    facts.pop("_source", None)
    facts["hostname"], facts["fqdn"] = node, f"{node}.cluster.internal"
    facts["hostname_addresses"] = [f"10.1.0.{11 + NODES.index(node)}"]
    return facts


def gpu_facts() -> dict:
    facts = json.loads((ROOT / "tests/data/gpu_visibility/healthy_8x_h100.json").read_text())
    facts.pop("_source", None)
    return facts


def stack() -> dict:
    return {"python": "3.11.9", "torch": "2.4.1", "torch_cuda": "12.4", "cudnn": "90100", "nccl": "2.20.5",
            "tensorflow": None, "tensorflow_distribution": None, "tensorflow_cuda": None, "tensorflow_cudnn": None,
            "jax": None, "numpy": "1.26.4", "driver": "550.54.15", "cuda_driver": "12.4",
            "os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-107-generic", "glibc": "2.35", "errors": {}}


def scaling_facts(node: str) -> dict:
    batch = 256
    runs = []
    for n, rate in zip((1, 2, 4, 8), SCALING[node]):
        step = n * batch / rate
        full = spread_samples(step, 5, 0.03)
        compute = spread_samples(step * (0.97 if n > 1 else 1.0), 5, 0.02)
        runs.append({"devices": n, "ok": True, "error": None, "result": {
            "backend": "nccl", "device": "cuda", "world_size": n, "batch_per_device": batch,
            "step_s": statistics.median(full), "step_samples_s": full, "compute_s": statistics.median(compute),
            "compute_samples_s": compute, "samples_per_s": rate}})
    points = [{"devices": r["devices"], "samples_per_s": r["result"]["samples_per_s"], "step_s": r["result"]["step_s"],
               "compute_s": r["result"]["compute_s"]} for r in runs]
    table = scaling_multi_gpu.scaling_table(points)
    return {"cpu_count": 224, "torch_version": "2.4.1", "gpu_count": 8, "device_kind": "cuda", "backend": "nccl",
            "threads_per_rank": 1, "device_counts": [1, 2, 4, 8],
            "model": {"hidden": 4096, "layers": 8, "batch": batch, "workload": None}, "torch": runs, "table": table,
            "training_samples_per_s": table[-1]["samples_per_s"], "training_devices": 8,
            "tensorflow": {"skipped": "tensorflow is not installed"}}


def loader_facts(node: str) -> dict:
    rates = spread_samples(LOADER[node], 3, 0.03)
    passes = [{"pass": i + 1, "samples": 20000, "bytes": 20000 * 110_000, "seconds": 20000 / r, "warmup_batches": 4,
               "cache_dropped": True} for i, r in enumerate(rates)]
    return {"source": "files", "path": "/datasets/imagenet/train", "glob": "**/*.JPEG", "dataset": None,
            "cpu_count": 224, "num_workers": 16, "batch_size": 256,
            "frameworks": {"torch": True, "tensorflow": False},
            "demand": {"samples_per_s": float(SCALING[node][-1]),
                       "source": "scaling.multi_gpu (training throughput measured on this node)"},
            "files": {"count": 1281167, "total_bytes": 140_928_370_000, "median_bytes": 110_000, "p10_bytes": 52_000,
                      "p90_bytes": 190_000, "truncated": False, "list_seconds": 41.2},
            "synthetic": None,
            "torch": {"version": "2.4.1", "num_workers": 16, "passes": passes, "samples_per_s_samples": rates,
                      "mb_per_s_samples": [r * 110_000 / MB for r in rates],
                      "samples_per_s": statistics.median(rates),
                      "mb_per_s": statistics.median(rates) * 110_000 / MB},
            "tensorflow": None}


def checkpoint_facts(node: str) -> dict:
    (save_w, save_r), (dcp_w, dcp_r) = CHECKPOINT[node]
    size = 2_147_483_648

    def fmt(write: float, read: float) -> dict:
        return {"bytes": size, "leaves_compared": 715, "mismatches": [],
                "write_gbps_samples": spread_samples(write, 3, 0.04), "read_gbps_samples": spread_samples(read, 3, 0.04),
                "cache_dropped": True}

    return {"dir": "/lustre/ckpt/preflight", "dir_is_scratch": False,
            "frameworks": {"torch": "2.4.1", "tensorflow": None}, "size_mb": 2048, "fs_type": "lustre",
            "free_bytes": 412_000_000_000_000, "needed_bytes": 4_400_000_000, "device": "cuda",
            "torch": {"tensors": 41, "tensor_bytes": size, "formats": {"torch.save": fmt(save_w, save_r),
                                                                       "dcp": fmt(dcp_w, dcp_r)}},
            "resume": {"steps": 40, "save_every": 10, "kill_after_step": 25, "device": "cuda", "drop_rng_state": False,
                       "killed_returncode": -9, "last_checkpoint_before_kill": 20, "resumed_from_step": 20,
                       "parameters_compared": 4, "parameter_mismatches": [], "optimizer_mismatches": [],
                       "max_abs_difference": 0.0, "exact": True},
            "left_behind": []}


def collectives_facts(node: str) -> dict:
    world = 8
    factor = 2 * (world - 1) / world
    sizes = []
    at_1gib = {"gpu01": 472.0, "gpu02": 468.0, "gpu03": 441.0}[node]
    peak = at_1gib * ((1 << 30) + (24 << 20)) / (1 << 30)
    for size in (1 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30):
        # Half the peak bus bandwidth at 24 MiB, and no message faster than 18 us.
        time_s = max(size / (peak * size / (size + (24 << 20)) / factor * 1e9), 18e-6)
        busbw = size / time_s / 1e9 * factor
        times = spread_samples(time_s, 5, 0.02)
        sizes.append({"bytes": size, "time_s": time_s, "time_samples_s": times,
                      "algbw_gbps": size / time_s / 1e9, "busbw_gbps": busbw,
                      "algbw_samples_gbps": [size / t / 1e9 for t in times],
                      "busbw_samples_gbps": [size / t / 1e9 * factor for t in times],
                      "known_sum_wrong_by_rank": [0] * world})
    return {"cpu_count": 224, "runs": [{"role": "primary", "backend": "nccl", "device": "cuda", "world_size": world,
                                        "sizes": [s["bytes"] for s in sizes], "ok": True, "error": None,
                                        "result": {"sizes": sizes, "random_check": {"wrong_by_rank": [0] * world}}}],
            "notes": [], "torch_version": "2.4.1", "distributed_available": True, "gpu_count": 8,
            "nccl_available": True, "gloo_available": True, "device_kind": "cuda"}


def net_facts() -> dict:
    addresses = {n: f"10.1.0.{11 + i}" for i, n in enumerate(NODES)}
    probe = {n: {"iperf3": "/usr/bin/iperf3", "version": "iperf 3.12 (cJSON 1.7.15)", "forceflush": True,
                 "own_address_bindable": True,
                 "targets": {addresses[m]: {"local": False, "why": None, "addresses": [addresses[m]], "error": None,
                                            "route": {"dst": addresses[m], "dev": "bond0", "prefsrc": addresses[n]}}
                             for m in NODES if m != n}} for n in NODES}
    links = []
    matrix: dict = {n: {} for n in NODES}
    for (src, dst), values in LINKS.items():
        samples = [{"per_process_gbps": [v / 4] * 4, "connected": [[addresses[src], addresses[dst]]], "gbps": v}
                   for v in values]
        links.append({"src": src, "dst": dst, "dst_address": addresses[dst], "local": False, "why_local": None,
                      "route": probe[src]["targets"][addresses[dst]]["route"], "samples": samples})
        matrix[src][dst] = round(statistics.median(values), 3)
    return {"pattern": "full", "nodes": NODES, "unreachable": [], "addresses": addresses, "streams": 4,
            "duration_s": 5, "repeats": 3, "probe": probe, "links": links,
            "rounds": [[list(pair)] for pair in LINKS], "matrix_gbps": matrix}


def build() -> RunReport:
    report = RunReport(started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:14:32+00:00",
                       preflight_version="0.1.0", nodes=[NodeInfo(name=n, address=f"10.1.0.{11 + i}", slots=8,
                                                                  reachable=True) for i, n in enumerate(NODES)],
                       fail_on="fail", command="preflight run --nodes hosts.txt --config preflight.toml",
                       config_path="preflight.toml")
    node_checks = [
        (node_environment.NodeEnvironment, node_environment_facts, None),
        (gpu_visibility.GpuVisibility, lambda node: gpu_facts(), None),
        (versions_pinned.VersionsPinned, lambda node: {"stack": stack()}, None),
        (scaling_multi_gpu.ScalingMultiGpu, scaling_facts, None),
        (dataloader_throughput.DataloaderThroughput, loader_facts, None),
        (checkpoint_roundtrip.CheckpointRoundtrip, checkpoint_facts, None),
        (collectives_local.CollectivesLocal, collectives_facts, {"min_busbw_gbps": 460.0}),
    ]
    minute = 0
    for check, facts_for, overrides in node_checks:
        report.planned.append(check.id)
        params = check.Params(**(overrides or {}))
        for node in NODES:
            facts = facts_for(node)
            outcome = check().evaluate(facts, params, EXPECT)
            result = result_from_outcome(check, outcome, node=node, facts=facts, duration_s=12.5 + minute,
                                         started_at=f"2026-11-29T10:{minute:02d}:00+00:00")
            report.add(result)
        minute += 1
    report.planned.append(net_bandwidth.NetBandwidth.id)
    report.cluster_checks.append(net_bandwidth.NetBandwidth.id)
    facts = net_facts()
    outcome = net_bandwidth.NetBandwidth().evaluate(facts, net_bandwidth.Params(), EXPECT)
    result = result_from_outcome(net_bandwidth.NetBandwidth, outcome, node="cluster", facts=facts,
                                 duration_s=96.0, started_at="2026-11-29T10:12:50+00:00")
    report.add(result)
    # What the checks declare, recorded as a run records it (preflight.run.plan).
    record_declarations(report, [check for check, _, _ in node_checks] + [net_bandwidth.NetBandwidth])
    return report


def main() -> None:
    data = build().to_dict()
    data = {"_source": SOURCE, **data}
    (HERE / "cluster_run.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {HERE / 'cluster_run.json'}")


if __name__ == "__main__":
    main()


def ring_net_facts(names: list[str]) -> dict:
    """net.bandwidth's facts for the ring of `names` (each node to the next), links from LINKS."""
    addresses = {n: f"10.1.{i // 250}.{i % 250 + 1}" for i, n in enumerate(names)}
    after = dict(zip(names, names[1:] + names[:1]))
    probe = {n: {"iperf3": "/usr/bin/iperf3", "version": "iperf 3.12 (cJSON 1.7.15)", "forceflush": True,
                 "own_address_bindable": True,
                 "targets": {addresses[after[n]]: {"local": False, "why": None, "addresses": [addresses[after[n]]],
                                                   "error": None, "route": {"dst": addresses[after[n]], "dev": "bond0",
                                                                            "prefsrc": addresses[n]}}}}
             for n in names}
    links, matrix = [], {n: {} for n in names}
    for (src, dst), values in LINKS.items():
        samples = [{"per_process_gbps": [v / 4] * 4, "connected": [[addresses[src], addresses[dst]]], "gbps": v}
                   for v in values]
        links.append({"src": src, "dst": dst, "dst_address": addresses[dst], "local": False, "why_local": None,
                      "route": probe[src]["targets"][addresses[dst]]["route"], "samples": samples})
        matrix[src][dst] = round(statistics.median(values), 3)
    return {"pattern": "ring", "nodes": names, "unreachable": [], "addresses": addresses, "streams": 4,
            "duration_s": 5, "repeats": 3, "probe": probe, "links": links,
            "rounds": [[pair] for pair in ([a, b] for a, b in LINKS)], "matrix_gbps": matrix}


def build_large(count: int = 1000) -> RunReport:
    """A run of `count` nodes, every result from the real evaluate() on synthesised facts: most nodes
    are gpu01 of the 3-node run, every 97th writes checkpoints slowly like gpu03, node 17 has gpu02's
    slow loader; net.bandwidth measures the ring of links, one of them slow. Facts are not measured."""
    global NODES, LINKS
    names = [f"gpu{i:04d}" for i in range(1, count + 1)]
    template = {name: "gpu02" if i == 17 else "gpu03" if i % 97 == 0 else "gpu01" for i, name in enumerate(names, 1)}
    saved = NODES, LINKS, dict(SCALING), dict(LOADER), dict(CHECKPOINT)
    try:
        for table in (SCALING, LOADER, CHECKPOINT):
            for name in names:
                table[name] = table[template[name]]
        NODES = names
        LINKS = {(a, b): ([4.1, 4.2, 4.3] if i == 500 else [93.1 - (i % 7) * 0.3, 94.0, 93.6])
                 for i, (a, b) in enumerate(zip(names, names[1:] + names[:1]))}
        report = RunReport(started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:31:12+00:00",
                           preflight_version="0.1.0",
                           nodes=[NodeInfo(name=n, address=f"10.1.{i // 250}.{i % 250 + 1}", slots=8, reachable=True)
                                  for i, n in enumerate(names)],
                           fail_on="fail", command="preflight run --slurm", config_path="preflight.toml")
        expect = Expect(gpus_per_node=8, nodes=count, frameworks=["torch"])
        checks = [(node_environment.NodeEnvironment, node_environment_facts, None),
                  (gpu_visibility.GpuVisibility, lambda node: gpu_facts(), None),
                  (versions_pinned.VersionsPinned, lambda node: {"stack": stack()}, None),
                  (scaling_multi_gpu.ScalingMultiGpu, scaling_facts, None),
                  (dataloader_throughput.DataloaderThroughput, loader_facts, None),
                  (checkpoint_roundtrip.CheckpointRoundtrip, checkpoint_facts, None),
                  (collectives_local.CollectivesLocal, lambda node: collectives_facts(template[node]),
                   {"min_busbw_gbps": 460.0})]
        for check, facts_for, overrides in checks:
            report.planned.append(check.id)
            params = check.Params(**(overrides or {}))
            outcomes: dict[str, Any] = {}
            for node in names:
                facts = facts_for(node)
                key = template[node]
                if key not in outcomes or check is node_environment.NodeEnvironment:
                    outcomes[key] = check().evaluate(facts, params, expect)
                report.add(result_from_outcome(check, outcomes[key], node=node, facts=facts, duration_s=12.5,
                                               started_at="2026-11-29T10:01:00+00:00"))
        report.planned.append(net_bandwidth.NetBandwidth.id)
        report.cluster_checks.append(net_bandwidth.NetBandwidth.id)
        facts = ring_net_facts(names)
        outcome = net_bandwidth.NetBandwidth().evaluate(facts, net_bandwidth.Params(pattern="ring"), expect)
        report.add(result_from_outcome(net_bandwidth.NetBandwidth, outcome, node="cluster", facts=facts,
                                       duration_s=310.0, started_at="2026-11-29T10:25:00+00:00"))
        return report
    finally:
        NODES, LINKS = saved[0], saved[1]
        for table, old in zip((SCALING, LOADER, CHECKPOINT), saved[2:]):
            table.clear()
            table.update(old)
