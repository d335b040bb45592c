"""paramiko as the farm tunes it for a command's latency and CPU (measured by
bench/ssh_command.py): Nagle's algorithm off, the delayed ACK turned off before
each read, AES-GCM asked for first, and an exec request that does not wait for
sshd's reply, so a command's stdin follows at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import paramiko

from orchestrator.transport.ssh_handshake import SpokenTransport

DEFAULT_POLL = paramiko.Transport._active_check_timeout  # 0.1 s
IDLE_POLL = 1.0  # seconds paramiko's reader sleeps in recv() before it looks whether it was closed


class QuickAck:
    """A TCP socket whose reads first turn Linux's delayed ACK off again (TCP_QUICKACK
    does not stay set). sshd writes without TCP_NODELAY on a session without a
    terminal, so a small message of its that follows another one the farm has not
    ACKed yet waits for the farm's delayed ACK: 40 ms, at each of the handshake's
    and the first command's such turns (measured: 42 ms in authentication, 44 ms
    in opening the first channel, against 1 ms after)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return self._sock.recv(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class TunedTransport(SpokenTransport):
    """paramiko's (with ssh_handshake.py's words), asking for AES-GCM first. With its default
    AES-CTR and HMAC, paramiko computes each packet's MAC and compares it in Python (a fifth
    of the farm's SSH reader thread in bench/fleet.py's profile); GCM's tag is checked inside
    the cipher, in C. Every OpenSSH since 6.2 offers it; a server that does not still
    gets the others, in paramiko's order."""

    _preferred_ciphers = (
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        *(name for name in paramiko.Transport._preferred_ciphers if "-gcm@" not in name),
    )

    def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
        # through a jump host `sock` is a channel of the jump's connection: nothing to set
        if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Nagle off: a command is several small messages in a row (open, exec, stdin, EOF)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._tcp = True
            if hasattr(socket, "TCP_QUICKACK"):  # Linux
                sock = QuickAck(sock)
        super().__init__(sock, *args, **kwargs)

    _tcp = False  # its socket is the node's TCP connection (not a jump host's channel)

    def settle(self) -> None:
        """Once connected: paramiko's reader wakes every 0.1 s to see whether it was closed,
        1.1 ms of the farm's CPU per connection per second of a kernel's run, the bulk of
        what a node costs while its cells run (bench/README, session 33). stop_thread wakes
        it at once instead, so it sleeps until there is something to read, looking every
        IDLE_POLL s (keepalives, a rekey the farm's writes asked for). The handshake keeps
        paramiko's 0.1 s, which its banner and handshake timeouts are checked at."""
        if self._tcp:
            try:
                self.sock.settimeout(IDLE_POLL)
            except OSError:  # the node dropped it since it was opened: the reader closed it and ended
                return  # (EBADF had _dial report an authentication the node had accepted as refused)
            self._active_check_timeout = IDLE_POLL

    def stop_thread(self) -> None:
        """paramiko's, with the reader woken at once: closing a socket does not wake a
        recv() blocked on it in another thread, shutting it down does."""
        self.active = False
        if self._active_check_timeout > DEFAULT_POLL and self is not threading.current_thread():
            # before the packetizer's close, which closes the socket: a closed one can't be shut down
            with contextlib.suppress(OSError):  # already shut down or closed: nothing to wake
                self.sock.shutdown(socket.SHUT_RDWR)
        super().stop_thread()


def exec_nowait(channel: paramiko.Channel, command: str) -> None:
    """paramiko's exec_command without waiting for sshd's reply (a round trip per
    command: 50 ms to a node 50 ms away); its stdin may follow at once, as
    OpenSSH's own client does. The reply is still asked for: a refusal (sshd
    could not fork) makes paramiko close the channel, which SSHTransport._run_streamed
    reports as a lost session, rather than a channel left open until the deadline."""
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("exec")
    message.add_boolean(True)
    message.add_string(command)
    channel.transport._send_user_message(message)
