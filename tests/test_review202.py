"""Review 202: the code merged since 60fb2b4, read for integration bugs."""

from __future__ import annotations

import errno
import socket

import pytest

from orchestrator.transport import ssh_dial


def test_an_address_family_the_farm_host_lacks_moves_the_dial_to_the_next_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: dial() made each address's socket outside its try, so a farm host whose kernel has no
    IPv6 (ipv6.disable=1: socket(AF_INET6) is EAFNOSUPPORT) failed a node whose name lists an AAAA
    address first (getaddrinfo gives it without AI_ADDRCONFIG; `localhost` with ::1 in /etc/hosts),
    its IPv4 address never tried, though the dial's promise is OpenSSH's, which goes on to the next.
    Figure: the node's IPv4 address, listening, dialled; the IPv6 one named with what it said."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    real_socket = socket.socket

    def addresses(host: str, port_: int, *_args: object) -> list[tuple[object, ...]]:
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2001:db8::1", port_, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_)),
        ]

    def no_ipv6(family: int = socket.AF_INET, *args: object, **kwargs: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssh_dial.socket, "getaddrinfo", addresses)
    monkeypatch.setattr(ssh_dial.socket, "socket", no_ipv6)
    try:
        sock = ssh_dial.dial("dual.example", port, 2.0)
        try:
            assert sock.getpeername() == ("127.0.0.1", port)
        finally:
            sock.close()
    finally:
        listener.close()
