"""SshTransport command lines, without a network: options, quoting, specs and socket paths.

Quoting is checked the only way that proves it: the remote command string is handed to a real
POSIX shell (as sshd does with the user's login shell) and the argv that arrives is compared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from preflight.run.hosts import parse_hosts
from preflight.transport import transport_from_spec
from preflight.transport.ssh import MAX_CONTROL_DIR_CHARS, SshTransport

HOSTILE = [
    "a b", "$(touch /tmp/pwned)", "`id`", ";", "&&", "|", "'", '"', "\\", "$HOME", "*", "~", "#x", "\n",
    "-v", "--", "", "a'b\"c", "tab\there", "ünïcødé", "%C", "!!", "{a,b}", ">out", "<in",
]


@pytest.fixture
def control_dir():
    # pytest's tmp_path can be longer than a unix socket path allows; a short one under /tmp.
    path = tempfile.mkdtemp(prefix="pf-t-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def transport(control_dir):
    return SshTransport("gpu01", "gpu01.example", user="alice", port=2222, control_dir=control_dir,
                        options=["ProxyJump=bastion"], connect_timeout=7)


def option_values(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]


def test_wrap_shape_options_and_destination(transport):
    argv = transport.wrap(["python3", "-m", "preflight.engine.agent"])
    assert argv[0] == "ssh"
    # The destination follows `--`, then exactly one string for the remote shell.
    sep = argv.index("--")
    assert argv[sep + 1] == "gpu01.example" and len(argv) == sep + 3
    assert argv[-1] == "python3 -m preflight.engine.agent"
    options = option_values(argv)
    for wanted in ("BatchMode=yes", "ConnectTimeout=7", "ControlMaster=auto", "ControlPersist=60",
                   f"ControlPath={transport.control_dir}/%C"):
        assert wanted in options
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "alice"
    assert not any(o.startswith("StrictHostKeyChecking") for o in options), "host keys are the user's business"


def test_user_options_come_first_so_they_win(transport):
    options = option_values(transport.wrap(["true"]))
    assert options[0] == "ProxyJump=bastion"
    override = SshTransport("n", "n", options=["ConnectTimeout=99"], control_dir=transport.control_dir)
    values = [o for o in option_values(override.wrap(["true"])) if o.startswith("ConnectTimeout=")]
    assert values[0] == "ConnectTimeout=99"  # ssh keeps the first value it is given


def test_accept_new_only_when_asked(transport):
    t = SshTransport("n", "n", accept_new=True, control_dir=transport.control_dir)
    assert "StrictHostKeyChecking=accept-new" in option_values(t.wrap(["true"]))


def test_config_file(transport):
    t = SshTransport("n", "n", config_file="/etc/preflight/ssh_config", control_dir=transport.control_dir)
    argv = t.wrap(["true"])
    assert argv[1:3] == ["-F", "/etc/preflight/ssh_config"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_remote_command_round_trips_exactly_through_a_shell(transport, tmp_path):
    argv = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *HOSTILE]
    remote = transport.remote_command(argv)
    # sshd runs `$SHELL -c <string>`; do the same here and compare what the program received.
    proc = subprocess.run(["sh", "-c", remote], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == HOSTILE
    assert not (tmp_path / "out").exists() and not os.path.exists("/tmp/pwned")


def test_tilde_program_is_expanded_by_the_remote_shell_and_nothing_else(transport, tmp_path):
    remote = transport.remote_command(["~/venv/bin/python", "~/x", "a b"])
    assert remote == "~/venv/bin/python '~/x' 'a b'"
    fake_home = tmp_path / "home"
    (fake_home / "venv" / "bin").mkdir(parents=True)
    script = fake_home / "venv" / "bin" / "python"
    script.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    script.chmod(0o755)
    proc = subprocess.run(["sh", "-c", remote], capture_output=True, text=True, env={"HOME": str(fake_home), "PATH": "/usr/bin:/bin"})
    assert proc.stdout.splitlines() == ["~/x", "a b"]


def test_a_command_word_starting_with_dash_cannot_become_an_ssh_option(transport):
    argv = transport.wrap(["-oProxyCommand=touch /tmp/x"])
    sep = argv.index("--")
    assert sep < argv.index("gpu01.example")
    assert argv[-1] == "'-oProxyCommand=touch /tmp/x'"


def test_hostile_host_and_option_values_are_refused():
    with pytest.raises(ValueError):
        SshTransport("x", "-oProxyCommand=sh")
    with pytest.raises(ValueError):
        SshTransport("x", "host", options=["-F/tmp/evil"])
    with pytest.raises(ValueError):
        SshTransport("x", "host").remote_command([])


def test_exit_255_is_a_transport_failure(transport):
    assert transport.is_transport_failure(255)
    assert not transport.is_transport_failure(1)
    assert not transport.is_transport_failure(0)


def test_spec_round_trip_through_json(transport):
    spec = json.loads(json.dumps(transport.to_spec()))
    again = transport_from_spec(spec)
    assert isinstance(again, SshTransport)
    assert again.to_spec() == spec
    assert again.wrap(["echo", "a b"]) == transport.wrap(["echo", "a b"])


def test_copies_share_the_master_but_only_the_creator_removes_its_directory(tmp_path):
    owner = SshTransport("n", "n", ssh_binary="/bin/false")
    spec = owner.to_spec()
    control = spec["control_dir"]
    assert os.path.isdir(control) and len(control) <= MAX_CONTROL_DIR_CHARS
    assert oct(os.stat(control).st_mode & 0o777) == "0o700"
    copy = SshTransport.from_spec(spec)
    copy.close()
    assert os.path.isdir(control), "a copy in a worker process must not pull the socket dir from under the runner"
    owner.close()
    assert not os.path.exists(control)
    owner.close()  # twice is fine


def test_control_path_fits_a_unix_socket():
    t = SshTransport("n", "n")
    try:
        path = f"{t.to_spec()['control_dir']}/{'0' * 40}"  # %C expands to 40 hex characters
        assert len(path) < 100
    finally:
        t.close()
    with pytest.raises(ValueError, match="too long"):
        SshTransport("n", "n", control_dir="/tmp/" + "x" * 80)


def test_from_host_uses_the_hosts_file_settings(transport):
    host, other = parse_hosts("bob@[fd00::7]:2200 python=/opt/venv/bin/python\ngpu02\n")
    t = SshTransport.from_host(host, python="python3.11", control_dir=transport.control_dir)
    assert (t.name, t.hostname, t.user, t.port, t.python, t.address) == (
        "[fd00::7]:2200", "fd00::7", "bob", 2200, "/opt/venv/bin/python", "fd00::7")
    assert SshTransport.from_host(other, python="python3.11", control_dir=transport.control_dir).python == "python3.11"
    argv = t.wrap(["true"])
    assert argv[argv.index("--") + 1] == "fd00::7"


def test_connect_reports_a_missing_client():
    from preflight.transport import TransportError

    t = SshTransport("n", "n", ssh_binary="/nonexistent/ssh")
    try:
        with pytest.raises(TransportError, match="not installed"):
            t.connect(timeout=5)
    finally:
        t.close()
