"""Review 110: TunedTransport.settle on a connection the node dropped just after it was opened.

settle() sets the socket's timeout; where sshd closed the connection between the end of
authentication and the settle (sshd restarted, the node going down), paramiko's reader had
already closed the socket, settimeout raised EBADF, and _dial read that OSError as a refusal
during authentication: "authentication failed ... while the farm offered its keys ... MaxAuthTries".
The farm's keys had been accepted. Before settle the dead connection was returned and its first
command reported the lost session, as it does again.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fabric import Connection
from nodes import CARDS, Fleet, SshNode

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import ConnectError
from orchestrator.transport import transport_for
from orchestrator.transport.ssh_tuning import DEFAULT_POLL, TunedTransport


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


def test_settle_on_a_connection_already_closed_does_not_raise() -> None:
    client, peer = _tcp_pair()
    try:
        link = TunedTransport(client)
        link.sock.close()  # what paramiko's reader does at the end of its run, on the peer's EOF
        link.settle()
        assert link._active_check_timeout == DEFAULT_POLL  # nothing to wake at its close
        link.stop_thread()  # and its close still does nothing to the closed socket
    finally:
        peer.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> SshNode:
    fleet = Fleet(tmp_path_factory.mktemp("review110"))
    node = fleet.add("t4", CARDS["t4"])
    yield node
    fleet.stop()


def test_a_connection_dropped_after_authentication_is_not_an_authentication_failure(
    node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = Connection.open

    def dropped(self: Connection) -> object:
        result = opened(self)
        self.transport.sock.shutdown(socket.SHUT_RDWR)  # the node's side ends: the reader reads EOF
        self.transport.join(5)  # and closes the socket as it ends
        assert not self.transport.is_alive()
        return result

    monkeypatch.setattr(Connection, "open", dropped)
    transport = transport_for("t4", NodeSpec(**node.farm_entry(tmp_path / "work")))
    try:
        transport.open()
    except ConnectError as err:
        assert "authentication failed" not in str(err), err
    finally:
        transport.close()
