"""Record real GPU fixtures on a GPU node: `python tests/data/record_gpu_node.py OUT [--profile NAME]`.

Runs `preflight run` over the GPU checks on this machine, then writes each check's recorded facts
as OUT/fixtures/<check id>.json with a "_source" naming the machine (nvidia-smi -L, driver), the
date and the command, ready to replace a built fixture in tests/data/. Also keeps `nvidia-smi -q`
and, when nccl-tests' all_reduce_perf is on the PATH, its output. Nothing here judges anything.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

GPU_CHECKS = ["gpu.visibility", "collectives.local", "scaling.multi_gpu", "checkpoint.roundtrip",
              "dataloader.throughput"]


def _text(argv: list[str], timeout: float = 600) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"[{argv[0]} failed: {exc}]"
    return proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", default=None, help="e.g. h200-8x: adds its busbw size to the NCCL sweep")
    args = parser.parse_args(argv)
    out = args.out
    (out / "fixtures").mkdir(parents=True, exist_ok=True)
    gpus = _text(["nvidia-smi", "-L"]).strip()
    (out / "nvidia-smi-q.txt").write_text(_text(["nvidia-smi", "-q"]))
    command = [sys.executable, "-m", "preflight", "run", "--checks", ",".join(GPU_CHECKS), "--out", str(out / "run"),
               "--format", "json"] + (["--profile", args.profile] if args.profile else [])
    run = subprocess.run(command, capture_output=True, text=True)
    (out / "run.log").write_text(run.stdout + run.stderr)
    binary = shutil.which("all_reduce_perf")
    if binary:
        (out / "all_reduce_perf.txt").write_text(_text([binary, "-b", "8", "-e", "16G", "-f", "2", "-g",
                                                        str(max(1, gpus.count("GPU "))), "-c", "1"]))
    results = json.loads((out / "run" / "results.json").read_text())
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    for result in results["results"]:
        facts = dict(result.get("facts") or {})
        facts["_source"] = (f"recorded by tests/data/record_gpu_node.py ({' '.join(command[2:])}) on {platform.node()}, "
                            f"{when}: {gpus.replace(chr(10), '; ')}; judged {result['status']} at the time")
        name = f"{result['check_id']}.json"
        (out / "fixtures" / name).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(f"exit {run.returncode}; fixtures in {out / 'fixtures'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
