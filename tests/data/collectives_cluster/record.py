"""Record real facts of collectives.cluster and scaling.multi_node for the unit tests.

    .venv/bin/python tests/data/collectives_cluster/record.py          # two local nodes only
    sudo .venv/bin/python tests/data/collectives_cluster/record.py     # and the namespace test bed

Writes tests/data/collectives_cluster/*.json and tests/data/scaling_multi_node/*.json: what the
checks really collected (real torchrun, gloo, ssh), with the parameters they ran under in
"_params", and raw torchrun output (what `summarize_agent` parses) in torchrun_*.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import preflight.launch.torchrun as launcher  # noqa: E402
import preflight_checks.collectives.cluster as cc  # noqa: E402
from preflight.core.check import Expect  # noqa: E402
from preflight.engine.context import ClusterContext
from preflight.engine.execute import execute  # noqa: E402
from preflight.transport.local import LocalTransport  # noqa: E402
from preflight_checks.scaling.multi_node import ScalingMultiNode  # noqa: E402
from preflight.engine import faults  # noqa: E402
from tests.cluster.testbed import TestBed, unavailable_reason  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALING = HERE.parent / "scaling_multi_node"
SMALL = {"iters": 10, "warmup": 3, "check_elements": 65536}

raw_outputs: list[dict] = []
_summarize = launcher.summarize_agent


def _keep_raw(stdout_lines, stderr_text, returncode, killed, duration_s, transport_failure=False):
    raw_outputs.append({"stdout_lines": list(stdout_lines), "stderr_text": stderr_text, "returncode": returncode,
                        "killed": killed, "duration_s": round(duration_s, 2), "transport_failure": transport_failure})
    return _summarize(stdout_lines, stderr_text, returncode, killed, duration_s, transport_failure)


launcher.summarize_agent = _keep_raw


def run(check, specs, params: dict, source: str, timeout_s: float = 150, expect: Expect | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp())
    expect = expect or Expect(nodes=len(specs))
    ctx = ClusterContext(nodes=specs, output_dir=tmp, scratch_dir=tmp, expect=expect, timeout_s=timeout_s)
    # "inject_absent_node" and the like are faults (preflight.engine.faults), set through the environment.
    injected = {k[len("inject_"):]: v for k, v in params.items() if k.startswith("inject_")}
    os.environ[faults.ENV] = faults.env_value({check.id: injected})
    try:
        result = execute(check, ctx, check.params_from({k: v for k, v in params.items()
                                                        if not k.startswith("inject_")}), expect, node="cluster")
    finally:
        os.environ.pop(faults.ENV, None)
    print(f"{check.id}: {result.status.value} {result.summary}")
    return {"_source": source, "_params": {k: v for k, v in params.items() if not k.startswith("inject_")},
            "_faults": injected, **result.facts}


def save(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print("wrote", path.relative_to(ROOT))


def save_raw(name: str, source: str, pick) -> None:
    chosen = next((r for r in reversed(raw_outputs) if pick(r)), None)
    if chosen is None:
        print("no torchrun output for", name)
        return
    save(HERE / name, {"_source": source, **chosen})


def local_specs(*names: str) -> list[dict]:
    return [LocalTransport(name).to_spec() for name in names]


def record_local() -> None:
    source = "recorded: two LocalTransport nodes (alpha, beta) at 127.0.0.1 on one CPU machine, real torchrun and gloo"
    check = cc.CollectivesCluster()
    save(HERE / "local_2nodes_pass.json", run(check, local_specs("alpha", "beta"), SMALL, source))
    save_raw("torchrun_rendezvous_complete.json", source, lambda r: "Rendezvous complete" in r["stderr_text"]
             and r["returncode"] == 0)
    absent = {**SMALL, "inject_absent_node": "beta", "rdzv_timeout_s": 8}
    save(HERE / "local_absent_node.json", run(check, local_specs("alpha", "beta"), absent,
                                              source + "; beta's torchrun replaced by a process that never joins",
                                              timeout_s=60))
    save_raw("torchrun_rendezvous_timeout.json", source, lambda r: "RendezvousTimeoutError" in r["stderr_text"])
    host_absent = {**SMALL, "inject_absent_node": "alpha", "rdzv_timeout_s": 8}
    save(HERE / "local_absent_host.json", run(check, local_specs("alpha", "beta"), host_absent,
                                              source + "; the rendezvous host alpha never joins", timeout_s=60))
    save_raw("torchrun_rendezvous_unreachable.json", source, lambda r: "RendezvousConnectionError" in r["stderr_text"])
    rank = {**SMALL, "inject_absent_rank": 1, "join_timeout_s": 5}
    save(HERE / "local_absent_rank.json", run(check, local_specs("alpha", "beta"), rank,
                                              source + "; global rank 1 never reports in", timeout_s=60))
    save_raw("torchrun_worker_failed.json", source, lambda r: "ChildFailedError" in r["stderr_text"])

    scaling = ScalingMultiNode()
    save(SCALING / "local_2nodes.json", run(scaling, local_specs("node1", "node2"), {"steps": 5, "warmup": 2},
                                            source.replace("(alpha, beta)", "(node1, node2)")))


def record_testbed() -> None:
    source = ("recorded on the network-namespace test bed: 3 nodes over ssh sharing one 2-core machine, host name "
              "'vm' resolving to 127.0.0.1 in every namespace")
    check = cc.CollectivesCluster()
    with TestBed(3) as bed:
        specs = [bed.transport(n.index, name=n.name).to_spec() for n in bed.nodes]
        save(HERE / "testbed_3nodes_pass.json", run(check, specs, SMALL, source))
        save(SCALING / "testbed_3nodes.json", run(ScalingMultiNode(), specs, {"steps": 5, "warmup": 2}, source))
        absent = {**SMALL, "inject_absent_node": "n3", "rdzv_timeout_s": 8}

        def host_lost(r):
            return "RendezvousConnectionError" in r["stderr_text"] and "trying to connect to" not in r["stderr_text"]

        # How n2 sees the host give up on n3 depends on timing (its own timeout, the rendezvous
        # closed, or the store gone): a few tries catch the last, which must not blame n2.
        for _ in range(4):
            facts = run(check, specs, absent, source + "; n3's torchrun replaced by a process that never joins",
                        timeout_s=60)
            if any(host_lost(r) for r in raw_outputs[-3:]):
                break
        save(HERE / "testbed_absent_node.json", facts)
        save_raw("torchrun_rendezvous_host_lost.json", source + "; n2 waiting while the host n1 gave up on n3", host_lost)
        save_raw("torchrun_rendezvous_closed.json", source + "; n2 waiting while the host n1 gave up on n3",
                 lambda r: "RendezvousClosedError" in r["stderr_text"])
    with TestBed(3, rates={2: "200mbit"}) as bed:
        specs = [bed.transport(n.index, name=n.name).to_spec() for n in bed.nodes]
        slow = {"iters": 5, "warmup": 2, "check_elements": 65536, "sizes_bytes": [8, 1 << 20], "min_busbw_gbps": 0.1}
        save(HERE / "testbed_n2_shaped_pairwise.json",
             run(check, specs, slow, source + "; n2's link shaped with tbf rate 200mbit"))


if __name__ == "__main__":
    record_local()
    reason = unavailable_reason()
    if reason:
        print("test bed not recorded:", reason)
    else:
        record_testbed()
