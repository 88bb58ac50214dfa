"""The seam between the coordinator, a step driver, an agent and a check child, written down.

- `NodeJob`: what an agent is asked (its first line on stdin): the node, its checks, what to expect.
  A job shared by every task of one Slurm job step names its nodes and the environment variable
  that tells a task its node; `NodeJob.own` takes a task's part of it.
- `CheckJob`: what one check child is asked (`python -m preflight.engine.check_process`, on stdin).
- The events a driver reports to the runner, and the runner to whoever shows progress: `Started`,
  `Result`, `NodeReached`, `NodeLost`.

Each is a dataclass with `to_dict` and `from_dict`; a dict carries `PROTOCOL_VERSION` under
"protocol", and `from_dict` refuses another version or a malformed message with a `ProtocolError`
that names the message, the key and what was wrong. The keys of the jobs are the ones agents have
always read, so an agent of another preflight version still reads enough of a job to say its version.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping, Union

from preflight.core.model import CheckResult

PROTOCOL_VERSION = 1


class ProtocolError(ValueError):
    """A message that is not this protocol's: another version, a missing key, a value of the wrong type."""


def _check_version(kind: str, data: Any) -> None:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{kind}: expected a JSON object, got {type(data).__name__}")
    version = data.get("protocol")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"{kind}: protocol version {version!r}, this preflight speaks {PROTOCOL_VERSION} "
                            f"(install the same preflight-cluster version on the coordinator and every node)")


_TYPES: dict[type, tuple[type, ...]] = {str: (str,), float: (int, float), int: (int,), dict: (dict,),
                                        list: (list,), bool: (bool,)}


def _get(kind: str, data: Mapping[str, Any], key: str, want: type, default: Any = ...) -> Any:
    """data[key] as `want` (None allowed where the default is None); a ProtocolError naming it otherwise."""
    if key not in data or (data[key] is None and default is not ...):
        if default is ...:
            raise ProtocolError(f"{kind}: missing {key!r}")
        return default() if callable(default) else default
    value = data[key]
    if isinstance(value, bool) and want is not bool or not isinstance(value, _TYPES[want]):
        raise ProtocolError(f"{kind}: {key!r} should be {want.__name__}, got {type(value).__name__} {value!r:.80}")
    return float(value) if want is float else value


@dataclass(frozen=True)
class CheckSpec:
    """One check of a NodeJob: its id, its timeout and its parameter overrides."""

    id: str
    timeout_s: float
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "timeout_s": self.timeout_s, "params": self.params}

    @classmethod
    def from_dict(cls, data: Any) -> CheckSpec:
        if not isinstance(data, Mapping):
            raise ProtocolError(f"node job: a check should be an object, got {type(data).__name__}")
        kind = "node job check"
        return cls(_get(kind, data, "id", str), _get(kind, data, "timeout_s", float),
                   _get(kind, data, "params", dict, dict))


@dataclass(frozen=True)
class CheckJob:
    """What one check child is asked. `earlier` (node checks: the facts of the checks before it on the
    node), `nodes`, `node_facts`, `unreachable` and `cluster_facts` (cluster checks: the facts of the
    cluster checks that ran before, by id) are empty where they do not apply."""

    check_id: str
    node: str
    output_dir: str
    timeout_s: float
    scratch_dir: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=dict)
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    node_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    cluster_facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": PROTOCOL_VERSION, "check_id": self.check_id, "node": self.node,
                "output_dir": self.output_dir, "timeout_s": self.timeout_s, "scratch_dir": self.scratch_dir,
                "params": self.params, "expect": self.expect, "earlier": self.earlier, "nodes": self.nodes,
                "node_facts": self.node_facts, "unreachable": self.unreachable, "cluster_facts": self.cluster_facts}

    @classmethod
    def from_dict(cls, data: Any) -> CheckJob:
        kind = "check job"
        _check_version(kind, data)
        return cls(
            check_id=_get(kind, data, "check_id", str), node=_get(kind, data, "node", str),
            output_dir=_get(kind, data, "output_dir", str), timeout_s=_get(kind, data, "timeout_s", float),
            scratch_dir=_get(kind, data, "scratch_dir", str, None) or None,
            params=_get(kind, data, "params", dict, dict), expect=_get(kind, data, "expect", dict, dict),
            earlier=_get(kind, data, "earlier", dict, dict), nodes=_get(kind, data, "nodes", list, list),
            node_facts=_get(kind, data, "node_facts", dict, dict),
            unreachable=_get(kind, data, "unreachable", list, list),
            cluster_facts=_get(kind, data, "cluster_facts", dict, dict),
        )


