"""Writes the version fixtures next to this file.

    python build_fixtures.py --record   re-records stack_recorded.json from this machine (the real
                                        versions.pinned stack, probes included), then rebuilds the rest
    python build_fixtures.py            rebuilds the cluster fixtures from stack_recorded.json

The cluster fixtures are node_facts as the runner hands them to versions.consistency: the recorded
stack of one real machine, copied to several node names, with the single field each case is about
changed on some nodes (a multi-node cluster was not available to record from). Each file says so in
its "_source" key and names its case in "_case".
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
RECORDED = HERE / "stack_recorded.json"


def record() -> None:
    import platform
    import tempfile

    from preflight.core.check import Expect
    from preflight.engine.context import NodeContext
    from preflight_checks.versions.pinned import collect_stack

    with tempfile.TemporaryDirectory() as scratch:
        ctx = NodeContext(node=platform.node(), output_dir=Path(scratch), scratch_dir=Path(scratch), expect=Expect(),
                          timeout_s=240)
        stack = collect_stack(ctx, probe_timeout_s=120)
    data = {"_source": "Recorded with `python tests/data/versions/build_fixtures.py --record` (versions.pinned "
                       f"collect_stack) on a real machine: {platform.platform()}.", "stack": stack}
    RECORDED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def cluster(nodes: list[str], stack: dict, case: str, changes: dict[str, dict] | None = None,
            without_facts: list[str] | None = None) -> dict:
    node_facts = {}
    for node in nodes:
        if node in (without_facts or []):
            node_facts[node] = {}
            continue
        node_stack = copy.deepcopy(stack)
        node_stack.update((changes or {}).get(node, {}))
        node_facts[node] = {"versions.pinned": {"stack": node_stack}}
    return {
        "_source": "The stack of stack_recorded.json (recorded on a real machine) copied to each node; the fields "
                   "named in _case were changed by hand.",
        "_case": case,
        "nodes": nodes,
        "node_facts": node_facts,
    }


def build() -> None:
    stack = json.loads(RECORDED.read_text(encoding="utf-8"))["stack"]
    three = ["gpu01", "gpu02", "gpu03"]
    four = ["gpu01", "gpu02", "gpu03", "gpu04"]
    files = {
        "cluster_identical_3.json": cluster(three, stack, "three identical nodes"),
        "cluster_torch_differs.json": cluster(three, stack, "gpu03 runs torch 2.4.0 built for CUDA 12.1",
                                              {"gpu03": {"torch": "2.4.0+cu121", "torch_cuda": "12.1"}}),
        "cluster_tie.json": cluster(four, stack, "gpu01 and gpu02 on NCCL 2.21.5, gpu03 and gpu04 on NCCL 2.20.5",
                                    {n: {"nccl": "2.21.5"} for n in ("gpu01", "gpu02")}
                                    | {n: {"nccl": "2.20.5"} for n in ("gpu03", "gpu04")}),
        "cluster_one_without_facts.json": cluster(four, stack, "gpu04 has no versions.pinned facts",
                                                  without_facts=["gpu04"]),
    }
    for name, data in files.items():
        (HERE / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record()
    build()
