"""TCP bandwidth: net.bandwidth's figure next to a direct iperf3 run on the same links (needs root).

    sudo .venv/bin/python bench/net_bandwidth.py [--rate 2gbit] [--duration 5] [--rounds 3]

Builds the namespace test bed from tests/cluster/testbed.py: three nodes, node 2's link shaped to
`--rate` with tbf. Each round runs, in alternating order, net.bandwidth's collect() (ring pattern, its
own probe, servers, parallel clients and clean-up, over ssh) with one repeat, and a direct run: one
`iperf3 -s -1` in the receiving namespace and one `iperf3 -c <address> -t <duration> -J` in the
sending one, started with `ip netns exec`, reading end.sum_received like the check does.

Printed per link: the medians over the rounds and their ratio. The shaped link n1 -> n2 is the one
that matters (aim: within 10%, a ratio between 0.9 and 1.1): the shaper, not the CPU, sets its rate.
The unshaped link n3 -> n1 is printed for information; its rate is whatever the CPUs give veth, and
the check's several iperf3 processes get more of it than one process does.
Not a test: nothing here is judged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.core.check import Expect  # noqa: E402
from preflight.engine.context import ClusterContext
from preflight_checks.net.bandwidth import NetBandwidth, Params  # noqa: E402
from tests.cluster.testbed import TestBed, unavailable_reason  # noqa: E402

LINKS = [("n1", "n2"), ("n3", "n1")]  # ring links: into the shaped node, and between two unshaped ones


def direct(bed: TestBed, src: str, dst: str, duration: int, port: int = 5299) -> float:
    sender, receiver = bed.node(src), bed.node(dst)
    server = subprocess.Popen(["ip", "netns", "exec", receiver.netns, "iperf3", "-s", "-1", "-p", str(port),
                               "--forceflush"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 10
        while "Server listening" not in (server.stdout.readline() or "") and time.monotonic() < deadline:
            pass
        out = bed.exec(sender, ["iperf3", "-c", receiver.address, "-p", str(port), "-t", str(duration), "-J"],
                       timeout=duration + 30).stdout
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        server.kill()
        server.wait()


def with_check(bed: TestBed, duration: int, streams: int) -> dict[tuple[str, str], float]:
    out = Path(tempfile.mkdtemp(prefix="pft-bench-"))
    specs = [bed.transport(n.index, name=n.name).to_spec() for n in bed.nodes]
    ctx = ClusterContext(nodes=specs, output_dir=out, scratch_dir=out, expect=Expect(), timeout_s=600)
    params = Params(pattern="ring", streams=streams, duration_s=duration, omit_s=0, repeats=1)
    facts = NetBandwidth().collect(ctx, params)
    figures = {}
    for link in facts["links"]:
        values = [s["gbps"] for s in link["samples"] if "gbps" in s]
        if not values:
            raise SystemExit(f"net.bandwidth did not measure {link['src']} -> {link['dst']}: {link['samples']}")
        figures[(link["src"], link["dst"])] = values[0]
    out.rmdir()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="2gbit", help="tbf rate of node 2's link (default 2gbit)")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measurement (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both measurements (default 3)")
    parser.add_argument("--streams", type=int, default=Params.streams, help="net.bandwidth's processes per link")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot build the test bed: {reason}")

    check_figures: dict[tuple[str, str], list[float]] = {link: [] for link in LINKS}
    direct_figures: dict[tuple[str, str], list[float]] = {link: [] for link in LINKS}
    with TestBed(3, rates={2: args.rate}) as bed:
        for round_no in range(args.rounds):
            order = ["check", "direct"] if round_no % 2 == 0 else ["direct", "check"]
            for which in order:
                if which == "check":
                    figures = with_check(bed, args.duration, args.streams)
                    for link in LINKS:
                        check_figures[link].append(figures[link])
                else:
                    for link in LINKS:
                        direct_figures[link].append(direct(bed, *link, args.duration))
            print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)

    print(f"net.bandwidth vs direct iperf3, {args.rounds} rounds of {args.duration}s; node n2 shaped to {args.rate}")
    print(f"{'link':<12} {'net.bandwidth Gbit/s':>21} {'direct iperf3 Gbit/s':>21} {'ratio':>7}")
    for link in LINKS:
        ours, theirs = statistics.median(check_figures[link]), statistics.median(direct_figures[link])
        note = "  (shaped: aim 0.90-1.10)" if "n2" in link else "  (unshaped: CPU-bound, for information)"
        print(f"{' -> '.join(link):<12} {ours:>21.3f} {theirs:>21.3f} {ours / theirs:>7.3f}{note}")


if __name__ == "__main__":
    main()
