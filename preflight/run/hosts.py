"""The hosts file: which nodes a run covers.

One host per line; `#` starts a comment; blank lines are ignored.

    gpu01                      a host name (RFC 1123) or an IPv4 address
    train_node1                an alias from ~/.ssh/config (underscores allowed)
    alice@gpu02:2222           a login user and an SSH port
    [fd00::7]:22               an IPv6 address, always in brackets
    gpu[01-16] slots=8         a pdsh-style range (zero padding kept) and the GPUs expected per node
    node[1-4,7]                ranges and single numbers, comma-separated
    rack[1-2]-gpu[1-4]         several ranges expand to every combination
    gpu17 python=/opt/venv/bin/python    the interpreter that runs preflight on that node
    gpu[01-08] group=leaf1     the node's topology group (a leaf switch, a rack); `rack=` is the
                               same column under another name

A saved `sinfo` table (`sinfo -p gpu > nodes.txt`, also -N, -R, --long and --json) names its nodes too:
its NODELIST (or HOSTNAMES) column, folded or not, each node once.

A host name is data that ends up on an ssh command line, so it is validated strictly: anything that
is not a host name, an IPv4 address or a bracketed IPv6 address (`a;touch /tmp/x`, `$(reboot)`,
`-oProxyCommand=...`) is rejected before anything runs. Every problem raises HostsFileError naming
the file and the line.

One node is one node: two lines that reach the same sshd (`gpu01`, `gpu01:22`, `alice@gpu01`,
`GPU01.`, `[fd00:0::7]` and `[fd00::7]`; ssh's port is 22 when none is given) are refused with the
line of each, and so are two names that resolve to the same address and port (`nodes_from_arg`
resolves them, bounded in time): otherwise one machine written twice would meet `expect.nodes`.
A file names at most MAX_NODES nodes (100,000), a line's node set counted before it is expanded
(preflight.core.nodeset.expand, which also reads `--nodes`, `history --nodes` and Slurm's node lists).
"""

from __future__ import annotations

import ipaddress
import os
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from preflight.core.nodeset import MAX_NODES, NodeSetError, expand
from preflight.integrations.topology import valid_group_name

MAX_HOSTS_FILE_BYTES = 64 * 1024 * 1024  # MAX_NODES lines of a host name, options and a comment each
SSH_PORT = 22  # what ssh connects to when neither the line nor ~/.ssh/config names a port
RESOLVE_LIMIT_S = 5.0  # the time all name look-ups of a hosts file may take together

# RFC 1123 labels, plus '_': a name may be a Host alias from ~/.ssh/config, which ssh resolves
# itself and which people write as gpu_a or train_node1. Never a leading '-' (ssh would read an
# option), never a shell metacharacter.
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_NUMBER = re.compile(r"[0-9]{1,6}")
_IPV6_ZONE = re.compile(r"^[A-Za-z0-9_.-]+$")
_KNOWN_OPTIONS = ("slots", "python", "group", "rack")


class HostsFileError(ValueError):
    """A hosts file that cannot be used; `line_no` is None when the problem is the whole file."""

    def __init__(self, path: str | Path, line_no: int | None, message: str) -> None:
        from preflight.core.redact import redact_text

        self.path = str(path)
        self.line_no = line_no
        self.message = redact_text(message)  # a line may hold `user:password@host`: the message quotes it
        where = f"{self.path}:{line_no}" if line_no is not None else self.path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Host:
    name: str  # as written, without the user: `gpu01`, `gpu01:2222`, `[fd00::7]:22`
    hostname: str  # what ssh connects to and other nodes reach: `gpu01`, `fd00::7`
    user: str | None = None
    port: int | None = None
    slots: int | None = None  # GPUs this node is expected to have
    python: str | None = None  # interpreter for preflight on this node; None: the run's default
    group: str | None = None  # topology group (`group=` or `rack=`): a leaf switch, a rack; None: not given
    line_no: int = 0

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.hostname


def load_hosts(path: str | Path) -> list[Host]:
    """Read and parse a hosts file."""
    from preflight.core.bounded import InputError, read_text

    try:
        text = read_text(path, MAX_HOSTS_FILE_BYTES)
    except InputError as exc:
        raise HostsFileError(path, None, exc.said()) from None
    return parse_hosts(text, path)


