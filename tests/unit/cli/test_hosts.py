"""The hosts file parser: syntax, ranges, and strict validation of what reaches an ssh command line."""

from __future__ import annotations

import pytest

from preflight.core.nodeset import MAX_NODES
from preflight.run.hosts import Host, HostsFileError, load_hosts, nodes_from_arg, parse_hosts


def names(text: str) -> list[str]:
    return [h.name for h in parse_hosts(text)]


def error_of(text: str) -> HostsFileError:
    with pytest.raises(HostsFileError) as info:
        parse_hosts(text, "hosts.txt")
    return info.value


def test_plain_hosts_comments_and_blank_lines():
    hosts = parse_hosts("# the cluster\n\ngpu01\n   gpu02   # spare\n\n10.0.0.7\n")
    assert [(h.name, h.hostname, h.line_no) for h in hosts] == [
        ("gpu01", "gpu01", 3), ("gpu02", "gpu02", 4), ("10.0.0.7", "10.0.0.7", 6)]
    assert all(h.user is None and h.port is None and h.slots is None and h.python is None for h in hosts)


def test_user_port_and_fully_qualified_names():
    (host,) = parse_hosts("alice@gpu01.cluster.example.org:2222\n")
    assert host == Host(name="gpu01.cluster.example.org:2222", hostname="gpu01.cluster.example.org",
                        user="alice", port=2222, line_no=1)


def test_ipv6_in_brackets_with_and_without_port():
    with_port, without = parse_hosts("bob@[fd00::7]:22\n[::1]\n")
    assert (with_port.hostname, with_port.port, with_port.user, with_port.is_ipv6) == ("fd00::7", 22, "bob", True)
    assert (without.hostname, without.port, without.name) == ("::1", None, "[::1]")


def test_slots_and_python_settings():
    (host,) = parse_hosts("gpu01 slots=8 python=/opt/venvs/torch-2.3/bin/python\n")
    assert host.slots == 8
    assert host.python == "/opt/venvs/torch-2.3/bin/python"


def test_range_keeps_zero_padding():
    assert names("gpu[01-03]") == ["gpu01", "gpu02", "gpu03"]
    assert names("gpu[08-11]") == ["gpu08", "gpu09", "gpu10", "gpu11"]
    assert names("n[9-11]") == ["n9", "n10", "n11"]


def test_range_with_list_and_single_numbers():
    assert names("node[1-4,7]") == ["node1", "node2", "node3", "node4", "node7"]


def test_several_ranges_expand_to_every_combination_and_keep_settings():
    hosts = parse_hosts("rack[1-2]-gpu[1-2].dc:2200 slots=4\n")
    assert [h.name for h in hosts] == ["rack1-gpu1.dc:2200", "rack1-gpu2.dc:2200", "rack2-gpu1.dc:2200", "rack2-gpu2.dc:2200"]
    assert {(h.port, h.slots, h.line_no) for h in hosts} == {(2200, 4, 1)}


def test_16_node_range_from_the_docs():
    hosts = parse_hosts("gpu[01-16] slots=8")
    assert len(hosts) == 16 and hosts[0].name == "gpu01" and hosts[-1].name == "gpu16"


@pytest.mark.parametrize("line", [
    "a;touch /tmp/x",
    "$(reboot)",
    "`reboot`",
    "a|b",
    "a&&b",
    "-oProxyCommand=sh",
    "host'quote",
    'host"quote',
    "a\\b",
    "-leading-dash",
    "-under_score",
    "alias_$(reboot)",
    "alias_;id",
    "alias_`id`",
    "trailing-dash-",
    "a..b",
    "a" * 64 + ".example",
])
def test_shell_metacharacters_and_invalid_names_are_rejected(line):
    error = error_of(f"good1\n{line}\n")
    assert error.line_no == 2
    assert "hosts.txt:2" in str(error)


def test_metacharacter_line_is_reported_as_an_invalid_host_name():
    error = error_of("a;touch /tmp/x\n")
    assert "invalid host name 'a;touch'" in error.message


def test_options_are_not_reachable_through_the_user_part():
    assert "invalid user name" in error_of("-oProxyCommand=x@host\n").message
    assert "invalid user name" in error_of("a;b@host\n").message


@pytest.mark.parametrize("line,words", [
    ("gpu[3-1]", "greater than"),
    ("gpu[1-", "without ']'"),
    ("gpu1-]", "without '['"),
    ("gpu[a-b]", "bad range"),
    ("gpu[]", "bad range"),
    ("gpu[1--3]", "bad range"),
    (f"gpu[1-{MAX_NODES + 1}]", f"names {MAX_NODES + 1:,} nodes, more than the {MAX_NODES:,}"),
    ("r[1-400]n[1-400]", "names 160,000 nodes"),
    ("gpu[1-2]!gpu1", "no operators"),
])
def test_bad_ranges(line, words):
    error = error_of(line)
    assert words in error.message and error.line_no == 1


@pytest.mark.parametrize("line,words", [
    ("host:0", "invalid port"),
    ("host:65536", "invalid port"),
    ("host:ssh", "invalid port"),
    ("fd00::1", "brackets"),
    ("[fd00::1", "without ']'"),
    ("[fd00::zz]:22", "invalid IPv6"),
    ("[fd00::1]22", "expected ':port'"),
    ("256.1.1.1", "invalid IPv4"),
    ("host slots=many", "whole number"),
    ("host slots=-1", "whole number"),
    ("host slots=4 slots=8", "given twice"),
    ("host gpus=8", "unknown setting"),
    ("host extra-word", "key=value"),
    ("@host", "invalid user name"),
    (":22", "missing host name"),
])
def test_malformed_lines(line, words):
    error = error_of(f"# header\n{line}\n")
    assert words in error.message
    assert error.line_no == 2


