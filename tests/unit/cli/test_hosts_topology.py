"""The hosts file's `group=` / `rack=` column: checked, and carried into the node spec the cluster
checks get, where preflight.launch.topology reads it."""

from __future__ import annotations

import pytest

from preflight.run.hosts import HostsFileError, parse_hosts
from preflight.launch.topology import topology_from_specs


def test_group_and_rack_columns_are_read_per_host():
    hosts = parse_hosts("gpu[01-02] slots=8 group=leaf1\ngpu03 rack=r-7.b/2\ngpu04\n")
    assert [(h.name, h.group) for h in hosts] == [("gpu01", "leaf1"), ("gpu02", "leaf1"), ("gpu03", "r-7.b/2"),
                                                  ("gpu04", None)]


@pytest.mark.parametrize("line, key", [
    ("gpu01 group=$(reboot)", "group="), ("gpu01 rack=-x", "rack="), ("gpu01 group=a;b", "group="),
    ("gpu01 rack=" + "r" * 65, "rack="), ("gpu01 group=_x", "group="),
])
def test_a_bad_group_value_names_the_file_the_line_and_the_key(line, key):
    with pytest.raises(HostsFileError) as info:
        parse_hosts("gpu00\n" + line + "\n", "hosts.txt")
    assert info.value.line_no == 2 and str(info.value).startswith("hosts.txt:2: ") and key in str(info.value)


def test_group_and_rack_together_or_twice_are_refused():
    for line in ("gpu01 group=a rack=b", "gpu01 group=a group=b"):
        with pytest.raises(HostsFileError) as info:
            parse_hosts(line, "hosts.txt")
        assert info.value.line_no == 1


def test_the_group_reaches_the_node_spec_of_the_cluster_checks(tmp_path):
    from preflight.run.nodes import hosts_nodes as _nodes_from_file

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("n[1-2] group=leafA\nn3 rack=leafB\nn4\n")
    specs = [n.spec() for n in _nodes_from_file(str(hosts), "python3", [], False)]
    assert [(s["name"], s["kind"], s.get("group")) for s in specs] == [
        ("n1", "ssh", "leafA"), ("n2", "ssh", "leafA"), ("n3", "ssh", "leafB"), ("n4", "ssh", None)]
    assert topology_from_specs(specs) == {"n1": "leafA", "n2": "leafA", "n3": "leafB"}


def test_a_bad_group_in_the_hosts_file_exits_2_naming_file_line_and_key(tmp_path):
    from click.testing import CliRunner

    from preflight.cli.main import cli

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("n1 group=leaf1\nn2 group=leaf;2\n")
    result = CliRunner().invoke(cli, ["run", "--nodes", str(hosts), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert f"{hosts}:2" in result.output and "group=" in result.output and "Traceback" not in result.output
