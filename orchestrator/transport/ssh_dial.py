"""The farm's TCP dial to a node: each address of its host name in turn, as OpenSSH's ssh does
(red-team round 199).

paramiko's SSHClient.connect moves to a name's next address only after ECONNREFUSED or
EHOSTUNREACH: a first address whose SYNs go unanswered (a stale A record, a broken IPv6 route)
or that gives ENETUNREACH failed the node, though its second address answered. Here every
address gets the node's connect_timeout, in getaddrinfo's order, and where none answers the
error names each and what it said. The host-key check is unchanged: paramiko is still given
the node's name, and known_hosts is read for `name` or `[name]:port` (OpenSSH's, with its
default CheckHostIP no).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import threading
import time
from typing import Any

from fabric import Connection
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.transport.ssh_watchdog import STOP_THREADS, WATCHDOG

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


def dial(host: str, port: int, timeout: float | None) -> socket.socket:
    """A connected socket to the first of `host`'s addresses that answers within `timeout` each.
    socket.gaierror where the name does not resolve; NoValidConnectionsError (every address's
    error, in the order tried) where none answers."""
    errors: dict[tuple[Any, ...], OSError] = {}
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM):
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
        if self.is_connected or self.gateway:
            return super().open()
        self.connect_kwargs["sock"] = dial(self.host, self.port, self.connect_timeout)
        try:
            return super().open()
        finally:
            # the socket is the transport's now (closed with it); a later open() dials again
            self.connect_kwargs.pop("sock", None)
