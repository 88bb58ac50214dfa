"""What collectives.cluster accepts and what it advises: its parameters, each declared with its kind
and meaning, and the fix of each finding it can report."""

from __future__ import annotations

from dataclasses import dataclass

from preflight.core.check import TOO_FEW_NODES_FIXES, Learnable, param
from preflight_checks.collectives.figures import MIB
from preflight.launch.isolation_findings import SHARED_CAUSE_FIX, suspect_fix
from preflight.launch.recheck import INTERMITTENT_FIX, TRANSIENT_FIX

# The sizes collectives.local uses: on GPUs 256 MiB is where inter-node busbw reaches its plateau
# in nccl-tests; on CPU 16 MiB is past gloo's plateau and keeps a run within seconds.
GPU_SIZES = [8, MIB, 32 * MIB, 256 * MIB]
CPU_SIZES = [8, MIB, 16 * MIB]
PASS_IN_TIMEOUT_S = 120.0  # the pass's time that timeout_s holds (pairwise_timeout_s was 120 s); a longer pass adds the rest


@dataclass
class Params:
    # Unset: busbw is measured and reported, not judged; the right floor depends on the fabric
    # (8 x 400 Gbit/s InfiniBand per node gives nccl-tests around 350-390 GB/s busbw across H100
    # nodes, a single 100 GbE link about 10). Set it from a known-good run on the same fabric; a
    # run below it also starts the pairwise pass that names the node or pair at fault.
    min_busbw_gbps: float | None = param(None, kind="threshold",
                                         help=("lowest all-reduce bus bandwidth across nodes at the largest size "
                                               "(GB/s); unset: reported, not judged"),
                                         learn=Learnable("floor", "all-reduce bus bandwidth across the nodes at the "
                                                         "largest message size", figure="size", name_has="busbw",
                                                         unit="GB/s", not_prefix="pair ", narrow="largest-at"))
    max_latency_us: float | None = param(None, kind="threshold",
                                         help=("highest all-reduce time at the smallest size (microseconds); "
                                               "unset: reported, not judged"))
    backend: str | None = param(None, kind="choice", choices=("nccl", "gloo"),
                                help='"nccl" or "gloo"; unset: NCCL when every node has GPUs, gloo otherwise')
    # Message sizes; the smallest gives the latency, the largest the busbw that min_busbw_gbps
    # judges. None: GPU_SIZES with NCCL, CPU_SIZES with gloo.
    sizes_bytes: list[int] | None = param(None, kind="size",
                                          help="all-reduce message sizes (bytes); unset: a default sweep per backend")
    # nccl-tests' defaults: 5 warm-up operations, 20 timed iterations.
    iters: int = param(20, kind="count", minimum=1, help="timed all-reduce operations per size (count)")
    warmup: int = param(5, kind="count", help="untimed operations per size before timing (count)")
    check_elements: int = param(1 << 20, kind="count", minimum=1,
                                help="elements of the random-data correctness tensor (count, 4 bytes each)")
    # CPU processes per node with gloo. One: the network between nodes is what this measures, and
    # more processes per node share the same link while adding CPU load.
    gloo_ranks_per_node: int = param(1, kind="count", minimum=1, help="processes per node with gloo (count)")
    gpus_per_node: int | None = param(None, kind="count", minimum=1,
                                      help="GPUs used per node with NCCL (count); unset: the fewest any node has")
    # The rendezvous port on the first node. None: one that was free there a moment before the
    # launch. Set it where only known ports are open between nodes.
    rdzv_port: int | None = param(None, kind="count", minimum=1,
                                  help="rendezvous port on the first node (TCP port); unset: one that was free there")
    # How long torchrun waits for every node to join the rendezvous (c10d join_timeout); a node
    # that has not joined by then is named. A minute covers a slow interpreter start on a busy node.
    rdzv_timeout_s: float = param(60.0, kind="duration",
                                  help="how long torchrun waits for every node to join (seconds)")
    join_timeout_s: float = param(60.0, kind="duration",
                                  help="how long rank 0 waits for every rank to report in (seconds)")
    # init_process_group(timeout=...): a collective that waits longer fails. Always kept shorter
    # than what is left of this check's own timeout.
    pg_timeout_s: float = param(60.0, kind="duration",
                                help="how long one collective may wait before it fails (seconds)")
    # GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME on every node. None: on each node the interface that carries the address
    # other nodes reach it at, as the probe found it there.
    socket_ifname: str | None = param(None, kind="text",
                                      help=("interface for gloo and NCCL sockets on every node "
                                            "(GLOO/NCCL_SOCKET_IFNAME); unset: found on each"))
    env: dict[str, str] = param(kind="table", factory=dict,
                                help="extra environment variables for torchrun on every node (e.g. NCCL_IB_HCA)")
    # The pairwise pass: on when the all-reduce fails or misses a threshold, within this many seconds.
    pairwise: bool = param(True, kind="flag",
                           help=("when the all-node run fails or is slow, measure node pairs to name the one at "
                                 "fault (true/false)"))
    isolation: str = param("adaptive", kind="choice", choices=("adaptive", "pairs"),
                           help='how the pass names what is at fault: "adaptive" (groups of nodes) or "pairs"')
    # Unset: the rounds a search at the cluster's size takes, 20 s each (isolation_launch.pass_seconds);
    # the check's timeout, which held PASS_IN_TIMEOUT_S of it, grows by the rest.
    pairwise_timeout_s: float | None = param(None, kind="duration", help=(
        "time allowed for the pairwise pass; unset: 20 s for each round a search at the cluster's size may take, "
        "880 s at 8 nodes (seconds)"))
    pairwise_iters: int = param(5, kind="count", minimum=1,
                                help="timed operations per pair in the pairwise pass (count)")


