"""How the farm reaches a node: one interface (base.Transport), three ways.

local.py runs on the farm's own machine, ssh.py over OpenSSH through Fabric,
slurm.py runs each command as a Slurm job submitted through a login node (one
of the other two). Stages only ever see the base interface.
"""

from __future__ import annotations

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.transport.base import CommandResult, Transport


def transport_for(name: str, node: NodeSpec, run_token: str | None = None) -> Transport:
    """A closed transport for a node; the network opens on first use. `run_token`
    names the farm run it works for (Slurm puts it in its job names)."""
    if node.transport == "local":
        from orchestrator.transport.local import LocalTransport

        return LocalTransport(name, node, run_token)
    if node.transport == "slurm":
        from orchestrator.transport.slurm import SlurmTransport

        return SlurmTransport(name, node, run_token)
    from orchestrator.transport.ssh import SSHTransport

    return SSHTransport(name, node, run_token)


__all__ = ["CommandResult", "Transport", "transport_for"]
