"""SshTransport against real sshd processes on the namespace test bed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from preflight.transport import TransportError
from preflight.transport.ssh import SshTransport

pytestmark = pytest.mark.root

HOSTILE = ["a b", "$(touch /tmp/pf-pwned)", "`id`", ";", "&&", "|", "'", '"', "\\", "$HOME", "*", "~", "\n",
           "-v", "--", "", "a'b\"c", "tab\there", "ünïcødé", ">pf-out", "{a,b}"]
ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def test_quoting_hostile_arguments_round_trip_exactly(bed3, tmp_path):
    transport = bed3.transport(1)
    proc = transport.run([bed3.python, "-c", ECHO_ARGV, *HOSTILE], timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == HOSTILE
    assert not Path("/tmp/pf-pwned").exists()
    assert not Path(os.path.expanduser("~/pf-out")).exists()


def test_exit_codes_and_stdin_pass_through(bed3):
    transport = bed3.transport(2)
    proc = transport.run(["sh", "-c", "cat; exit 3"], timeout=30, input="line one\nline two\n")
    assert proc.returncode == 3 and not transport.is_transport_failure(proc.returncode)
    assert proc.stdout == "line one\nline two\n"


def test_spawn_talks_both_ways_like_the_agent_does(bed3):
    transport = bed3.transport(3)
    child = transport.spawn([bed3.python, "-u", "-c",
                             "import sys\nfor line in sys.stdin: print(line.strip()[::-1], flush=True)"], stdin=True,
                            grace_s=10)
    try:
        assert child.write("hello\n")
        assert child.next_line(30) == "olleh"
        child.close_stdin()
        assert child.wait(timeout=30) == 0
        assert child.exit_code == 0 and child.guard_pids["command"] > 0
    finally:
        child.stop()


def test_a_stopped_sshd_is_a_transport_failure(testbed3):
    node = testbed3.node(2)
    transport = testbed3.transport(2)
    testbed3.stop_sshd(node)
    proc = transport.run(["true"], timeout=30)
    assert proc.returncode == 255 and transport.is_transport_failure(255)
    with pytest.raises(TransportError, match="Connection refused"):
        transport.connect()


def test_a_node_that_does_not_answer_times_out_as_configured(testbed3):
    node = testbed3.node(3)
    transport = testbed3.transport(3, connect_timeout=2)
    subprocess.run(["ip", "link", "set", node.host_if, "down"], check=True)
    start = time.monotonic()
    proc = transport.run(["true"], timeout=30)
    assert proc.returncode == 255 and "timed out" in proc.stderr.lower()
    assert time.monotonic() - start < 10


def test_unknown_host_key_fails_unless_accept_new(bed3, tmp_path):
    empty_known_hosts = tmp_path / "known_hosts"
    empty_known_hosts.write_text("")
    options = [o for o in bed3.ssh_options() if not o.startswith(("UserKnownHostsFile", "StrictHostKeyChecking"))]
    options.append(f"UserKnownHostsFile={empty_known_hosts}")
    node = bed3.node(1)

    strict = SshTransport("n1", node.address, options=options + ["StrictHostKeyChecking=yes"])
    try:
        proc = strict.run(["true"], timeout=30)
        assert proc.returncode == 255 and "Host key verification failed" in proc.stderr
    finally:
        strict.close()

    accepting = SshTransport("n1", node.address, options=options, accept_new=True)
    try:
        assert accepting.run(["true"], timeout=30).returncode == 0
    finally:
        accepting.close()
    # The key that was remembered is the node's own (Debian hashes host names, so look it up).
    found = subprocess.run(["ssh-keygen", "-F", node.address, "-f", str(empty_known_hosts)], capture_output=True, text=True)
    host_key = Path(f"{node.host_key}.pub").read_text().split()[1]
    assert found.returncode == 0 and host_key in found.stdout


def test_control_master_is_reused_and_closed(testbed3):
    node = testbed3.node(1)
    transport = SshTransport("n1", node.address, options=testbed3.ssh_options(), python=testbed3.python)
    try:
        assert transport.run(["true"], timeout=30).returncode == 0
        sockets = list(Path(transport.control_dir).iterdir())
        assert len(sockets) == 1
        sessions_before = [p for p, cmd in testbed3.processes(node) if "notty" in cmd]
        for _ in range(3):
            assert transport.run(["true"], timeout=30).returncode == 0
        # Still one connection to the node: the commands went over the master.
        assert [p for p, cmd in testbed3.processes(node) if "notty" in cmd] == sessions_before
        copy = SshTransport.from_spec(json.loads(json.dumps(transport.to_spec())))
        assert copy.run(["true"], timeout=30).returncode == 0
        assert [p for p, cmd in testbed3.processes(node) if "notty" in cmd] == sessions_before
    finally:
        control_dir = transport.control_dir
        transport.close()
    assert not os.path.exists(control_dir)
    deadline = time.monotonic() + 10
    while [p for p, cmd in testbed3.processes(node) if "notty" in cmd] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p, cmd in testbed3.processes(node) if "notty" in cmd], "the master connection is gone"


def test_per_host_python_setting_is_used(bed3, tmp_path):
    from preflight.run.hosts import parse_hosts

    node = bed3.node(2)
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "wrapped"\nexec {bed3.python} "$@"\n')
    wrapper.chmod(0o755)
    (host,) = parse_hosts(f"{node.address} python={wrapper}\n")
    transport = SshTransport.from_host(host, python="python3", options=bed3.ssh_options())
    try:
        proc = transport.run([transport.python, "-c", "import preflight; print(preflight.__version__)"], timeout=30)
    finally:
        transport.close()
    assert proc.returncode == 0, proc.stderr
    first, version = proc.stdout.split()
    assert first == "wrapped" and version == __import__("preflight").__version__
