"""Transports run a command on a node. They know nothing about checks or reports.

A transport is one small class: `wrap(argv)` turns an argv meant for the node into an argv that
runs here (identity for the local node, `ssh ... -- host 'cmd'` for a remote one), and `run`/`spawn`
execute it. Everything is an argv list; nothing is ever handed to a local shell.
"""

from preflight.transport.base import Transport, TransportError
from preflight.transport.local import LocalTransport

__all__ = ["Transport", "TransportError", "LocalTransport", "transport_from_spec"]


def transport_from_spec(spec: dict) -> Transport:
    """Rebuild a transport from its JSON spec (transports cross into worker processes as data)."""
    kind = spec.get("kind", "local")
    if kind == "local":
        return LocalTransport.from_spec(spec)
    if kind == "ssh":
        from preflight.transport.ssh import SshTransport

        return SshTransport.from_spec(spec)
    if kind == "slurm":
        from preflight.transport.slurm import SlurmTransport

        return SlurmTransport.from_spec(spec)
    if kind == "k8s":
        from preflight.transport.k8s import K8sTransport

        return K8sTransport.from_spec(spec)
    raise ValueError(f"unknown transport kind {kind!r}")