def addressed_node(data: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """The node a job is for, as this task sees it: the job's node, or for a job shared by several
    nodes the one its environment names (None when it names none of the job's nodes). Read leniently,
    so that an agent can say hello even to a job it cannot otherwise read. Pure."""
    if not data.get("node_env"):
        node = data.get("node")
        return node if isinstance(node, str) else None
    node = environ.get(str(data["node_env"])) or None
    nodes = data.get("nodes")
    return node if isinstance(nodes, Mapping) and node in nodes else None


@dataclass(frozen=True)
class NodeJob:
    """What an agent is asked: run `checks` on `node`, expecting `expect`.

    `output_dir` and `scratch_dir` are the coordinator's on the local node, None on a remote one (the
    agent makes its own). A job shared by the tasks of one job step has no node of its own: `node_env`
    names the environment variable that tells a task its node and `nodes` each node's expect where it
    differs from the common one. `max_line` > 0: lines longer than that go out in pieces."""

    node: str | None
    checks: list[CheckSpec]
    expect: dict[str, Any] = field(default_factory=dict)
    output_dir: str | None = None
    scratch_dir: str | None = None
    coordinator_version: str = ""
    max_line: int = 0
    node_env: str | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION, "node": self.node, "output_dir": self.output_dir,
            "scratch_dir": self.scratch_dir, "expect": self.expect, "coordinator_version": self.coordinator_version,
            "checks": [c.to_dict() for c in self.checks], "max_line": self.max_line,
        }
        if self.node_env:
            data.update(node_env=self.node_env, nodes=self.nodes)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> NodeJob:
        kind = "node job"
        _check_version(kind, data)
        node_env = _get(kind, data, "node_env", str, None)
        checks = _get(kind, data, "checks", list)
        nodes = _get(kind, data, "nodes", dict, dict)
        for name, part in nodes.items():
            if not isinstance(part, Mapping) or not isinstance(part.get("expect", {}), Mapping):
                raise ProtocolError(f"{kind}: node {name!r} should be an object with an optional 'expect' object")
        return cls(
            node=_get(kind, data, "node", str, None) if not node_env else None,
            checks=[CheckSpec.from_dict(c) for c in checks], expect=_get(kind, data, "expect", dict, dict),
            output_dir=_get(kind, data, "output_dir", str, None), scratch_dir=_get(kind, data, "scratch_dir", str, None),
            coordinator_version=_get(kind, data, "coordinator_version", str, ""),
            max_line=_get(kind, data, "max_line", int, 0), node_env=node_env, nodes=nodes,
        )

    def own(self, environ: Mapping[str, str]) -> NodeJob:
        """This task's part of a job shared by several nodes: its node (None when the environment names
        none of the job's nodes) and that node's expect; a job for one node as it is. Pure."""
        if not self.node_env:
            return self
        node = addressed_node({"node_env": self.node_env, "nodes": self.nodes}, environ)
        expect = (self.nodes.get(node) or {}).get("expect", self.expect) if node else self.expect
        return NodeJob(node=node, checks=self.checks, expect=expect, output_dir=self.output_dir,
                       scratch_dir=self.scratch_dir, coordinator_version=self.coordinator_version,
                       max_line=self.max_line)


# -- the events a driver reports to the runner ------------------------------------------------------
class _Event:
    """An event's dict is its fields (text, unless it says otherwise) with its name under "event"."""

    NAME: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return {"protocol": PROTOCOL_VERSION, "event": self.NAME, **values}

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        _check_event(cls.NAME, data)
        return cls(*(_get(f"{cls.NAME} event", data, f.name, str) for f in fields(cls)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Started(_Event):
    """`node`'s agent started `check_id` (CLUSTER_NODE for a cluster check)."""

    NAME = "started"
    node: str
    check_id: str


@dataclass(frozen=True)
class Result(_Event):
    """A check's result, with the node named as the user named it."""

    NAME = "result"
    result: CheckResult

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": PROTOCOL_VERSION, "event": self.NAME, "result": self.result.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> Result:
        _check_event(cls.NAME, data)
        raw = _get("result event", data, "result", dict)
        try:
            return cls(CheckResult.from_dict(raw))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"result event: not a check result ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class NodeReached(_Event):
    """`node`'s agent said hello, in this preflight's version: the node is reachable."""

    NAME = "node_reached"
    node: str


@dataclass(frozen=True)
class NodeLost(_Event):
    """`node` cannot be used, for `reason`; the ERROR of each check it did not finish follows as Results."""

    NAME = "node_lost"
    node: str
    reason: str


Event = Union[Started, Result, NodeReached, NodeLost]


def _check_event(name: str, data: Any) -> None:
    _check_version(f"{name} event", data)
    if data.get("event") != name:
        raise ProtocolError(f"{name} event: 'event' is {data.get('event')!r}, not {name!r}")