def saved_sinfo(text: str) -> dict | None:
    """Node name -> NodeState of a saved `sinfo` listing: a table (sinfo, -N, -R, --long: a header
    naming NODELIST or HOSTNAMES) or its `--json`; in its order, each node once; None for other text."""
    from preflight.integrations.slurm import SlurmError
    from preflight.integrations.slurm_json import node_states
    from preflight.integrations.slurm_tables import parse_table, sinfo_node_states

    if text.lstrip().startswith("{"):
        try:
            return node_states(text) or None
        except SlurmError:
            return None
    columns = {c.upper() for c in parse_table(text)["columns"]}
    if not columns & {"NODELIST", "HOSTNAMES"} or not columns & {"PARTITION", "STATE", "REASON", "NODES"}:
        return None
    return sinfo_node_states(text)


def sinfo_table_names(text: str) -> list[str] | None:
    """The node names of a saved `sinfo` listing (saved_sinfo), in its order; None for other text."""
    states = saved_sinfo(text)
    return None if states is None else list(states)


def parse_hosts(text: str, path: str | Path = "<hosts>") -> list[Host]:
    names = sinfo_table_names(text)
    if names is not None:  # `sinfo -p gpu > nodes.txt`: its nodes, each checked as a hosts line would be
        text = "\n".join(names)
    hosts: list[Host] = []
    seen: dict[tuple[str, int | None], Host] = {}
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        for host in _parse_line(line, line_no, path):
            key = (canonical(host.hostname), host.port or SSH_PORT)
            if key in seen:
                first = seen[key]
                raise HostsFileError(path, line_no, f"duplicate host {host.name!r}: the same node as "
                                                    f"{first.name!r} on line {first.line_no}")
            seen[key] = host
            hosts.append(host)
            if len(hosts) > MAX_NODES:
                raise HostsFileError(path, line_no, f"more than {MAX_NODES:,} nodes: at most {MAX_NODES:,} in all")
    if not hosts:
        raise HostsFileError(path, None, "no hosts: the file is empty or holds only comments")
    return hosts


def canonical(hostname: str) -> str:
    """One spelling per host: lower case, no trailing dot, an IPv6 address compressed."""
    name = hostname.lower().rstrip(".")
    address, sep, zone = name.partition("%")
    try:
        return str(ipaddress.ip_address(address)) + sep + zone
    except ValueError:
        return name


def same_endpoints(hosts: list[Host], path: str | Path, limit_s: float = RESOLVE_LIMIT_S) -> None:
    """HostsFileError (file:line of both) when two hosts resolve to the same address and port. Names
    are looked up in daemon threads for at most `limit_s` in all; one not resolved in time, or not at
    all (an alias only ~/.ssh/config knows), is compared by its name alone."""
    names = sorted({h.hostname for h in hosts})
    found: dict[str, set[str]] = {}
    todo: queue.Queue[str] = queue.Queue()
    for name in names:
        todo.put(name)

    def look_up() -> None:
        while True:
            try:
                name = todo.get_nowait()
            except queue.Empty:
                return
            try:
                infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
                found[name] = {canonical(str(info[4][0])) for info in infos}
            except (OSError, UnicodeError, ValueError):
                continue

    workers = [threading.Thread(target=look_up, daemon=True, name="preflight-resolve")
               for _ in range(min(16, len(names)))]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + limit_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    seen: dict[tuple[str, int], Host] = {}
    for host in sorted(hosts, key=lambda h: h.line_no):
        for address in sorted(dict(found).get(host.hostname, set())):
            key = (address, host.port or SSH_PORT)
            first = seen.setdefault(key, host)
            if first is not host:
                raise HostsFileError(path, host.line_no, f"duplicate host {host.name!r}: it reaches the same sshd as "
                                                         f"{first.name!r} on line {first.line_no} ({address} port {key[1]})")


def _parse_line(line: str, line_no: int, path: str | Path) -> list[Host]:
    def fail(message: str) -> HostsFileError:
        return HostsFileError(path, line_no, message)

    target, *words = line.split()
    # The host comes first: a line such as `a;touch /tmp/x` is reported as a bad host name.
    user = None
    if "@" in target:
        user, _, target = target.rpartition("@")
        if ":" in user:  # never quoted back: what follows the colon is a password
            raise fail(f"a password after the user name in {user.partition(':')[0] + ':***@' + target!r}: ssh "
                       "takes no password from a hosts file; remove it and use a key (ssh-agent, ~/.ssh/config)")
        if not _USER.match(user):
            raise fail(f"invalid user name {user!r}")
    if target.startswith("[") and ":" in target[1:max(target.find("]"), 0)]:
        endpoints = [_endpoint(target, fail)]
    else:
        try:
            names = expand(target, limit=MAX_NODES)  # a node set: gpu[001-064,070],login[1-2]
        except NodeSetError as exc:
            raise fail(str(exc)) from None
        endpoints = [_endpoint(name, fail) for name in names]

    options: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise fail(f"expected key=value after the host, got {word!r} (known keys: {', '.join(_KNOWN_OPTIONS)})")
        if key not in _KNOWN_OPTIONS:
            raise fail(f"unknown setting {key!r} (known: {', '.join(_KNOWN_OPTIONS)})")
        if key in options:
            raise fail(f"{key} is given twice")
        options[key] = value
    slots = None
    if "slots" in options:
        if not _NUMBER.fullmatch(options["slots"]):
            raise fail(f"slots must be a whole number, got {options['slots']!r}")
        slots = int(options["slots"])
    python = options.get("python")
    if python is not None and any(ord(c) < 32 or ord(c) == 127 for c in python):
        raise fail("python= holds a control character")
    group = _group(options, fail)
    return [
        Host(name=name, hostname=hostname, user=user, port=port, slots=slots, python=python, group=group,
             line_no=line_no)
        for name, hostname, port in endpoints
    ]


