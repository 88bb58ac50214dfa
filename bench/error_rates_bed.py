"""preflight's error rates on the namespace test bed, with faults injected for real: labelled node-runs.

    python bench/error_rates_bed.py [--runs-per-fault 2] [--healthy 5] [--json] [--out bench/results/error_rates_bed.json]

Needs root (network namespaces, tc, a mount namespace per node): the bed of tests/cluster/testbed.py
with four nodes. Each run is `preflight run --level quick` over SSH with the same checks
(node.environment, net.bandwidth with its adaptive isolation on, versions.consistency,
checkpoint.roundtrip), one fault injected before it and undone after it:

- healthy: nothing injected;
- slow-node: n2's link shaped to 200 Mbit/s with tc (the floor is 0.6 Gbit/s);
- refused-link: traffic between n3 and n4 only refused (a prohibit route on each side);
- killed-sshd: n4's sshd and its sessions killed (the node does not answer);
- read-only-mount: n3's checkpoint directory remounted read-only in its own mount namespace;
- torch-drift: n2 runs another torch ($PREFLIGHT_DRIFT_PYTHON; the fault is left out without it).

Each node of each run is a labelled node-run: at fault (slow-node, killed-sshd, read-only-mount,
torch-drift: that node), the end of a faulty link (refused-link: n3 and n4; neither should be acted
on, the link should be named), or healthy. What preflight did is read from results.json with the rule
the actions use (preflight.core.blame): the nodes acted on, the links and boundaries named; the run's
exit code is its verdict. Not a test: the figures go to the README.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from preflight.core.blame import blames, held  # noqa: E402
from preflight.core.model import RunReport  # noqa: E402
from tests.cluster.testbed import TestBed, unavailable_reason  # noqa: E402

CHECKS = "node.environment,net.bandwidth,versions.consistency,checkpoint.roundtrip"
NODES = 4
CKPT = "/tmp/preflight-bed-ckpt"
DRIFT = os.environ.get("PREFLIGHT_DRIFT_PYTHON", "")


def config(tmp: Path) -> Path:
    path = tmp / "preflight.toml"
    # The quick level gives net.bandwidth 30 s in all: too little for a pass that confirms what it blames.
    path.write_text(f'[expect]\nnodes = {NODES}\n[checks."net.bandwidth"]\nmin_gbps = 0.6\nisolation = "adaptive"\n'
                    'streams = 1\nduration_s = 1\nomit_s = 0\nrepeats = 1\nisolation_timeout_s = 150\ntimeout = 240\n'
                    f'[checks."checkpoint.roundtrip"]\ndir = "{CKPT}"\n')
    return path


def inject(bed: TestBed, fault: str) -> tuple[callable, dict[str, str]]:
    """Inject `fault`; (undo, node name -> label "fault" / "link-end")."""
    n = {node.name: node for node in bed.nodes}
    if fault == "slow-node":
        bed.shape(n["n2"], "200mbit")
        return (lambda: bed.unshape(n["n2"])), {"n2": "fault"}
    if fault == "refused-link":
        bed.break_link(n["n3"], n["n4"])
        return (lambda: bed.mend_link(n["n3"], n["n4"])), {"n3": "link-end", "n4": "link-end"}
    if fault == "killed-sshd":
        bed.stop_sshd(n["n4"])
        return (lambda: bed.start_sshd(n["n4"])), {"n4": "fault"}
    if fault == "read-only-mount":
        pid = str(bed.sshd_pid(n["n3"]))
        subprocess.run(["nsenter", "-t", pid, "-m", "mount", "-o", "remount,ro", CKPT], check=True)
        return (lambda: subprocess.run(["nsenter", "-t", pid, "-m", "mount", "-o", "remount,rw", CKPT],
                                       check=False)), {"n3": "fault"}
    if fault == "torch-drift":
        return (lambda: None), {"n2": "fault"}
    return (lambda: None), {}


def one_run(bed: TestBed, fault: str, tmp: Path) -> dict:
    hosts = tmp / "hosts.txt"
    hosts.write_text("".join(f"{node.address}" + (f" python={DRIFT}" if fault == "torch-drift" and node.name == "n2"
                                                   else "") + "\n" for node in bed.nodes))
    out = tmp / f"out-{fault}-{time.monotonic_ns()}"
    options = [arg for option in bed.ssh_options() for arg in ("--ssh-option", option)]
    argv = [sys.executable, "-m", "preflight", "run", "--nodes", str(hosts), "--remote-python", bed.python, *options,
            "--out", str(out), "--level", "quick", "--checks", CHECKS, "--config", str(config(tmp))]
    undo, labels = inject(bed, fault)
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "1"})
    finally:
        undo()
    wall = round(time.monotonic() - started, 1)
    report = RunReport.from_dict(json.loads((out / "results.json").read_text()))
    by_address = {node.address: node.name for node in bed.nodes}
    acted = sorted(by_address.get(node, node) for node in blames(report))
    named = [b.component for b in held(report)]
    return {"fault": fault, "exit_code": proc.returncode, "wall_s": wall, "labels": labels, "acted_on": acted,
            "named_not_acted": named}


def score(runs: list[dict]) -> dict:
    node_runs = healthy = wrongly = faults = missed = caught = link_ends = link_ends_acted = 0
    for run in runs:
        nogo = run["exit_code"] != 0
        for index in range(1, NODES + 1):
            name, label = f"n{index}", run["labels"].get(f"n{index}", "healthy")
            node_runs += 1
            acted = name in run["acted_on"]
            if label == "healthy":
                healthy += 1
                wrongly += acted
            elif label == "link-end":
                link_ends += 1
                link_ends_acted += acted
            else:
                faults += 1
                caught += acted
                missed += not nogo
    links = [r for r in runs if r["fault"] == "refused-link"]
    return {"runs": len(runs), "node_runs": node_runs, "healthy_node_runs": healthy,
            "healthy_node_runs_acted_on": wrongly, "faulty_node_runs": faults,
            "faulty_node_runs_missed (GO)": missed, "faulty_node_runs_acted_on": caught,
            "link_end_node_runs": link_ends, "link_end_node_runs_acted_on": link_ends_acted,
            "link_runs_naming_the_link": sum(any(c.startswith("link ") for c in r["named_not_acted"]) for r in links),
            "link_runs": len(links), "healthy_runs_no_go": sum(r["exit_code"] != 0 for r in runs if not r["labels"])}


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt  # the bed is taken down on the way out


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-fault", type=int, default=2)
    parser.add_argument("--healthy", type=int, default=5)
    parser.add_argument("--out", default="")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"test bed unavailable: {reason}")
    faults = ["slow-node", "refused-link", "killed-sshd", "read-only-mount"]
    if DRIFT and Path(DRIFT).exists():
        faults.append("torch-drift")
    plan = ["healthy"] * args.healthy + [f for f in faults for _ in range(args.runs_per_fault)]
    Path(CKPT).mkdir(exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="preflight-bed-bench-") as tmp, \
            TestBed(NODES, private_dirs={3: [CKPT]}) as bed:
        for fault in plan:
            run = one_run(bed, fault, Path(tmp))
            runs.append(run)
            if not args.json:
                print(json.dumps(run), flush=True)
    figures = {"summary": score(runs), "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1, allow_nan=False) + "\n")
    print(json.dumps(figures["summary"] if not args.json else figures, indent=1))


if __name__ == "__main__":
    main()