def test_duplicates_name_both_lines():
    error = error_of("gpu01\ngpu02\ngpu[01-02]\n")
    assert error.line_no == 3 and "on line 1" in error.message


def test_duplicates_ignore_case_and_user_but_not_port():
    assert "duplicate" in error_of("GPU01\nalice@gpu01\n").message
    assert len(parse_hosts("gpu01:22\ngpu01:2222\n")) == 2


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing here\n  # still nothing\n"])
def test_empty_file(text):
    error = error_of(text)
    assert error.line_no is None and "no hosts" in error.message


def test_load_hosts_reads_a_file_and_names_it_in_errors(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("gpu[1-2] slots=2\n")
    assert [h.name for h in load_hosts(path)] == ["gpu1", "gpu2"]
    path.write_text("gpu1\n$(reboot)\n")
    with pytest.raises(HostsFileError) as info:
        load_hosts(path)
    assert str(info.value).startswith(f"{path}:2: ")


def test_missing_file(tmp_path):
    with pytest.raises(HostsFileError) as info:
        load_hosts(tmp_path / "absent.txt")
    assert "cannot read" in info.value.message


@pytest.mark.parametrize("name", ["under_score", "train_node1", "_bastion_gpu", "gpu_a.cluster_1.example"])
def test_ssh_config_aliases_may_contain_underscores(name):
    hosts = parse_hosts(f"{name} slots=8\nalice@{name}_2:2222\n", "hosts.txt")
    assert [(h.hostname, h.port, h.slots) for h in hosts] == [(name, None, 8), (f"{name}_2", 2222, None)]


def test_underscore_ranges_expand():
    assert [h.name for h in parse_hosts("train_node[1-3]\n")] == ["train_node1", "train_node2", "train_node3"]


def test_nodes_takes_a_node_set_or_a_file_and_refuses_what_is_neither(tmp_path):
    from click.testing import CliRunner

    from preflight.run.hosts import nodes_from_arg
    from preflight.cli.main import cli

    assert [h.name for h in nodes_from_arg("gpu[001-003,007]")] == ["gpu001", "gpu002", "gpu003", "gpu007"]
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("n1\nn2 slots=8\n")
    assert [(h.name, h.slots) for h in nodes_from_arg(str(hosts))] == [("n1", None), ("n2", 8)]
    runner = CliRunner()
    for value, named in (("missing/hosts.txt", "missing/hosts.txt"), ("hosts.list", "hosts.list"),
                         ("gpu[01-02];reboot", "gpu01;reboot"), ("-oProxyCommand=x", "-oProxyCommand=x")):
        result = runner.invoke(cli, ["run", "--nodes", value, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, (value, result.output)
        assert named in result.output and "Traceback" not in result.output


def test_nodes_are_named_without_their_port_unless_two_share_an_address(tmp_path):
    from preflight.run.hosts import load_hosts
    from preflight.run.nodes import without_ports

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("gpu01:2222\nubuntu@10.0.0.7:2200\n127.0.0.1:2201\n127.0.0.1:2202\n[fd00::7]:22\ngpu02\n")
    assert [h.name for h in without_ports(load_hosts(hosts))] == [
        "gpu01", "10.0.0.7", "127.0.0.1:2201", "127.0.0.1:2202", "fd00::7", "gpu02"]


# -- one node is one node --------------------------------------------------------------------------

@pytest.mark.parametrize("first, second", [("good1", "good1:22"), ("good1", "alice@good1"), ("good1:22", "bob@GOOD1."),
                                           ("[fd00::7]", "[fd00:0:0::7]:22"), ("10.0.0.1", "root@10.0.0.1:22")])
def test_two_spellings_of_one_sshd_are_refused_with_the_line(first, second):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts(f"{first}\n# a comment\n{second}\n", "hosts.txt")
    assert caught.value.line_no == 3 and str(caught.value).startswith("hosts.txt:3: duplicate host")


def test_two_names_that_resolve_to_one_address_and_port_are_refused(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("localhost\n127.0.0.1:22\n")
    with pytest.raises(HostsFileError, match=r"hosts.txt:2: duplicate host"):
        nodes_from_arg(str(path))
    path.write_text("localhost:2222\n127.0.0.1:22\n")  # another port: another sshd
    assert [h.port for h in nodes_from_arg(str(path))] == [2222, 22]


@pytest.mark.parametrize("line", ["gpu01:\u00b2", "gpu01:\u0661\u0662", "gpu01 slots=\u00b2", "gpu01:99999999999",
                                  "n[\u0661-\u0663]"])
def test_a_number_that_is_not_ascii_digits_is_an_error_naming_file_and_line(line):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts(f"gpu00\n{line}\n", "hosts.txt")
    assert str(caught.value).startswith("hosts.txt:2: ")


def test_a_huge_range_is_refused_before_it_is_expanded(monkeypatch):
    import time

    from preflight.run import hosts

    start = time.monotonic()
    for text in ("n[1-100000000]", "n[1-9999]-r[1-9999]", "a[1-100000000],b1"):
        with pytest.raises(HostsFileError):
            nodes_from_arg(text)
    assert time.monotonic() - start < 0.5
    monkeypatch.setattr(hosts, "MAX_NODES", 1000)  # the file's total, over all its lines
    with pytest.raises(HostsFileError, match="at most 1,000"):
        parse_hosts("".join(f"r{r}-n[1-400]\n" for r in range(3)), "hosts.txt")
