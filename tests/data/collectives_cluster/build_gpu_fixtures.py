"""Build the GPU multi-node fixtures of collectives.cluster and scaling.multi_node (no GPU cluster here).

    .venv/bin/python tests/data/collectives_cluster/build_gpu_fixtures.py

The facts have exactly the shape the checks collect (the recorded CPU fixtures next to these are
the real thing); the figures are built, not measured, and every file says so in "_source":
- all-reduce: nccl-tests all_reduce_perf across 8x H100 nodes with one 400 Gbit/s InfiniBand NIC per
  GPU reaches a busbw plateau around 360-380 GB/s from a few hundred MiB; tens of microseconds at 8 B;
- DDP: the reference MLP of scaling.multi_gpu (8 x 4096^2, 4096 samples per GPU) whose 537 MB of
  gradients take about 3 ms to all-reduce across such nodes, mostly hidden behind the backward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCALING = HERE.parent / "scaling_multi_node"
MIB = 1 << 20
GPUS = 8
SOURCE = ("built, not measured: {what}. Facts in the shape collectives.cluster / scaling.multi_node collect them "
          "(see the recorded CPU fixtures); figures from the nccl-tests and DDP behaviour of 8x H100 SXM nodes "
          "with 8 x 400 Gbit/s InfiniBand each (tests/data/collectives_cluster/build_gpu_fixtures.py)")


def probe(index: int) -> dict:
    ip = f"10.10.0.{index}"
    return {
        "hostname": f"gpu{index:02d}", "fqdn": f"gpu{index:02d}.cluster", "python": "/opt/venv/bin/python",
        "hostname_addresses": [ip], "address_resolves_to": [ip], "boot_id": f"5f0c1d7e-0000-4000-8000-00000000{index:04d}",
        "cpus": 224, "interfaces": {"lo": ["127.0.0.1", "::1"], "bond0": [ip]}, "interface": "bond0", "ip": ip,
        "interface_found_by": "address", "free_port": 41000 + index, "torch": "2.5.1+cu124", "distributed": True,
        "gpus": GPUS, "nccl": True, "gloo": True, "nccl_version": "2.21.5", "preflight": "0.1.0",
    }


def allreduce_result(world: int, busbw_by_size: dict[int, float], latency_us: float,
                     wrong_rank: int | None = None) -> dict:
    factor = 2 * (world - 1) / world
    sizes = []
    for size, busbw in sorted(busbw_by_size.items()):
        time_s = latency_us * 1e-6 if size < 1024 else size / (busbw / factor * 1e9)
        samples = [time_s * f for f in (1.0, 1.01, 0.99, 1.02, 0.98)]
        wrong = [0] * world
        if wrong_rank is not None and size == max(busbw_by_size):
            wrong[wrong_rank] = 4096
        sizes.append({
            "bytes": size, "requested_bytes": size, "ops_per_sample": 10 if size < MIB else 1, "time_s": time_s,
            "time_samples_s": samples, "algbw_gbps": size / time_s / 1e9, "busbw_gbps": size / time_s / 1e9 * factor,
            "algbw_samples_gbps": [size / t / 1e9 for t in samples],
            "busbw_samples_gbps": [size / t / 1e9 * factor for t in samples], "known_sum_wrong_by_rank": wrong,
        })
    return {"backend": "nccl", "device": "cuda", "world_size": world, "torch_version": "2.5.1+cu124",
            "nccl_version": "2.21.5", "join_s": 0.4, "init_s": 2.1, "pg_timeout_s": 60.0, "iters": 20, "warmup": 5,
            "sizes": sizes, "random_check": {"elements": 1 << 20, "seed": 20240601, "wrong_by_rank": [0] * world,
                                             "max_abs_error": 0.0}}


def launch_facts(nodes: list[str], result: dict | None, ok: bool = True, **outcome) -> dict:
    agents = {n: {"returncode": 0 if ok else 1, "killed": False, "transport_failure": False, "duration_s": 24.0,
                  "rendezvous": "complete", "group_rank": i, "global_ranks": list(range(i * GPUS, (i + 1) * GPUS)),
                  "pids": {"wrapper": 5000 + i, "torchrun": 5001 + i, "log_dir": "/tmp/preflight-torchrun.Ab12Cd"},
                  "last_error": "", "errors": []} for i, n in enumerate(nodes)}
    host_ip = "10.10.0." + str(int(nodes[0][3:]))
    return {"nodes": nodes, "host": nodes[0], "rdzv_endpoint": f"{host_ip}:41001", "run_id": "preflight-0123456789ab",
            "nproc_per_node": GPUS, "world_size": GPUS * len(nodes),
            "timeouts_s": {"launch": 150.0, "rendezvous": 60.0, "join": 33.3, "pg": 45.0},
            "ok": ok, "result": result, "phase": "done" if ok else outcome.get("phase"), "error": outcome.get("error"),
            "fault_nodes": outcome.get("fault_nodes", []),
            "rank_nodes": {str(r): n for n, a in agents.items() for r in a["global_ranks"]}, "agents": agents}


def cluster_base(count: int) -> tuple[list[str], dict]:
    nodes = [f"gpu{i:02d}" for i in range(1, count + 1)]
    probes = {n: probe(i) for i, n in enumerate(nodes, 1)}
    facts = {
        "nodes": nodes, "unreachable": [], "probes": probes,
        "addresses": {n: n for n in nodes}, "ips": {n: p["ip"] for n, p in probes.items()},
        "hostnames": {n: p["hostname_addresses"] for n, p in probes.items()}, "usable": nodes,
        "choice": {"backend": "nccl", "device": "cuda", "nproc_per_node": GPUS, "notes": [],
                   "sizes": [8, MIB, 32 * MIB, 256 * MIB]},
        "plan": {n: {"python": "/opt/venv/bin/python", "ip": p["ip"], "interface": "bond0",
                     "env": {"GLOO_SOCKET_IFNAME": "bond0", "LOGLEVEL": "INFO"}} for n, p in probes.items()},
    }
    return nodes, facts


HEALTHY = {8: 0.0, MIB: 42.0, 32 * MIB: 255.0, 256 * MIB: 368.0}


def collectives_fixtures() -> None:
    nodes, facts = cluster_base(2)
    facts["run"] = launch_facts(nodes, allreduce_result(16, HEALTHY, 38.0))
    save(HERE / "gpu_2nodes_8x_h100_nccl_built.json", {
        "_source": SOURCE.format(what="two healthy 8x H100 nodes, NCCL over InfiniBand"), "_params": {}, **facts})

    nodes, facts = cluster_base(2)
    facts["run"] = launch_facts(nodes, allreduce_result(16, HEALTHY, 38.0, wrong_rank=11))
    save(HERE / "gpu_2nodes_wrong_sums_built.json", {
        "_source": SOURCE.format(what="two nodes whose all-reduce returns 4096 wrong elements on global rank 11 "
                                      "(a GPU of gpu02) at 256 MiB"), "_params": {}, **facts})

    # Four nodes, gpu03's NICs negotiated a quarter of their speed: every pair with it is slow.
    slow = {8: 0.0, MIB: 20.0, 32 * MIB: 80.0, 256 * MIB: 92.0}
    nodes, facts = cluster_base(4)
    facts["run"] = launch_facts(nodes, allreduce_result(32, slow, 41.0))
    pairs = []
    for a, b in (("gpu01", "gpu04"), ("gpu02", "gpu03"), ("gpu01", "gpu03"), ("gpu04", "gpu02"),
                 ("gpu01", "gpu02"), ("gpu03", "gpu04")):
        busbw = 90.0 if "gpu03" in (a, b) else 371.0
        pairs.append(pair(a, b, busbw, min_busbw=300.0))
    facts["pairwise"] = {"reason": "busbw 92.00 GB/s below 300", "rounds": [[["gpu01", "gpu04"], ["gpu02", "gpu03"]],
                         [["gpu01", "gpu03"], ["gpu04", "gpu02"]], [["gpu01", "gpu02"], ["gpu03", "gpu04"]]],
                         "pairs": pairs, "not_run": [], "budget_s": 120.0}
    save(HERE / "gpu_4nodes_gpu03_slow_built.json", {
        "_source": SOURCE.format(what="four nodes, gpu03's links at a quarter of their speed; min_busbw_gbps 300"),
        "_params": {"min_busbw_gbps": 300.0}, **facts})

    # Four nodes, only the link between gpu01 and gpu02 is slow (a bad cable on one rail).
    nodes, facts = cluster_base(4)
    facts["run"] = launch_facts(nodes, allreduce_result(32, {8: 0.0, MIB: 30.0, 32 * MIB: 150.0, 256 * MIB: 181.0}, 39.0))
    pairs = [pair(a, b, 120.0 if {a, b} == {"gpu01", "gpu02"} else 369.0, min_busbw=300.0)
             for a, b in (("gpu01", "gpu04"), ("gpu02", "gpu03"), ("gpu01", "gpu03"), ("gpu04", "gpu02"),
                          ("gpu01", "gpu02"), ("gpu03", "gpu04"))]
    facts["pairwise"] = {"reason": "busbw 181.00 GB/s below 300", "rounds": [], "pairs": pairs, "not_run": [],
                         "budget_s": 120.0}
    save(HERE / "gpu_4nodes_pair_slow_built.json", {
        "_source": SOURCE.format(what="four nodes, only the path between gpu01 and gpu02 slow; min_busbw_gbps 300"),
        "_params": {"min_busbw_gbps": 300.0}, **facts})


def pair(a: str, b: str, busbw: float, min_busbw: float) -> dict:
    good = busbw >= min_busbw
    return {"nodes": [a, b], "state": "good" if good else "bad",
            "problems": [] if good else [f"busbw {busbw:.2f} GB/s below {min_busbw:g}"],
            "latency_us": 31.0, "busbw_gbps": busbw, "largest_bytes": 256 * MIB, "smallest_bytes": 8, "wrong": 0,
            "busbw_samples_gbps": [busbw * f for f in (1.0, 0.99, 1.01)]}


def ddp_result(world: int, step_s: float, compute_s: float) -> dict:
    return {"backend": "nccl", "device": "cuda", "world_size": world, "threads_per_rank": 1, "batch_per_device": 4096,
            "model": "reference MLP: 8 x Linear(4096, 4096) + GELU", "parameters": 134250496,
            "gradient_bytes": 537001984, "steps": 10, "warmup": 3, "step_s": step_s,
            "step_samples_s": [step_s * f for f in (1.0, 1.004, 0.997, 1.002, 0.999, 1.001, 0.998, 1.003, 1.0, 0.996)],
            "compute_s": compute_s, "compute_samples_s": [compute_s * f for f in (1.0, 1.002, 0.999, 1.001, 0.998,
                                                                                  1.0, 1.003, 0.997, 1.0, 1.001)],
            "samples_per_s": world * 4096 / step_s, "torch_version": "2.5.1+cu124"}


def scaling_fixtures() -> None:
    for name, step_all, what in (
            ("gpu_4nodes_8x_h100_built.json", 0.01605,
             "4 healthy nodes: 537 MB of gradients across InfiniBand add about 0.6 ms of exposed communication"),
            ("gpu_4nodes_slow_fabric_built.json", 0.0195,
             "4 nodes whose inter-node all-reduce runs at half speed (one rail of two down): 4 ms more exposed")):
        nodes, facts = cluster_base(4)
        facts.pop("choice")
        facts["choice"] = {"backend": "nccl", "device": "cuda", "nproc_per_node": GPUS, "notes": []}
        facts["baseline"] = "gpu01"
        facts["model"] = {"hidden": 4096, "layers": 8, "batch": 4096, "workload": None,
                          "source": "what scaling.multi_gpu ran on the baseline node in this run"}
        facts["per_node"] = {n: {"samples_per_s": 2126046.0 * f, "devices": 8, "device_kind": "cuda",
                                 "model": {"hidden": 4096, "layers": 8, "batch": 4096, "workload": None}}
                             for n, f in zip(nodes, (1.0, 0.998, 1.003, 0.996))}
        facts["one_node"] = launch_facts(["gpu01"], ddp_result(8, 0.015413, 0.014182))
        facts["all_nodes"] = launch_facts(nodes, ddp_result(32, step_all, 0.01421))
        save(SCALING / name, {"_source": SOURCE.format(what=what), "_params": {}, **facts})


def save(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")
    print("wrote", path.name)


if __name__ == "__main__":
    collectives_fixtures()
    scaling_fixtures()
