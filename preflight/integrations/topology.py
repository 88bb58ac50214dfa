"""Where the node sources say a node sits in the network: a hosts file's group name, Slurm's leaf
switch (`scontrol show topology`), Kubernetes node labels. Each source puts its facts in the node's
spec under its own key; preflight.launch.topology reads them back for the isolation pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from preflight.core.nodeset import NodeSetError, expand
from preflight.transport.process import CommandTimeout, Completed, run_command

SWITCH_KEY = "switch"
LABELS_KEY = "topology_labels"

# Node labels that name the part of the network a node hangs off, tightest first. Only labels whose
# meaning the provider documents:
# - NVIDIA Topograph (https://docs.nvidia.com/topograph/reference/node-labels-and-annotations): the
#   leaf switch, and in its 1.x label family the fabric tier closest to the node;
# - Amazon EKS (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html): layer 3
#   of the AWS network hierarchy, the bottom layer for most supported instance types;
# - GKE (https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas, the
#   cluster's topology): the sub-block of a reserved block.
# topology.kubernetes.io/zone is left out on purpose: a whole zone is one group, which tells the
# isolation pass nothing.
TOPOLOGY_LABELS = (
    "network.topology.nvidia.com/leaf",
    "fabric.topograph.run/tier-0",
    "topology.k8s.aws/network-node-layer-3",
    "cloud.google.com/gce-topology-subblock",
)

# scontrol cuts each topology line to SLURM_TOPO_LEN characters (before Slurm 23.11: to 512 unless
# it is set), which can cut a long Nodes= list in the middle; ask for whole lines.
SLURM_TOPO_LEN = "65536"
SCONTROL_TIMEOUT_S = 30.0

Runner = Callable[..., Completed]  # run_command's shape: run(argv, timeout=..., env=...)

# A topology group name as a hosts file may give it: a rack, a switch, a pod.
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$")


def valid_group_name(value: str) -> bool:
    """True for a group name of letters, digits and `_ . : / -`, starting with a letter or digit,
    at most 64 characters (a hosts file's `group=` or `rack=` value)."""
    return bool(_GROUP_NAME.match(value))


# -- Kubernetes -----------------------------------------------------------------------------------


def topology_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The labels of a node that name its network locality (TOPOLOGY_LABELS), for its spec."""
    return {key: str(labels[key]) for key in TOPOLOGY_LABELS if labels and labels.get(key)}


# -- Slurm ----------------------------------------------------------------------------------------


def _fields(line: str) -> dict[str, str]:
    """`SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-4]` -> {SwitchName: s1, Level: 0, ...}."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def _expand(hostlist: str) -> list[str] | None:
    """A Slurm hostlist expanded (preflight.core.nodeset.expand); None when it does not parse (a line
    cut short in the middle of a range) or names more nodes than a node set may."""
    if not hostlist or hostlist == "(null)":
        return []
    try:
        return expand(hostlist)
    except NodeSetError:
        return None


def parse_scontrol_topology(text: str) -> dict[str, str]:
    """node -> its leaf switch, from `scontrol show topology`.

    topology/tree prints one line per switch, `SwitchName=NAME Level=N LinkSpeed=N [Nodes=HOSTLIST]
    [Switches=HOSTLIST]` (Slurm's _print_topo_record); the leaves are Level=0 and name the nodes
    cabled to them (upper levels list every node below them too, and are not used).
    topology/block prints `BlockName=NAME BlockIndex=N Nodes=HOSTLIST`: a node's group is its block.
    A node on two leaves keeps the first; a line whose node list does not parse (cut short) names
    no node; anything else scontrol prints (errors, a blank line) is ignored.
    """
    leaves: dict[str, str] = {}
    for line in text.splitlines():
        fields = _fields(line.strip())
        if "SwitchName" in fields:
            if fields.get("Level") != "0":
                continue
            name = fields["SwitchName"]
        elif "BlockName" in fields:
            name = fields["BlockName"]
        else:
            continue
        if not name or name == "(null)":
            continue
        for node in _expand(fields.get("Nodes", "")) or []:
            leaves.setdefault(node, name)
    return leaves


def slurm_leaf_switches(nodes: Iterable[str], run: Runner = run_command,
                        timeout: float = SCONTROL_TIMEOUT_S) -> dict[str, str]:
    """node -> leaf switch for `nodes`, asked of `scontrol show topology`; {} when Slurm has no
    topology plugin, prints nothing, fails or is not installed (topology is a hint, never a reason
    not to run)."""
    try:
        proc = run(["scontrol", "show", "topology"], timeout=timeout, env={"SLURM_TOPO_LEN": SLURM_TOPO_LEN})
    except (FileNotFoundError, PermissionError, CommandTimeout):
        return {}
    if proc.returncode != 0:
        return {}
    leaves = parse_scontrol_topology(proc.stdout or "")
    return {node: leaves[node] for node in nodes if node in leaves}
