"""Review round 182: the store's wait for a PostgreSQL server gone mid-run (reviews 175, 178), its
open ends: a snapshot's landed lookup, a server that drops packets, "too many clients", the run
lock's check after an outage.

The server is the tests' real one behind test_review175's TCP proxy (never a restart of the shared
server), taught here to cut a COMMIT before the server has it, to swallow every byte (a firewall's
DROP), and to answer a connection "sorry, too many clients already" (SQLSTATE 53300).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, select
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_review175 import Proxy, _count
from test_store_backends import (  # noqa: F401 (fixtures)
    add_snapshot,
    postgres_admin,
    postgres_url,
    result_record,
)

from orchestrator.errors import StoreError
from orchestrator.store import lock as lock_module
from orchestrator.store import outage as outage_module
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import DatabaseLock
from orchestrator.store.records import AttemptRecord
from orchestrator.store.tables import NodeSnapshotRow, ResultRow


def _error_response(state: str, message: str) -> bytes:
    """A server's ErrorResponse, as PostgreSQL answers a connection it will not take."""
    fields = b"".join(code + text.encode() + b"\0" for code, text in ((b"S", "FATAL"), (b"C", state), (b"M", message)))
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


class Faults(Proxy):
    """test_review175's proxy, with three faults more: `cut_before_commit` (the next COMMIT never
    reaches the server: the try did not land), `blackhole` (new connections accepted, every byte
    read, none forwarded, none answered, never closed), `too_many` (new connections answered FATAL
    53300, as a server at max_connections does)."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self.cut_before_commit = False
        self.blackhole = False
        self.too_many = False

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:
                self._open.append(client)
            if self.blackhole:
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            if self.too_many:
                threading.Thread(target=self._refuse, args=(client,), daemon=True).start()
                continue
            server = socket.create_connection(self.target)
            with self._lock:
                self._open.append(server)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def cut(self) -> None:
        """Every open connection cut, as down() does, the listener kept."""
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    @staticmethod
    def _swallow(client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while client.recv(65536):
                pass

    @staticmethod
    def _refuse(client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                head = client.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                size, code = struct.unpack("!II", head)
                client.recv(size - 8, socket.MSG_WAITALL) if size > 8 else b""
                if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: neither spoken here
                    client.sendall(b"N")
                    continue
                client.sendall(_error_response("53300", "sorry, too many clients already"))
                client.shutdown(socket.SHUT_RDWR)
                return

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        if not from_client:
            return super()._pump(source, sink, from_client)
        try:
            while data := source.recv(65536):
                if self.cut_before_commit and b"COMMIT" in data:
                    self.cut_before_commit = False
                    source.shutdown(socket.SHUT_RDWR)  # neither end hears of it: the server rolls back
                    sink.shutdown(socket.SHUT_RDWR)
                    return
                if self.blackhole:
                    continue  # an open connection, its packets dropped too
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def faults(postgres_url: str) -> Iterator[tuple[str, Faults]]:  # noqa: F811
    url = make_url(postgres_url)
    proxy = Faults((url.host or "127.0.0.1", url.port or 5432))
    proxy.up()
    try:
        yield url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), proxy
    finally:
        proxy.blackhole = proxy.too_many = False
        proxy.down()


def _store(url: str, tmp_path: Path, wait: float, said: list[str] | None = None) -> Store:
    store = Store(url)
    store.outage.wait = wait
    store.outage.say = said.append if said is not None else lambda _line: None
    store.journal = Journal(tmp_path / "journal", "r182")
    return store


def test_a_cut_snapshot_is_stored_again_not_taken_for_the_nodes_earlier_one(
    tmp_path: Path,
    faults: tuple[str, Faults],
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: one snapshot row, and the second snapshot's id was the first's. The retry of a cut
    snapshot took the node's newest snapshot of the run as its own landed row; the try had not
    landed, and the node's newest was the one stored before it (scheduler.py's lost cells store
    one per missing cell). Figure: node n's second snapshot, its COMMIT cut before the server had
    it, for add_snapshot and add_node_records alike: stored, a new id each."""
    url, proxy = faults
    store = _store(url, tmp_path, 20)
    try:
        run_id = store.begin_run(host="a", config_file="f", token="snap", **RUN)
        first = add_snapshot(store, run_id)
        proxy.cut_before_commit = True
        second = add_snapshot(store, run_id)
        snapshot = store.snapshots(run_id)[-1]
        from orchestrator.store.records import SnapshotRecord

        record = SnapshotRecord(run_id=run_id, node="n", transport="local", address="local", gpu_count=1)
        tried = AttemptRecord(run_id=run_id, node="n", kernel="", variant="", attempt=1, status="ok")
        proxy.cut_before_commit = True
        third = store.add_node_records(tried, record)
    finally:
        store.close()
    assert snapshot.id == second
    assert len({first, second, third}) == 3, (first, second, third)
    assert _count(postgres_url, NodeSnapshotRow, run_id) == 3


def _cut_then(proxy: Faults, fault: str, seconds: float) -> threading.Thread:
    """Every open connection cut (a restart), new ones met by `fault` for `seconds`, then served."""
    setattr(proxy, fault, True)
    proxy.cut()
    back = threading.Thread(target=lambda: (time.sleep(seconds), setattr(proxy, fault, False)), daemon=True)
    back.start()
    return back


