"""The test bed itself: sshd on every node, nodes reach each other, shaping holds, teardown is complete."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

import pytest

from tests.cluster.testbed import TestBed, _alive, _netns_pids

pytestmark = pytest.mark.root


def host_state(bed_tag: str) -> dict[str, list[str]]:
    netns = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                         text=True).stdout.splitlines() if line.strip()]
    links = [link["ifname"] for link in json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                                                   text=True).stdout or "[]")]
    return {"netns": [n for n in netns if n.startswith(bed_tag)], "links": [n for n in links if n.startswith(bed_tag)]}


def test_ssh_into_every_node_runs_a_command_in_its_own_network(testbed3):
    for node in testbed3.nodes:
        proc = testbed3.transport(node.index).run(["ip", "-j", "-4", "addr", "show", "dev", node.node_if], timeout=30)
        assert proc.returncode == 0, proc.stderr
        addresses = [a["local"] for link in json.loads(proc.stdout) for a in link["addr_info"]]
        assert addresses == [node.address]


def test_host_keys_are_checked_not_skipped(testbed3):
    config = testbed3.ssh_config.read_text()
    assert "StrictHostKeyChecking yes" in config
    known = testbed3.known_hosts.read_text().splitlines()
    assert [line.split()[0] for line in known] == [n.address for n in testbed3.nodes]


def test_a_node_reaches_another_nodes_address(testbed3):
    n1, n2 = testbed3.node(1), testbed3.node(2)
    probe = ("import socket, sys; s = socket.create_connection((sys.argv[1], 22), timeout=5); "
             "print(s.getsockname()[0], s.recv(64).decode().strip())")
    proc = testbed3.transport(1).run([testbed3.python, "-c", probe, n2.address], timeout=30)
    assert proc.returncode == 0, proc.stderr
    source, banner = proc.stdout.split(" ", 1)
    assert source == n1.address and banner.startswith("SSH-2.0-")


def test_nodes_share_the_filesystem_and_python(testbed3, tmp_path):
    marker = tmp_path / "written-by-n1"
    assert testbed3.transport(1).run(["sh", "-c", 'echo "$1" > "$2"', "sh", "hello", str(marker)], timeout=30).returncode == 0
    proc = testbed3.transport(3).run([testbed3.python, "-c", "import sys, preflight; print(open(sys.argv[1]).read().strip())",
                                      str(marker)], timeout=30)
    assert proc.stdout.strip() == "hello", proc.stderr


def test_shaped_link_measures_near_its_rate_with_iperf3(make_testbed):
    bed = make_testbed(2, rates={2: "2gbit"})
    n1, n2 = bed.node(1), bed.node(2)
    figures = {}
    for direction, (client, server) in {"to the shaped node": (n1, n2), "from the shaped node": (n2, n1)}.items():
        samples = []
        for _ in range(2):
            server_proc = subprocess.Popen(["ip", "netns", "exec", server.netns, "iperf3", "-s", "-1", "-p", "5201",
                                            "--forceflush"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                assert "Server listening" in server_proc.stdout.readline() + server_proc.stdout.readline()
                out = bed.exec(client, ["iperf3", "-c", server.address, "-p", "5201", "-t", "2", "-J"], timeout=30).stdout
                samples.append(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9)
            finally:
                server_proc.kill()
                server_proc.wait()
        figures[direction] = statistics.median(samples)
    # tbf counts whole frames; TCP payload is ~95% of a 1500-byte frame. Above the rate is impossible.
    for direction, gbps in figures.items():
        assert 0.85 * 2.0 <= gbps <= 2.0, f"{direction}: {gbps:.2f} Gbit/s"


def test_stop_sshd_makes_the_node_refuse_connections_and_start_brings_it_back(testbed3):
    node = testbed3.node(2)
    transport = testbed3.transport(2)
    assert transport.run(["true"], timeout=30).returncode == 0  # a master connection now exists
    testbed3.stop_sshd(node)
    proc = transport.run(["true"], timeout=30)
    assert proc.returncode == 255 and transport.is_transport_failure(proc.returncode)
    assert "Connection refused" in proc.stderr
    assert not [p for p, cmd in testbed3.processes(node) if cmd.startswith("sshd")]
    testbed3.start_sshd(node)
    assert transport.run(["true"], timeout=30).returncode == 0


def test_teardown_removes_everything_even_when_the_test_fails():
    bed = TestBed(2)
    with pytest.raises(RuntimeError, match="a failing test"):
        with bed:
            tag = bed.tag
            # Something left running on a node, as a crashed check would leave it.
            bed.transport(1).run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"], timeout=30)
            pids = _netns_pids(bed.node(1).netns)
            assert len(pids) >= 2
            raise RuntimeError("a failing test")
    assert host_state(tag) == {"netns": [], "links": []}
    assert not bed.dir.exists() and not os.path.exists(bed.control_dir)
    assert not [pid for pid in pids if _alive(pid)]


def test_kill_node_ends_everything_on_it(testbed3):
    node = testbed3.node(3)
    transport = testbed3.transport(3)
    assert transport.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"], timeout=30).returncode == 0
    testbed3.kill_node(node)
    deadline = time.monotonic() + 5
    while testbed3.processes(node) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in _netns_pids(node.netns) if _alive(p)] == []
    assert transport.run(["true"], timeout=30).returncode == 255


def test_a_broken_link_refuses_only_that_pair(testbed3):
    n1, n2, n3 = testbed3.node(1), testbed3.node(2), testbed3.node(3)
    probe = ("import socket, sys\n"
             "for address in sys.argv[1:]:\n"
             "    try:\n"
             "        socket.create_connection((address, 22), timeout=3).close(); print(address, 'ok')\n"
             "    except OSError as exc:\n"
             "        print(address, 'refused', type(exc).__name__)\n")
    testbed3.break_link(n1, n2)
    try:
        from_1 = testbed3.transport(1).run([testbed3.python, "-c", probe, n2.address, n3.address], timeout=30)
        from_2 = testbed3.transport(2).run([testbed3.python, "-c", probe, n1.address, n3.address], timeout=30)
        assert from_1.returncode == 0 and from_2.returncode == 0, from_1.stderr + from_2.stderr
        assert [line.split()[1] for line in from_1.stdout.splitlines()] == ["refused", "ok"]
        assert [line.split()[1] for line in from_2.stdout.splitlines()] == ["refused", "ok"]
    finally:
        testbed3.mend_link(n1, n2)
    again = testbed3.transport(1).run([testbed3.python, "-c", probe, n2.address], timeout=30)
    assert again.stdout.split()[1] == "ok"
