"""Record real output on the test bed into tests/data/net/ and tests/data/storage/ (needs root).

    sudo .venv/bin/python tests/cluster/record_data.py

The unit tests of net.bandwidth and storage.shared parse and judge these files, so they are what
iperf3 and the checks really produced, not hand-written JSON. Three nodes; node 2's link is shaped
to 2 Gbit/s; node 3 has a private directory where the others share one.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cluster.testbed import TestBed  # noqa: E402

from preflight.core.check import Expect  # noqa: E402
from preflight.engine.context import ClusterContext
from preflight.engine.execute import execute  # noqa: E402
from preflight_checks.storage.shared import Params as StorageParams  # noqa: E402
from preflight_checks.storage.shared import StorageShared  # noqa: E402
from preflight_checks.net.bandwidth import NetBandwidth, Params  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "net"
STORAGE_DATA = Path(__file__).resolve().parents[1] / "data" / "storage"
SOURCE = "recorded on the network-namespace test bed (tests/cluster/record_data.py); node 2 shaped with tbf rate 2gbit"


def client_lines(ctx: ClusterContext, bed: TestBed, src: int, dst: int, ports: list[str], with_server: bool) -> list[str]:
    src_spec, dst_spec = ctx.nodes[src - 1], ctx.nodes[dst - 1]
    server = None
    iperf = [bed.python, "-m", "preflight.workers.iperf"]
    if with_server:
        server = ctx.transport(dst_spec["name"]).spawn([*iperf, "servers", "--life", "30", "--forceflush", *ports])
        server.wait_until(lambda: sum("Server listening" in line for line in server.lines) >= len(ports), 10)
    client = ctx.transport(src_spec["name"]).spawn([*iperf, "clients", "--life", "30", "--dst", dst_spec["address"],
                                                    "--seconds", "2", "--omit", "0", "--bind", src_spec["address"],
                                                    *ports])
    client.wait_until(lambda: "@@done" in client.lines, 30)
    client.stop()
    if server:
        server.wait_until(lambda: "@@done" in server.lines, 5)
        server.stop()
    return client.lines


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    STORAGE_DATA.mkdir(parents=True, exist_ok=True)
    shared = tempfile.mkdtemp(prefix="pft-shared-")
    private = tempfile.mkdtemp(prefix="pft-private-")
    with TestBed(3, rates={2: "2gbit"}, private_dirs={3: [private]}) as bed:
        specs = [bed.transport(n.index, name=n.name).to_spec() for n in bed.nodes]
        out = Path(tempfile.mkdtemp())
        ctx = ClusterContext(nodes=specs, output_dir=out, scratch_dir=out, expect=Expect(), timeout_s=300)
        ports = ["5201", "5202"]

        for name, src, dst, with_server in [
            ("client_output_shaped.txt", 1, 2, True),
            ("client_output_fast.txt", 3, 1, True),
            ("client_output_refused.txt", 1, 3, False),
        ]:
            lines = client_lines(ctx, bed, src, dst, ports, with_server)
            (DATA / name).write_text("\n".join(lines) + "\n")

        probe = ctx.run_on("n1", [bed.python, "-m", "preflight.workers.probe", "--iperf3", "--bindable",
                                  specs[0]["address"], "--targets", specs[1]["address"], specs[0]["address"],
                                  "127.0.0.1"], timeout=60)
        (DATA / "probe_n1.json").write_text(json.dumps(
            {"_source": SOURCE + "; targets: n2, n1's own address, loopback",
             "probe": json.loads(probe.stdout)}, indent=1) + "\n")

        for pattern in ("ring", "full"):
            params = Params(min_gbps=4, streams=2, duration_s=2, omit_s=0, repeats=3, pattern=pattern)
            ctx = ClusterContext(nodes=specs, output_dir=out, scratch_dir=out, expect=Expect(), timeout_s=300)
            result = execute(NetBandwidth(), ctx, params, Expect(), node="cluster")
            (DATA / f"facts_{pattern}_3nodes_n2_shaped.json").write_text(json.dumps(
                {"_source": SOURCE + f"; Params(min_gbps=4, streams=2, duration_s=2, omit_s=0, repeats=3, "
                                     f"pattern={pattern!r}); recorded status {result.status.value}",
                 "facts": result.facts}, indent=1) + "\n")
            print(pattern, result.status.value, result.summary)

        for label, directory in (("shared", shared), ("node3_private", private)):
            ctx = ClusterContext(nodes=specs, output_dir=out, scratch_dir=out, expect=Expect(), timeout_s=60)
            result = execute(StorageShared(), ctx, StorageParams(dir=directory, visible_within_s=2), Expect(), node="cluster")
            (STORAGE_DATA / f"facts_{label}.json").write_text(json.dumps(
                {"_source": "recorded on the network-namespace test bed (tests/cluster/record_data.py): three nodes "
                            "sharing this machine's /tmp; node 3 has a private tmpfs over the second directory; "
                            f"recorded status {result.status.value}",
                 "facts": result.facts}, indent=1) + "\n")
            print(label, result.status.value, result.summary)
    for directory in (shared, private):
        Path(directory).rmdir()


if __name__ == "__main__":
    main()