def test_too_many_clients_mid_run_is_waited_out_but_fails_a_farms_start_at_once(
    tmp_path: Path,
    faults: tuple[str, Faults],
    postgres_url: str,  # noqa: F811
) -> None:
    """ "sorry, too many clients already" (SQLSTATE 53300) as a restarted server's clients all come
    back at once: momentary, waited out like a refused connection. Figure: mid-run, 2 s of it; the
    result is stored once. At a farm's start (no run, no wait), its first connection fails at once,
    naming it."""
    url, proxy = faults
    store = _store(url, tmp_path, 20)
    try:
        run_id = store.begin_run(host="a", config_file="f", token="many", **RUN)
        back = _cut_then(proxy, "too_many", 2.0)
        began = time.monotonic()
        store.add_result(result_record(run_id, None, 1))
        assert time.monotonic() - began >= 1.5
        back.join()
    finally:
        store.close()
    assert _count(postgres_url, ResultRow, run_id) == 1
    proxy.too_many = True
    began = time.monotonic()
    with pytest.raises(StoreError, match="too many clients"):
        Store(url)
    assert time.monotonic() - began < 5


def test_too_many_clients_is_transient_by_its_sqlstate_too() -> None:
    """Before: False. libpq's refused connection carries no SQLSTATE, and its words made it transient;
    psycopg's own class for 53300 (a driver, or a pooler in front of the server, that gives it)
    stopped the run at once. Figure: TooManyConnections, wrapped as the store wraps it."""
    import psycopg

    from orchestrator.store.outage import transient

    try:
        try:
            raise psycopg.errors.TooManyConnections("sorry, too many clients already")
        except psycopg.Error as err:
            raise StoreError("the results database failed writing") from err
    except StoreError as wrapped:
        assert transient(wrapped)


def test_a_new_write_after_an_outage_looks_at_the_run_lock_first(
    tmp_path: Path,
    faults: tuple[str, Faults],
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: another thread's new write, the first after the server came back, was stored into
    the run another farm had closed meanwhile: the lock's session was looked at no more than once
    a CHECK_EVERY, and only a write tried again (review 175's recheck) forced the look. Figure: one
    thread's write fails as the server goes (its retry not yet due); another farm takes the free
    lock and closes the run; the server back, a second thread's new result is refused ("run
    lock"), not stored. CHECK_EVERY and the first pause are stretched to hold the window open."""
    monkeypatch.setattr(lock_module, "CHECK_EVERY", 60.0)
    monkeypatch.setattr(outage_module, "FIRST_PAUSE", 5.0)
    url, proxy = faults
    with DatabaseLock(url, 0):
        store = _store(url, tmp_path, 30)
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="new", **RUN)
        proxy.down()
        tried = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v1", attempt=1, status="ok")
        failed: list[BaseException] = []

        def first() -> None:
            try:
                store.add_attempt(tried)
            except StoreError as err:
                failed.append(err)

        writer = threading.Thread(target=first, daemon=True)
        writer.start()
        for _ in range(100):
            if store.outage._since is not None:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the server sees this run's lock session end
        with DatabaseLock(postgres_url, 5):
            other = Store(postgres_url)
            try:
                assert [a[:2] for a in other.abort_unfinished_runs()] == [(run_id, 1)]
            finally:
                other.close()
            proxy.up()
            with pytest.raises(StoreError, match="run lock"):
                store.add_result(result_record(run_id, None, 1))
            writer.join(20)
        store.close()
    assert failed, "the first thread's retry stored its attempt into the closed run"
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            assert db.execute(select(ResultRow.outcome)).scalars().all() == ["not-run"]
    finally:
        engine.dispose()


def _writers(store: Store, run_id: int, count: int) -> tuple[list[threading.Thread], list[float]]:
    """`count` threads, each storing a result; each one's seconds until its write raised."""
    took: list[float] = []

    def write(cell: int) -> None:
        began = time.monotonic()
        with contextlib.suppress(StoreError):
            store.add_result(result_record(run_id, None, cell))
        took.append(time.monotonic() - began)

    threads = [threading.Thread(target=write, args=(cell,), daemon=True) for cell in range(1, count + 1)]
    for thread in threads:
        thread.start()
    return threads, took


@pytest.mark.parametrize("stop", [False, True])
def test_a_server_that_drops_packets_costs_no_more_than_store_wait(
    tmp_path: Path,
    faults: tuple[str, Faults],
    stop: bool,
) -> None:
    """Before: each try waited out connect_timeout (10 s) under the write lock, the other threads
    behind it, the deadline counted from the first try's end: four threads took a minute past a
    store_wait of 4 s, and a SIGTERM waited behind every one of them. Figure: the server's sessions
    cut, then every new connection swallowed (a firewall's DROP); four threads write. Each stops
    within store_wait and a small margin; stopped 1 s after the outage was found (store_wait 120),
    within a few seconds of the stop."""
    url, proxy = faults
    store = _store(url, tmp_path, 120 if stop else 4)
    outage = store.outage

    def stopped() -> str | None:
        since = outage._since
        return "SIGTERM" if stop and since is not None and time.monotonic() >= since + 11 else None

    outage.stopped = stopped
    try:
        run_id = store.begin_run(host="a", config_file="f", token="drop", **RUN)
        proxy.blackhole = True
        proxy.cut()
        threads, took = _writers(store, run_id, 4)
        for thread in threads:
            thread.join(90)
    finally:
        proxy.blackhole = False
        proxy.cut()
        store.close()
    assert len(took) == 4, took
    assert max(took) < (11 + 4 if stop else 4 + 3), took