def _group(options: dict[str, str], fail) -> str | None:
    """The node's topology group from `group=` or `rack=` (one of them), checked as a name."""
    given = [key for key in ("group", "rack") if key in options]
    if len(given) > 1:
        raise fail("group= and rack= name the same thing: give one of them")
    if not given:
        return None
    key = given[0]
    value = options[key]
    if not valid_group_name(value):
        raise fail(f"{key}= must be a name of letters, digits and '_ . : / -' starting with a letter or digit, "
                   f"at most 64 characters; got {value!r}")
    return value


def _endpoint(written: str, fail) -> tuple[str, str, int | None]:
    """(name, hostname, port) from `host`, `host:port`, `[v6]` or `[v6]:port` (ranges already expanded)."""
    port_text = None
    if written.startswith("["):
        close = written.find("]")
        if close < 0:
            raise fail(f"invalid host {written!r}: '[' without ']'")
        hostname, rest = written[1:close], written[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise fail(f"invalid host {written!r}: expected ':port' after ']'")
            port_text = rest[1:]
        _check_ipv6(hostname, written, fail)
    else:
        hostname, sep, port_text_or_empty = written.partition(":")
        if sep:
            port_text = port_text_or_empty
            if ":" in port_text:
                raise fail(f"invalid host {written!r}: IPv6 addresses must be written in brackets, as [addr]:port")
        _check_hostname(hostname, fail)
    port = None
    if port_text is not None:
        if not _NUMBER.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise fail(f"invalid port {port_text!r} in {written!r}: expected 1-65535")
        port = int(port_text)
    return written, hostname, port


def _check_hostname(name: str, fail) -> None:
    if not name:
        raise fail("missing host name")
    if re.fullmatch(r"[0-9.]+", name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise fail(f"invalid IPv4 address {name!r}") from None
        return
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise fail(
            f"invalid host name {name!r}: use letters, digits, '-' and '_' in dot-separated labels "
            "(a DNS name or an alias from ~/.ssh/config, not starting with '-'), an IPv4 address, or an IPv6 "
            "address in brackets"
        )


def _check_ipv6(text: str, written: str, fail) -> None:
    address, _, zone = text.partition("%")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise fail(f"invalid IPv6 address in {written!r}") from None
    if zone and not _IPV6_ZONE.match(zone):
        raise fail(f"invalid IPv6 zone in {written!r}")


FILE_SUFFIXES = (".txt", ".hosts", ".list", ".cfg", ".conf", ".ini", ".csv")


def nodes_from_arg(value: str) -> list[Host]:
    """The nodes a `--nodes VALUE` names: the hosts file at that path when one exists, else the value
    itself read as a node set or host list (`gpu[001-064,070]`, `rack[1-2]-gpu[01-08]`, `gpu01,gpu02`),
    with the same checks as a hosts file line (no shell metacharacters, no leading '-')."""
    path = Path(os.path.expanduser(value))
    if path.is_file():
        hosts = load_hosts(path)
        same_endpoints(hosts, path)
        return hosts
    if "/" in value or path.suffix.lower() in FILE_SUFFIXES:
        raise HostsFileError(value, None, "no such hosts file (a node set has no '/' and no file suffix)")
    if value.strip().startswith("-"):
        raise HostsFileError("--nodes", None, f"{value!r} is neither a file nor a node set (it starts with '-')")
    if not value.strip():
        raise HostsFileError("--nodes", None, "no nodes given")
    hosts = parse_hosts(value, "--nodes")
    same_endpoints(hosts, "--nodes")
    return hosts
