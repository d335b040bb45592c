"""How the farm reaches a node: one interface (base.Transport), three ways.

local.py runs on the farm's own machine, ssh.py over OpenSSH through Fabric;
a Slurm transport (issue 5) will submit through a login node. Stages only ever
see the base interface.
"""

from __future__ import annotations

from ..schema import NodeSpec
from .base import CommandResult, Transport


def transport_for(name: str, node: NodeSpec) -> Transport:
    """A closed transport for a node; the network opens on first use."""
    if node.transport == "local":
        from .local import LocalTransport

        return LocalTransport(name, node)
    from .ssh import SSHTransport

    return SSHTransport(name, node)


__all__ = ["CommandResult", "Transport", "transport_for"]
