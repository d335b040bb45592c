"""A PostgreSQL server that stops answering an open session (review 183).

A session's query or COMMIT to a server that no longer answers waited for the kernel's TCP
retransmission timeout (about 15 min) or for ever, under the store's write lock: a night's run hung
holding the run lock, and a SIGTERM waited behind it. Two bounds, each a backstop of the other:

- libpq's TCP settings, for a URL that does not set its own: keepalives (a dead peer found on an
  idle session within about 25 s) and tcp_user_timeout (data unacknowledged for 30 s: a host gone,
  a firewall's DROP). Neither sees a server whose host still acknowledges TCP (a SIGSTOPped or hung
  postgres, a proxy that swallows every byte): its kernel answers the probes.
- a watchdog: a statement with no answer for ANSWER_WAIT seconds (STOP_GRACE once the run is
  stopped, OUTAGE_ANSWER while its server was found silent) has its server probed with a new
  connection; a server that gives no answer within a few seconds has the session's socket shut
  down, and the statement fails as a connection lost: store_wait waits it out (outage.py). A slow
  statement on a server that answers is left alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine, event, make_url
from sqlalchemy.engine import Engine

# libpq's TCP settings the farm gives a PostgreSQL session whose URL sets none of its own
TCP_SETTINGS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds idle before the first probe
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,  # milliseconds data may go unacknowledged
}
ANSWER_WAIT = 30.0  # seconds a statement may go unanswered before its server is probed
OUTAGE_ANSWER = 3.0  # as much, while its server was last found silent
STOP_GRACE = 2.0  # as much, once the run is stopped
PROBE_CONNECT = 3  # seconds the probe's new connection may take (libpq's least is 2)
LOOK_EVERY = 0.5  # seconds between the watchdog's looks
ACTIVE = 1  # libpq's PQTRANS_ACTIVE: a command sent, its answer not yet read


def tcp_settings(query: Any) -> dict[str, int]:
    """TCP_SETTINGS less those the URL's query sets (a site's own values are kept)."""
    return {key: value for key, value in TCP_SETTINGS.items() if key not in query}


def server_engine(
    url: str, connect_args: dict[str, Any], stopped: Callable[[], object] = lambda: None, **options: Any
) -> Engine:
    """A PostgreSQL engine with TCP_SETTINGS (where the URL sets none of its own), its sessions watched."""
    connect_args = {**tcp_settings(make_url(url).query), **connect_args}
    engine = create_engine(url, connect_args=connect_args, **options)
    _cargs, params = engine.dialect.create_connect_args(engine.url)
    watch(engine, {**params, **connect_args}, stopped)
    return engine


class _Watched:
    def __init__(self, engine: Engine, params: dict[str, Any], stopped: Callable[[], object]) -> None:
        self.engine = weakref.ref(engine)
        self.connect = engine.dialect.loaded_dbapi.connect
        self.params = params
        self.stopped = stopped
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self.active: dict[int, float] = {}  # id of a connection -> since when it was seen waiting
        self.silent = False  # the last probe of its server got no answer


_watched: list[_Watched] = []
_lock = threading.Lock()
_thread: threading.Thread | None = None
THREAD_NAME = "farm-db-watchdog"  # run/workers.py FORK_SAFE_THREADS: a child forked beside it resets it


def _forked() -> None:
    """In a forked child (a run's worker): no watchdog runs there, and its lock may have been held
    by it at the fork. The child watches its own engines anew, if it makes any. Without this the
    watchdog made every run after a PostgreSQL store start its workers from the fork server (CI)."""
    global _lock, _thread
    _lock = threading.Lock()
    _watched.clear()
    _thread = None


os.register_at_fork(after_in_child=_forked)


def watch(engine: Engine, params: dict[str, Any], stopped: Callable[[], object] = lambda: None) -> None:
    """Every session of `engine` (psycopg's) watched from now on; `params` connect a probe as the
    engine does, `stopped()` not None once the run is stopped."""
    global _thread
    watched = _Watched(engine, params, stopped)
    event.listen(engine, "connect", lambda dbapi, _record: watched.connections.add(dbapi))
    with _lock:
        _watched.append(watched)
        if _thread is None:
            _thread = threading.Thread(target=_watchdog, name=THREAD_NAME, daemon=True)
            _thread.start()


def _watchdog() -> None:
    while True:
        time.sleep(LOOK_EVERY)
        with _lock:
            _watched[:] = [one for one in _watched if one.engine() is not None]
            every = list(_watched)
        stopped = any(_quietly(one.stopped) is not None for one in every)
        for one in every:
            with contextlib.suppress(Exception):  # the watchdog never dies of one engine's trouble
                _look(one, stopped)


def _quietly(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception:
        return None


def _look(one: _Watched, stopped: bool) -> None:
    now = time.monotonic()
    waiting = {}
    for connection in list(one.connections):
        if connection.closed or connection.pgconn.transaction_status != ACTIVE:
            continue
        waiting[id(connection)] = (connection, one.active.get(id(connection), now))
    one.active = {key: since for key, (_c, since) in waiting.items()}
    grace = STOP_GRACE if stopped else OUTAGE_ANSWER if one.silent else ANSWER_WAIT
    due = [connection for connection, since in waiting.values() if now - since >= grace]
    if not due:
        return
    one.silent = not _answers(one, PROBE_CONNECT - 1 if stopped else PROBE_CONNECT)
    if not one.silent:  # slow, not gone: looked at again after a whole grace
        one.active.update(dict.fromkeys((id(c) for c in due), time.monotonic()))
        return
    for connection in due:
        if connection.pgconn.transaction_status == ACTIVE:
            _shut(connection)


def _answers(one: _Watched, seconds: int) -> bool:
    """Whether the server answers a new connection within `seconds` (an error it sends is an answer)."""
    try:
        probe = one.connect(**{**one.params, "connect_timeout": seconds})
    except Exception as err:
        return getattr(err, "sqlstate", None) is not None
    with contextlib.suppress(Exception):
        probe.close()
    return True


def _shut(connection: Any) -> None:
    """The session's socket shut down under it: libpq's wait ends, "server closed the connection"."""
    try:
        copy = os.dup(connection.pgconn.socket)
    except Exception:
        return  # closed meanwhile
    with contextlib.closing(socket.socket(fileno=copy)) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
