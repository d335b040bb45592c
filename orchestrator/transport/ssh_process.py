"""What ssh.py keeps beside its transport: a command left running on a channel (the resident
runner), and the closing of a connection, with what Fabric's close() leaves open.
"""

from __future__ import annotations

import contextlib

import paramiko
from fabric import Connection

from orchestrator.errors import SessionLost
from orchestrator.transport.base import Process
from orchestrator.transport.ssh_liveness import link_answers

# Bytes of a streamed command's own stderr kept (the farm's scripts send a kernel's elsewhere).
STDERR_KEEP = 1 << 16


def close_connection(conn: Connection) -> None:
    """Close `conn` and its jump host's connection. Fabric's close() closes only a connection it
    saw open (not one whose host key or authentication was refused: paramiko's connect() leaves
    that transport running) and never the gateway: each left a live connection, and paramiko's
    thread, until the farm exited (a reconnect window's probes, an overflow, a stop's sweep)."""
    conn.close()  # its SFTP, if any
    conn.client.close()  # paramiko's transport, whatever Fabric thinks of it
    if isinstance(conn.gateway, Connection):
        close_connection(conn.gateway)


# Seconds a resident process's channel may refuse a write, or stay silent between checks.
PROCESS_IO_TIMEOUT = 30.0


class ChannelProcess(Process):
    """A command left running on a channel of its own (the resident runner)."""

    def __init__(self, channel: paramiko.Channel, name: str) -> None:
        self._channel = channel
        self._name = name
        self._stderr = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self._channel.sendall(data)
        except (OSError, paramiko.SSHException, EOFError) as err:  # a full window for 30 s is a timeout here
            raise SessionLost(
                f"node {self._name!r}: the resident runner takes no more requests ({type(err).__name__}: {err})"
            ) from err

    def recv(self) -> bytes:
        while True:
            try:
                while self._channel.recv_stderr_ready():
                    self._stderr += self._channel.recv_stderr(1 << 16)[: max(STDERR_KEEP - len(self._stderr), 0)]
                return self._channel.recv(1 << 20)
            except TimeoutError:  # silent for a while: cells are running
                continue
            except (OSError, paramiko.SSHException, EOFError):
                return b""

    def stderr(self) -> str:
        with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
            while self._channel.recv_stderr_ready():
                self._stderr += self._channel.recv_stderr(1 << 16)[: max(STDERR_KEEP - len(self._stderr), 0)]
        return self._stderr.decode("utf-8", "replace")

    def close(self) -> None:
        with contextlib.suppress(OSError, paramiko.SSHException, EOFError):  # a dead connection: nothing to close
            self._channel.shutdown_write()
        with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
            self._channel.close()

    def drop(self) -> None:
        with contextlib.suppress(OSError, paramiko.SSHException, EOFError, AttributeError):
            self._channel.get_transport().close()  # its reader's recv ends, and every channel on it

    def answers(self, timeout: float) -> bool:
        """Whether the node answers on the process's connection (link_answers); one that does not is closed."""
        return link_answers(self._channel.get_transport(), timeout, self._name)
