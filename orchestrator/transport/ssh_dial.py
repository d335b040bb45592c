"""The farm's TCP dial to a node: each address of its host name in turn, as OpenSSH's ssh does
(red-team round 199).

paramiko's SSHClient.connect moves to a name's next address only after ECONNREFUSED or
EHOSTUNREACH: a first address whose SYNs go unanswered (a stale A record, a broken IPv6 route)
or that gives ENETUNREACH failed the node, though its second address answered. Here every
address gets the node's connect_timeout, in getaddrinfo's order, and where none answers the
error names each and what it said. The host-key check is unchanged: paramiko is still given
the node's name, and known_hosts is read for `name` or `[name]:port` (OpenSSH's, with its
default CheckHostIP no).

A stop's cut (ssh_watchdog.py) ends each wait of a dial outside the stop's own threads: the
name's resolving, the TCP connect (review 213) and the SSH handshake (review 217).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import select
import socket
import threading
import time
from typing import Any

from fabric import Connection
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.transport.base import Deadline
from orchestrator.transport.ssh_watchdog import STOP_THREADS, WATCHDOG

# how long a handshake's watch waits for a cut: paramiko bounds the handshake itself (banner_timeout,
# auth_timeout); the watch is there for a stop's cut only
HANDSHAKE_WATCH = 86400.0

# how often a dial in progress asks whether a stop's cut is due: a SIGTERM while a node's dial hung (a
# black-holed address, connect_timeout 60 s) waited out the whole connect_timeout (red-team 207, review 213)
CUT_SLICE = 0.25


class DialCut(OSError):
    """A dial given up because the run is being stopped (WATCHDOG's cut is due)."""


def _connect(sock: socket.socket, address: Any, timeout: float | None) -> None:
    """sock.connect(address) within `timeout`, waited on in CUT_SLICE slices that end it once a stop's
    cut is due, unless this thread is the stop's own (its kills keep their full limits, as in the
    watchdog). TimeoutError past `timeout`, DialCut at the cut, the connect's OSError otherwise."""
    stops = threading.current_thread().name.startswith(STOP_THREADS)
    sock.setblocking(False)
    code = sock.connect_ex(address)
    if code in (errno.EINPROGRESS, errno.EAGAIN):
        end = None if timeout is None else time.monotonic() + timeout
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        while True:
            if not stops and WATCHDOG.cut_passed():
                raise DialCut(errno.ECANCELED, "dial given up: the run is being stopped")
            left = CUT_SLICE if end is None else min(CUT_SLICE, end - time.monotonic())
            if left <= 0:
                raise TimeoutError("timed out")
            if poller.poll(max(1, int(left * 1000))):
                break
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code:
        raise OSError(code, os.strerror(code))
    sock.settimeout(timeout)  # blocking again, with the node's timeout, for paramiko


def _resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    """getaddrinfo's answer for `host`, given up (DialCut) once a stop's cut is due: a resolver that
    hangs (a DNS server that answers nothing) held a SIGTERM as long as its own timeouts and retries
    (review 217). A name is resolved in a thread of its own, left to end by itself where the stop
    gives it up; an address (nothing to ask) and the stop's own threads resolve here, as before."""
    args = (host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    try:
        ipaddress.ip_address(host)
        numeric = True
    except ValueError:
        numeric = False
    if numeric or threading.current_thread().name.startswith(STOP_THREADS):
        return socket.getaddrinfo(*args)
    said: list[Any] = []
    done = threading.Event()

    def ask() -> None:
        try:
            said.append(socket.getaddrinfo(*args))
        except BaseException as err:  # handed to the dial's thread, raised there
            said.append(err)
        done.set()

    threading.Thread(target=ask, daemon=True, name="ssh-resolve").start()
    while not done.wait(CUT_SLICE):
        if WATCHDOG.cut_passed():
            raise DialCut(errno.ECANCELED, f"resolving {host} given up: the run is being stopped")
    if isinstance(said[0], BaseException):
        raise said[0]
    return said[0]


def dial(host: str, port: int, timeout: float | None) -> socket.socket:
    """A connected socket to the first of `host`'s addresses that answers within `timeout` each.
    socket.gaierror where the name does not resolve; NoValidConnectionsError (every address's
    error, in the order tried) where none answers; DialCut where a stop came while it resolved."""
    errors: dict[tuple[Any, ...], OSError] = {}
    for family, kind, proto, _, address in _resolve(host, port):
        sock = None
        try:
            # made in the try: a family this host lacks (no IPv6 in its kernel: EAFNOSUPPORT) is an
            # address that failed, as in OpenSSH, not the node's end (review 202)
            sock = socket.socket(family, kind, proto)
            _connect(sock, address, timeout)
            return sock
        except OSError as err:
            if sock is not None:
                sock.close()
            errors[address] = err
            if isinstance(err, DialCut):  # the run is being stopped: no next address
                break
    if not errors:  # getaddrinfo gives at least one address or raises; this is belt and braces
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
    raise NoValidConnectionsError(errors)


def answers(err: NoValidConnectionsError, timeout: float | None) -> str:
    """ "ADDRESS:PORT: what it said" for each address tried, IPv6 ones in brackets."""
    said = []
    for address, cause in err.errors.items():
        where = f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"
        if isinstance(cause, TimeoutError) and timeout:
            what = f"timed out after {timeout:g} s"
        else:
            what = cause.strerror or str(cause) or type(cause).__name__
        said.append(f"{where}: {what}")
    return "; ".join(said)


class DialedConnection(Connection):
    """Fabric's Connection, its socket dialled by dial() (a gateway's channel where it has one)."""

    def open(self) -> Any:
        if self.is_connected:
            return super().open()
        sock = None if self.gateway else dial(self.host, self.port, self.connect_timeout)
        if sock is not None:
            self.connect_kwargs["sock"] = sock
        # the handshake (banner, key exchange, login) waits up to paramiko's banner_timeout and
        # auth_timeout on a node that took the connection and says nothing (a frozen sshd): a stop's
        # cut ends that wait as it ends a command's (review 217); the stop's own dials keep theirs
        watch = WATCHDOG.watch(Deadline(HANDSHAKE_WATCH), lambda: self._cut(sock))
        try:
            return super().open()
        except Exception as err:
            if watch.fired:
                raise DialCut(errno.ECANCELED, "SSH handshake given up: the run is being stopped") from err
            raise
        finally:
            watch.cancel()
            # the socket is the transport's now (closed with it); a later open() dials again
            self.connect_kwargs.pop("sock", None)

    def _cut(self, sock: socket.socket | None) -> None:
        """Wakes the handshake's reader: a socket shut down (closing it would not wake a recv() in
        another thread), or through a jump host the transport closed (its channel with it)."""
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return
        link = self.client.get_transport()
        if link is not None:
            link.close()
