"""One node-set expansion (preflight.core.nodeset.expand, on ClusterShell's NodeSet) reads a hosts file
line, --nodes, history --nodes and Slurm's node lists: one limit, one wording naming the input."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from preflight.cli.main import cli
from preflight.core.nodeset import MAX_NODES, NodeSetError, expand, fold
from preflight.integrations.slurm_tables import sinfo_node_states
from preflight.integrations.topology import parse_scontrol_topology
from preflight.run.hosts import HostsFileError, parse_hosts

TOO_MANY = f"n[1-{MAX_NODES + 1}]"


def test_padding_is_pdshs_and_the_order_is_as_written():
    assert expand("gpu[01-100]")[98:] == ["gpu99", "gpu100"]  # ClusterShell alone refuses the mixed width
    assert expand("n[8-10]") == ["n8", "n9", "n10"]
    assert expand("n[0-10]")[-2:] == ["n9", "n10"]
    assert expand("b,a[1-2],b") == ["b", "a1", "a2"]
    assert expand("rack[1-2]-gpu[1-2]") == ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]
    names = [f"gpu{i:03d}" for i in range(1, 1001)]
    assert expand(fold(names)) == names


@pytest.mark.parametrize("text,problem", [
    ("gpu[3-1]", "bad range [3-1]: 3 is greater than 1"),
    ("gpu[a-b]", "bad range [a-b]: expected numbers and ranges"),
    ("gpu[01-", "'[' without ']'"),
    ("gpu]", "']' without '['"),
    ("n[1-9[0-9]]", "'[' inside a range"),
    ("n[1-4]!n2", "'!' in 'n[1-4]!n2': a node set here holds names and ranges, no operators"),
    (TOO_MANY, f"names {MAX_NODES + 1:,} nodes, more than the {MAX_NODES:,} a node set may name"),
    ("x[1-60000],y[1-60000]", "names 120,000 nodes"),
])
def test_one_wording_that_names_the_node_set(text, problem):
    with pytest.raises(NodeSetError) as caught:
        expand(text)
    assert str(caught.value) == f"node set {text!r}: {caught.value.problem}" and problem in caught.value.problem


def test_the_limit_is_counted_before_anything_is_expanded_and_can_be_lowered():
    with pytest.raises(NodeSetError):
        expand("n[1-1000000000]")  # a billion names: refused from the bounds, never built
    assert len(expand("n[1-10]", limit=10)) == 10
    with pytest.raises(NodeSetError, match="more than the 9 a node set may name"):
        expand("n[1-10]", limit=9)


def test_every_caller_reads_node_sets_the_same_way():
    assert [h.name for h in parse_hosts("gpu[01-100] slots=8\n")][98:] == ["gpu99", "gpu100"]
    with pytest.raises(HostsFileError) as caught:
        parse_hosts(f"gpu01\n{TOO_MANY}\n", "hosts.txt")
    assert str(caught.value).startswith(f"hosts.txt:2: node set {TOO_MANY!r}: names")
    table = "NODELIST   NODES PARTITION STATE\ngpu[01-100]  100 batch idle\n"
    assert list(sinfo_node_states(table))[98:] == ["gpu99", "gpu100"]
    leaves = parse_scontrol_topology(f"SwitchName=s1 Level=0 LinkSpeed=1 Nodes=gpu[01-100]\n"
                                     f"SwitchName=s2 Level=0 LinkSpeed=1 Nodes={TOO_MANY}\n")
    assert leaves["gpu100"] == "s1" and "n1" not in leaves  # a list past the limit names no node


@pytest.mark.parametrize("command", [["run", "--nodes"], ["history", "list", "--nodes"]])
def test_a_node_set_past_the_limit_is_a_usage_error_naming_it(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, [*command, TOO_MANY])
    assert done.exit_code == 2, done.output
    assert f"node set {TOO_MANY!r}: names {MAX_NODES + 1:,} nodes" in done.output
    assert "Traceback" not in done.output
