"""Writes the built GPU fixtures of collectives.local next to this file: `python build_fixtures.py`.

No GPU node was available, so these facts are built, not recorded, and each says so in "_source".
They have the shape collectives.local.collect() records (preflight.workers.allreduce's result: N
back-to-back operations per sample timed between CUDA events, 5 samples per size, the slowest rank's
time) and the text nccl-tests' all_reduce_perf prints (src/common.cu: size, count, type, redop, root,
then time in us, algbw and busbw in GB/s and #wrong, out-of-place and in-place).

The figures come from a latency + size / bandwidth model per node type, with the large-message
bandwidth rising towards what the cited health checks require at their message size (Azure
azurehpc-health-checks: H100 460 GB/s and H200 431 GB/s busbw at 16G, A100 228 GB/s at 4G, all
nccl-tests all_reduce_perf on 8 GPUs): a healthy node sits a few percent above its floor. Spread
is larger for small messages, where a few microseconds of launch jitter matter, than for large ones.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

HERE = Path(__file__).parent
MIB, GIB = 1 << 20, 1 << 30
N = 8
BUS = 2 * (N - 1) / N
ITERS, SAMPLES, WARMUP = 20, 5, 5

# Per node type: small-message latency (us) of nccl-tests and the algbw asymptote (GB/s) at 256 MiB
# and at the profile's size; preflight (torch.distributed) pays a few us more per operation.
NODES = {
    "h100-8x": {"gpu": "NVIDIA H100 80GB HBM3", "latency_us": 17.5, "algbw_256m": 223.0,
                "profile_size": 16 * GIB, "algbw_profile": 277.0, "torch": "2.5.1+cu124", "nccl": "2.21.5"},
    "h200-8x": {"gpu": "NVIDIA H200", "latency_us": 17.0, "algbw_256m": 219.0,
                "profile_size": 16 * GIB, "algbw_profile": 259.0, "torch": "2.5.1+cu124", "nccl": "2.21.5"},
    "a100-8x": {"gpu": "NVIDIA A100-SXM4-80GB", "latency_us": 21.0, "algbw_256m": 121.0,
                "profile_size": 4 * GIB, "algbw_profile": 135.0, "torch": "2.5.1+cu124", "nccl": "2.21.5"},
}
P2P_OFF_ALGBW = 12.4  # NCCL_P2P_DISABLE=1: staged through host memory over PCIe, tens of GB/s busbw
GPU_SIZES = [8, MIB, 32 * MIB, 256 * MIB]


def algbw_limit(node: dict, size: int, p2p_off: bool) -> float:
    if p2p_off:
        return P2P_OFF_ALGBW
    if size <= 256 * MIB:
        return node["algbw_256m"]
    # Between 256 MiB and the profile's size the bandwidth keeps rising (NVLS, fewer protocol switches).
    frac = math.log2(size / (256 * MIB)) / math.log2(node["profile_size"] / (256 * MIB))
    return node["algbw_256m"] + frac * (node["algbw_profile"] - node["algbw_256m"])


def op_time_s(node: dict, size: int, p2p_off: bool, overhead_us: float = 0.0) -> float:
    latency = node["latency_us"] * (2.5 if p2p_off else 1.0) + overhead_us
    return latency * 1e-6 + size / (algbw_limit(node, size, p2p_off) * 1e9)


def spread(size: int) -> float:
    """Relative sample spread: ~6% at 8 B, under 1% from hundreds of MiB up."""
    return 0.006 + 0.055 / (1 + math.log2(max(size, 8)) / 3)


def samples_for(seconds: float, size: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [seconds * (1 + rng.uniform(-1, 1) * spread(size)) for _ in range(SAMPLES)]


def size_entry(size: int, seconds: list[float], world: int = N) -> dict:
    bus = 2 * (world - 1) / world
    t = sorted(seconds)[len(seconds) // 2]
    algbw = [size / s / 1e9 for s in seconds]
    return {"bytes": size, "requested_bytes": size, "ops_per_sample": ITERS // SAMPLES, "time_s": t,
            "time_samples_s": seconds, "algbw_gbps": size / t / 1e9, "busbw_gbps": size / t / 1e9 * bus,
            "algbw_samples_gbps": algbw, "busbw_samples_gbps": [a * bus for a in algbw],
            "known_sum_wrong_by_rank": [0] * world}


def launch(world: int, pid0: int, seconds: float) -> dict:
    return {"world_size": world, "master": "127.0.0.1:45123", "timed_out": False, "timeout_s": 87.5,
            "duration_s": seconds, "ranks": [{"rank": r, "pid": pid0 + r, "returncode": 0, "killed": False,
                                              "duration_s": seconds - 0.1} for r in range(world)]}


def nccl_run(node: dict, sizes: list[int], p2p_off: bool) -> dict:
    entries = [size_entry(s, samples_for(op_time_s(node, s, p2p_off, overhead_us=4.0), s, seed=s % 9973 + p2p_off))
               for s in sizes]
    result = {"backend": "nccl", "device": "cuda", "world_size": N, "torch_version": node["torch"],
              "nccl_version": node["nccl"],
              "members": {str(r): {"host": "gpu01", "pid": 41000 + r, "local_rank": r} for r in range(N)},
              "join_s": 4.1, "init_s": 2.3, "pg_timeout_s": 60.0, "iters": ITERS, "samples": SAMPLES,
              "timing": "cuda_events", "warmup": WARMUP, "sizes": entries,
              "random_check": {"elements": 1 << 20, "seed": 20240601, "wrong_by_rank": [0] * N, "max_abs_error": 0.0}}
    return {"role": "primary", "backend": "nccl", "device": "cuda", "world_size": N, "sizes": sizes,
            "launch": launch(N, 41000, 24.0), "ok": True, "error": None, "missing_ranks": [], "result": result,
            "timeouts_s": {"launch": 87.5, "join": 45.0, "pg": 37.5}}


def gloo_fallback() -> dict:
    # 8 CPU processes of a two-socket server through loopback, timed on the host clock.
    model = {8: 62e-6, MIB: 1.05e-3, 16 * MIB: 13.8e-3}
    entries = [size_entry(s, samples_for(t, s, seed=7 + s % 997)) for s, t in model.items()]
    result = {"backend": "gloo", "device": "cpu", "world_size": N, "torch_version": "2.5.1+cu124", "nccl_version": None,
              "members": {str(r): {"host": "gpu01", "pid": 42000 + r, "local_rank": r} for r in range(N)},
              "join_s": 1.2, "init_s": 0.4, "pg_timeout_s": 60.0, "iters": ITERS, "samples": SAMPLES,
              "timing": "host", "warmup": WARMUP, "sizes": entries,
              "random_check": {"elements": 1 << 20, "seed": 20240601, "wrong_by_rank": [0] * N, "max_abs_error": 0.0}}
    return {"role": "fallback", "backend": "gloo", "device": "cpu", "world_size": N, "sizes": list(model),
            "launch": launch(N, 42000, 9.5), "ok": True, "error": None, "missing_ranks": [], "result": result,
            "timeouts_s": {"launch": 87.5, "join": 45.0, "pg": 37.5}}


def nccl_tests_text(node: dict, max_size: int, p2p_off: bool) -> str:
    """all_reduce_perf -b 8 -e MAX -f 2 -g 8 -n 20 -w 5 -c 1, as nccl-tests 2.13 prints it."""
    lines = [f"# nThread 1 nGpus {N} minBytes 8 maxBytes {max_size} step: 2(factor) warmup iters: {WARMUP} "
             f"iters: {ITERS} agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    bus_ids = ["0x18", "0x2a", "0x3a", "0x5d", "0x9a", "0xab", "0xba", "0xdb"]
    for rank in range(N):
        lines.append(f"#  Rank {rank:2d} Group  0 Pid  51234 on      gpu01 device {rank:2d} [{bus_ids[rank]}] {node['gpu']}")
    lines += ["#",
              "#                                                              out-of-place                       in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    size, busbws = 8, []
    rng = random.Random(13 + p2p_off)
    while size <= max_size:
        cells = []
        for _ in range(2):
            t = op_time_s(node, size, p2p_off) * (1 + rng.uniform(-1, 1) * spread(size) / 2) * 1e6
            algbw = size / t / 1e3
            cells.append((t, algbw, algbw * BUS))
        busbws.append(cells[0][2])
        fmt = lambda t: f"{t:7.2f}" if t < 1e4 else f"{t:7.0f}"  # noqa: E731 - nccl-tests switches format at 10 ms
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  " + "  ".join(
            f"{fmt(t)}  {a:6.2f}  {b:6.2f}  {0:5d}" for t, a, b in cells))
        size *= 2
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ", "#", ""]
    return "\n".join(lines)


def node_facts(name: str, sizes: list[int], p2p_off: bool, source: str) -> dict:
    from preflight_checks.collectives.nccl_tests import argv_for, parse_output

    node = NODES[name]
    text = nccl_tests_text(node, max(sizes), p2p_off)
    argv = argv_for("/usr/local/bin/all_reduce_perf", sizes, N, ITERS, WARMUP)
    return {"_source": source, "cpu_count": 224, "runs": [nccl_run(node, sizes, p2p_off), gloo_fallback()],
            "notes": [], "torch_version": node["torch"], "distributed_available": True, "gpu_count": N,
            "nccl_available": True, "gloo_available": True, "device_kind": "cuda",
            "nccl_tests": {"argv": argv, "returncode": 0, "error": None, **parse_output(text)}}


BUILT = ("built, not measured (tests/data/collectives/build_fixtures.py): {what}, in the shape collectives.local "
         "collect() records (N back-to-back operations per sample between CUDA events) with an nccl-tests "
         "all_reduce_perf table in the format of nccl-tests src/common.cu, both from a latency + size/bandwidth "
         "model sized against Azure azurehpc-health-checks' floor for this node type.")


def fixtures() -> dict[str, dict]:
    out = {
        "gpu_8x_h100_nccl_built.json": node_facts("h100-8x", GPU_SIZES, False, BUILT.format(
            what="an 8x H100 SXM node (NVLink 4 through NVSwitch), default sizes")),
        "gpu_8x_p2p_disabled_built.json": node_facts("h100-8x", GPU_SIZES, True, BUILT.format(
            what="the same 8x H100 node with NCCL_P2P_DISABLE=1 (staged through host memory over PCIe Gen5)")),
    }
    for name, node in NODES.items():
        sizes = sorted(set(GPU_SIZES) | {node["profile_size"]})
        out[f"healthy_{name}_built.json"] = node_facts(name, sizes, False, BUILT.format(
            what=f"a healthy node of type {name} collected with --profile {name} (its busbw size added to the sweep)"))
        out[f"degraded_{name}_built.json"] = node_facts(name, sizes, True, BUILT.format(
            what=f"a node of type {name} with NCCL_P2P_DISABLE=1, collected with --profile {name}"))
    text = nccl_tests_text(NODES["h100-8x"], 256 * MIB, False)
    out["nccl_tests_8x_h100_built.json"] = {
        "_source": "built by hand, not recorded (tests/data/collectives/build_fixtures.py): the text nccl-tests "
                   "2.13 all_reduce_perf prints for `-b 8 -e 256M -f 2 -g 8 -n 20 -w 5 -c 1` on an 8x H100 SXM node, "
                   "in the column layout of nccl-tests src/common.cu, figures from the model above",
        "argv": ["all_reduce_perf", "-b", "8", "-e", "268435456", "-f", "2", "-g", "8", "-n", "20", "-w", "5", "-c", "1"],
        "output": text}
    return out


def main() -> None:
    for name, facts in fixtures().items():
        (HERE / name).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
