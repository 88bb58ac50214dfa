"""A remote node reached with the system OpenSSH client.

Using the user's own `ssh` keeps their ~/.ssh/config, ProxyJump, agent and keys working. Every
command is an argv list locally; on the node, ssh always hands the remote login shell one string,
so that string is built as shlex.join builds it and every argument arrives exactly as given (the one
exception: a program path starting with `~/` keeps that prefix unquoted, for the shell to expand).

    ssh <user options> -o BatchMode=yes -o ConnectTimeout=N -o ControlMaster=auto
        -o ControlPath=<dir>/%C -o ControlPersist=60 [-p PORT] [-l USER] -- HOST 'quoted command'

`--` before the host matters: without it OpenSSH parses options that follow the destination, so a
command word starting with '-' would be read as an ssh option.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from typing import Any

from preflight.transport.base import Transport
from preflight.transport.process import CommandTimeout, run_command

# ssh exits 255 when it cannot connect or authenticate, and when the connection drops.
SSH_FAILURE_EXIT = 255
# A unix socket path must fit in sun_path (108 bytes on Linux, 104 on macOS); %C expands to 40 hex
# characters, so the control directory itself must stay short.
MAX_CONTROL_DIR_CHARS = 60


def _short_temp_root() -> str:
    root = tempfile.gettempdir()
    # $TMPDIR can be long (macOS: /var/folders/...); /tmp keeps the socket path well inside the limit.
    if len(root) > 20 and os.path.isdir("/tmp"):
        return "/tmp"
    return root


def make_control_dir() -> str:
    """A private directory for ControlMaster sockets, short enough for a unix socket path."""
    path = tempfile.mkdtemp(prefix="pf-ssh-", dir=_short_temp_root())
    os.chmod(path, 0o700)
    return path


class SshTransport(Transport):
    kind = "ssh"
    client = "ssh"

    def __init__(
        self,
        name: str,
        hostname: str,
        *,
        user: str | None = None,
        port: int | None = None,
        python: str = "python3",
        address: str | None = None,
        connect_timeout: float = 10.0,
        options: list[str] | tuple[str, ...] = (),
        accept_new: bool = False,
        control_dir: str | None = None,
        config_file: str | None = None,
        ssh_binary: str = "ssh",
    ) -> None:
        if not hostname or hostname.startswith("-"):
            raise ValueError(f"invalid ssh host {hostname!r}")
        for option in options:
            if not option or option.startswith("-"):
                raise ValueError(f"an --ssh-option is a Key=Value pair such as ServerAliveInterval=5, not {option!r}")
        super().__init__(name, address or hostname, python)
        self.hostname = hostname
        self.user = user
        self.port = port
        self.connect_timeout = connect_timeout
        self.options = list(options)
        self.accept_new = accept_new
        self.config_file = config_file
        self.ssh_binary = ssh_binary
        if control_dir is not None and len(control_dir) > MAX_CONTROL_DIR_CHARS:
            raise ValueError(f"ssh control directory {control_dir!r} is too long for a unix socket path "
                             f"(at most {MAX_CONTROL_DIR_CHARS} characters)")
        # The transport that creates the socket directory removes it; copies rebuilt from the spec
        # (in worker processes) share the same master connection and leave it alone.
        self._owns_control_dir = control_dir is None
        self.control_dir = control_dir

    @classmethod
    def from_host(
        cls,
        host: Any,
        *,
        python: str = "python3",
        connect_timeout: float = 10.0,
        options: list[str] | tuple[str, ...] = (),
        accept_new: bool = False,
        control_dir: str | None = None,
        config_file: str | None = None,
    ) -> SshTransport:
        """A transport for a `preflight.run.hosts.Host`; its own `python=` setting beats the run's default."""
        return cls(
            host.name, host.hostname, user=host.user, port=host.port, python=host.python or python,
            connect_timeout=connect_timeout, options=options, accept_new=accept_new,
            control_dir=control_dir, config_file=config_file,
        )

    # -- command lines -------------------------------------------------------------------------

    def ssh_options(self) -> list[str]:
        """Everything before the destination. The user's options come first: ssh keeps the first
        value it sees for each setting, so `--ssh-option` overrides ours."""
        if self.control_dir is None:
            self.control_dir = make_control_dir()
        argv: list[str] = []
        if self.config_file:
            argv += ["-F", self.config_file]
        for option in self.options:
            argv += ["-o", option]
        argv += [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={max(1, int(round(self.connect_timeout)))}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self.control_dir}/%C",
            "-o", "ControlPersist=60",
            # A node that dies mid-run is noticed in ~15 s instead of at the TCP timeout.
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
        ]
        if self.accept_new:
            argv += ["-o", "StrictHostKeyChecking=accept-new"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        return argv

    def remote_command(self, argv: list[str]) -> str:
        """The one string the remote shell parses back into exactly `argv`."""
        if not argv:
            raise ValueError("empty command")
        program = argv[0]
        if program.startswith("~/"):
            # Let the remote shell expand the home directory of a per-host `python=~/venv/bin/python`;
            # the rest of the path stays quoted.
            head = "~/" + shlex.quote(program[2:])
        else:
            head = shlex.quote(program)
        return " ".join([head] + [shlex.quote(arg) for arg in argv[1:]])

    def wrap(self, argv: list[str]) -> list[str]:
        return [self.ssh_binary, *self.ssh_options(), "--", self.hostname, self.remote_command(argv)]

    def is_transport_failure(self, returncode: int) -> bool:
        return returncode == SSH_FAILURE_EXIT

    # -- connection life cycle -----------------------------------------------------------------

    def connect(self, timeout: float | None = None) -> None:
        """Open (or reuse) the master connection; TransportError with ssh's own words if it fails."""
        limit = timeout if timeout is not None else self.connect_timeout + 5
        self._connect_with_true(limit, client="ssh", binary=self.ssh_binary,
                                no_answer=f"ssh to {self.hostname} did not answer",
                                failed=f"cannot reach {self.hostname}")

    def close(self) -> None:
        """Stop the master connection and remove the socket directory this transport created."""
        if self.control_dir is None:
            return
        if os.path.isdir(self.control_dir) and os.listdir(self.control_dir):
            # `-O exit` talks to the master through the socket; when there is none it fails fast.
            argv = [self.ssh_binary, *self.ssh_options(), "-O", "exit", "--", self.hostname]
            try:
                run_command(argv, 10)
            except (CommandTimeout, OSError):
                pass
        if self._owns_control_dir:
            shutil.rmtree(self.control_dir, ignore_errors=True)

    # -- specs ---------------------------------------------------------------------------------

    def to_spec(self) -> dict[str, Any]:
        if self.control_dir is None:
            self.control_dir = make_control_dir()
        return {
            **super().to_spec(),
            "hostname": self.hostname,
            "user": self.user,
            "port": self.port,
            "connect_timeout": self.connect_timeout,
            "options": list(self.options),
            "accept_new": self.accept_new,
            "control_dir": self.control_dir,
            "config_file": self.config_file,
            "ssh_binary": self.ssh_binary,
        }

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> SshTransport:
        return cls(
            spec["name"], spec["hostname"], user=spec.get("user"), port=spec.get("port"),
            python=spec.get("python") or "python3", address=spec.get("address"),
            connect_timeout=float(spec.get("connect_timeout", 10.0)), options=spec.get("options") or (),
            accept_new=bool(spec.get("accept_new", False)), control_dir=spec.get("control_dir"),
            config_file=spec.get("config_file"), ssh_binary=spec.get("ssh_binary") or "ssh",
        )

    def __repr__(self) -> str:
        where = f"{self.user}@{self.hostname}" if self.user else self.hostname
        return f"SshTransport({self.name!r}, {where}{':' + str(self.port) if self.port else ''})"