# The check's four hints (`preflight explain`), and the fix of each finding, by the cause it answers.
FIX_JOINED = ("A node that never joined: check that it can reach the first node's rendezvous port, and that torch and "
              "preflight are installed for the Python it runs (--remote-python or python= in the hosts file).")
FIX_LOOPBACK = ("Host names that resolve to loopback: fix /etc/hosts, or launch with --local-addr and "
                "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming the interface that carries training traffic.")
FIX_SLOW = ("A slow or failing node or pair named by the pairwise pass: check that link (net.bandwidth, ethtool, the "
            "switch port) and, for NCCL, NCCL_DEBUG=INFO for the transport it picked (IB or socket).")
FIX_WRONG = ("Wrong sums: a hardware fault on the named node (GPU diagnostics, e.g. `dcgmi diag -r 3`) or a broken "
             "NCCL build.")
REMEDIATION = (FIX_JOINED, FIX_LOOPBACK, FIX_SLOW, FIX_WRONG)
# Kinds that share a fix share its cause: a node that could not take part (FIX_JOINED), a run that
# was slow or stopped in the collective (FIX_SLOW).
FIXES = {
    **TOO_FEW_NODES_FIXES,
    "probe-failed": FIX_JOINED,
    "no-distributed": ("Install a torch build with torch.distributed on that node (the official wheels have it), for "
                       "the Python preflight runs there."),
    "no-interface": FIX_LOOPBACK,
    "no-torch": ("Install torch for the Python preflight runs on those nodes (--remote-python or python= in the hosts "
                 "file names it)."),
    "no-backend": ('Run with backend = "gloo", or give every node GPUs and a torch built with NCCL.'),
    "launch": FIX_JOINED,
    "rendezvous": ("Open the rendezvous port (rdzv_port) on the first node to the others, and check that each node "
                   "reaches the first node's address."),
    "roll-call": ("A rank that never reported in: read its node's torchrun log in the evidence; a GPU held by another "
                  "process, or a firewall on gloo's or NCCL's ports, stops it."),
    "collective": FIX_SLOW,
    "timeout": FIX_SLOW,
    "stopped": FIX_SLOW,
    "too-few-usable": "Install torch on at least two nodes, for the Python preflight runs on each.",
    "nccl-over-sockets": ("Check that NCCL sees the RDMA fabric: ibv_devices lists the HCAs, NCCL_IB_DISABLE is not "
                          "set, NCCL_IB_HCA names them; NCCL_DEBUG=INFO says why it chose sockets."),
    "nccl-network-unrecognised": ("Run the all-reduce with NCCL_DEBUG=INFO on that node and read the NET line quoted: "
                                  "if it names a network plugin preflight does not know, the plugin's own docs say "
                                  "whether it is the RDMA path; report the line to preflight."),
    "no-floor": ("State the bus bandwidth the cluster must reach: `--set collectives.cluster.min_busbw_gbps=N` (GB/s, "
                 "at the largest message size), from the fabric's nccl-tests figure."),
    "wrong-sums": FIX_WRONG,
    "slow-busbw": FIX_SLOW,
    "slow-latency": FIX_SLOW,
    "pairwise-node": FIX_SLOW,
    "pairwise-pair": FIX_SLOW,
    "pairwise-all-bad": FIX_SLOW,
    "pairwise-all-good": FIX_SLOW,
    "pairwise-none": FIX_SLOW,
    # The adaptive pass (preflight.launch.isolation): what it names, and when it cannot.
    "transient": TRANSIENT_FIX,
    "intermittent": INTERMITTENT_FIX,
    "shared-cause": SHARED_CAUSE_FIX,
    "isolated-node": ("The node named slows every collective it joins: check its HCAs or NICs (`ibstat`, `ethtool -S`: "
                      "negotiated speed, errors), which NIC each GPU uses (`nvidia-smi topo -m`), and the transport "
                      "its ranks picked (NCCL_DEBUG=INFO); leave it out of jobs until it is fixed, then run the check "
                      "again."),
    "isolated-link": ("The link between the two nodes named: reseat or replace its cable or transceiver, check both "
                      "switch ports (error counters, `ethtool -S`), then run net.bandwidth between the two."),
    "isolated-boundary": ("The path between the two topology groups named: check the trunk or uplinks between their "
                          "switches (error counters, oversubscription, a failed member of a LAG)."),
    "straggler": ("The node named is slow in every group it joins, though it works: compare its GPU clocks, thermal "
                  "state and NIC speed with its peers (gpu.visibility, net.bandwidth); replace it if it stays slow."),
    "suspect": suspect_fix("collectives.cluster", "pairwise_timeout_s"),
    "isolation-ambiguous": ("The evidence names several candidates: run again with isolation = \"pairs\" on those nodes "
                            "(--nodes with just them), or measure each candidate link with net.bandwidth."),
    "isolation-not-reproduced": ("The all-node run was bad but no group reproduced it: a transient fault, or one that "
                                 "only shows with every node at once; run again, and watch the fabric's error counters."),
}
