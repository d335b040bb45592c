"""Review round 175: the night operator's PostgreSQL server gone for a few seconds mid-run.

A commit that failed as the server went away (`service postgresql restart`, its session ended, the
server stopped for 10 s) stopped the run at once, exit 5 and `farm import`: a night's run lost to a
5-second restart. Writes now wait for it up to farm.yaml's `store_wait`, each retry finding its own
rows where the failed try's commit landed after all; other failures still stop the run at once.

The server here is the tests' real one, behind a TCP proxy the test takes down and brings back (a
restart of the shared server would break every other test using it): refused connections and
sessions cut mid-transaction, as a restart gives.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from sqlalchemy import create_engine, func, make_url, select, text
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
    result_record,
)
from toyfarm import toy_on_t4

from orchestrator.errors import StoreError
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import DatabaseLock
from orchestrator.store.tables import Attempt, ResultRow, Run


class Proxy:
    """127.0.0.1:port -> the server: down() refuses new connections and cuts every open one."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.cut_after_commit = False  # the next COMMIT reaches the server, then its connection is cut
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(32)
        listener.settimeout(0.1)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.close()
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(self.target)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and self.cut_after_commit and b"COMMIT" in data:
                    self.cut_after_commit = False
                    source.shutdown(socket.SHUT_RDWR)  # the farm's end cut first: no answer reaches it
                    sink.sendall(data)  # and the server takes the COMMIT all the same
                    time.sleep(0.3)
                    sink.shutdown(socket.SHUT_RDWR)
                    return
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxied(postgres_url: str) -> Iterator[tuple[str, Proxy]]:  # noqa: F811
    url = make_url(postgres_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.up()
    try:
        yield url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), proxy
    finally:
        proxy.down()


def _count(url: str, table: type, run_id: int) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            return db.execute(select(func.count()).select_from(table).where(table.run_id == run_id)).scalar_one()
    finally:
        engine.dispose()


def test_a_commit_that_landed_as_its_connection_was_cut_is_not_stored_twice(
    tmp_path: Path,
    proxied: tuple[str, Proxy],
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: exit 5 (StoreError "server closed the connection unexpectedly ... farm import").
    Figure: the server took the result's COMMIT, then its connection went (a restart); the retry
    finds the row and adds no second one, nor a second attempt."""
    url, proxy = proxied
    said: list[str] = []
    store = Store(url)
    store.outage.wait, store.outage.say = 20, said.append
    store.journal = Journal(tmp_path / "journal", "cut")
    try:
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="cut", **RUN)
        from orchestrator.store.records import AttemptRecord

        tried = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v1", attempt=1, status="ok")
        proxy.cut_after_commit = True
        result_id = store.add_result(result_record(run_id, None, 1), [tried])
    finally:
        store.close()
    assert _count(postgres_url, ResultRow, run_id) == 1
    assert _count(postgres_url, Attempt, run_id) == 1
    engine = create_engine(postgres_url, poolclass=NullPool)
    with engine.connect() as db:
        assert db.execute(select(ResultRow.id).where(ResultRow.run_id == run_id)).scalar_one() == result_id
    engine.dispose()
    assert len(said) == 2 and "unreachable" in said[0] and "back" in said[1], said


def test_an_outage_past_store_wait_still_stops_with_the_journals_import(
    tmp_path: Path,
    proxied: tuple[str, Proxy],
    postgres_url: str,  # noqa: F811
) -> None:
    """Figure: the server gone longer than store_wait (1 s): exit 5's StoreError naming the journal
    after about that wait, and the import it names takes the cell."""
    url, proxy = proxied
    store = Store(url)
    store.outage.wait, store.outage.say = 1.0, lambda _line: None
    store.journal = Journal(tmp_path / "journal", "long")
    run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="long", **RUN)
    proxy.down()
    began = time.monotonic()
    with pytest.raises(StoreError, match="farm import") as info:
        store.add_result(result_record(run_id, None, 1))
    waited = time.monotonic() - began
    assert 0.9 <= waited < 8, waited
    assert "store_wait" in str(info.value), info.value
    store.journal.close()
    store.close()
    after = Store(postgres_url)
    try:
        imported = after.import_journal(tmp_path / "journal" / "long.jsonl")
        assert imported.run_id == run_id and imported.results == 1, imported
    finally:
        after.close()
    assert _count(postgres_url, ResultRow, run_id) == 1


def test_a_failure_that_is_no_outage_still_stops_at_once(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    """Figure: a statement timeout behind a DBA's table lock, store_wait 30 s: exit 5 at once."""
    store = Store(f"{postgres_url}?options=-c%20statement_timeout%3D300")
    store.outage.wait = 30
    store.journal = Journal(tmp_path / "journal", "dba")
    run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="dba", **RUN)
    other = create_engine(postgres_url, poolclass=NullPool)
    try:
        with other.connect() as dba:
            dba.execute(text("LOCK TABLE results IN ACCESS EXCLUSIVE MODE"))
            began = time.monotonic()
            with pytest.raises(StoreError, match="farm import"):
                store.add_result(result_record(run_id, None, 1))
            assert time.monotonic() - began < 5
            dba.rollback()
    finally:
        other.dispose()
        store.close()


def test_the_run_lock_is_taken_again_after_the_server_came_back(proxied: tuple[str, Proxy]) -> None:
    """Before: the lock's check read a server gone as "another farm run may hold it now" and stopped
    the run. Figure: its session cut; while the server is away the check says unreachable (a
    transient error), and back, it takes the lock again."""
    from orchestrator.store.lock import check_held, recheck_held
    from orchestrator.store.outage import StoreUnreachable

    url, proxy = proxied
    with DatabaseLock(url, 0):
        proxy.down()
        recheck_held(url)
        with pytest.raises(StoreUnreachable):
            check_held(url)
        proxy.up()
        for _ in range(50):  # as the store's writes do: its cut session ends on the server in a moment
            recheck_held(url)
            try:
                check_held(url)  # taken again
                break
            except StoreUnreachable:
                time.sleep(0.1)
        else:
            pytest.fail("the run lock was not taken again")


SLEEPY = """\
#include <cstdio>
#include <unistd.h>
int main() { usleep(700000); std::printf("toy: PASS\\n"); return 0; }
"""


def test_a_night_run_whose_server_went_away_for_seconds_finishes(
    tmp_path: Path,
    proxied: tuple[str, Proxy],
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: exit 5, "failed writing: ... server closed the connection unexpectedly ... farm import".
    Figure: the server away for 3 s after the run's first result; the run finishes exit 0, each
    cell stored once, said once gone and once back."""
    url, proxy = proxied
    config, env = toy_on_t4(tmp_path / "farm", source=SLEEPY)
    job = config.parent / "jobs" / "toy.yaml"
    plain = job.read_text().split("  plain:\n", 1)[1]
    job.write_text(job.read_text() + "".join(f"  v{i}:\n{plain}" for i in range(2, 6)))
    config.write_text(config.read_text().replace("sqlite:///results.db", url) + "store_wait: 30\n")
    done: dict[str, object] = {}
    run = threading.Thread(target=lambda: done.update(r=farm("verify", "--all", cwd=config.parent, env=env)))
    run.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.is_alive():
        with contextlib.suppress(Exception):
            if _count(postgres_url, ResultRow, 1) >= 1:
                break
        time.sleep(0.1)
    proxy.down()
    time.sleep(3)
    proxy.up()
    run.join(180)
    result = done["r"]
    assert result.returncode == 0, result.stdout + result.stderr  # type: ignore[attr-defined]
    assert result.stderr.count("is unreachable") == 1, result.stderr  # type: ignore[attr-defined]
    assert "is back after" in result.stderr, result.stderr  # type: ignore[attr-defined]
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            rows = db.execute(select(ResultRow.variant, ResultRow.outcome).where(ResultRow.run_id == 1)).all()
            run_row = db.execute(select(Run.status, Run.exit_code)).all()
    finally:
        engine.dispose()
    assert sorted(rows) == [(v, "pass") for v in ("plain", "v2", "v3", "v4", "v5")], rows
    assert run_row == [("finished", 0)], run_row


@pytest.mark.parametrize("value", ["-1", "soon", ".inf"])
def test_a_bad_store_wait_is_a_config_error_naming_it(tmp_path: Path, value: str) -> None:
    config, env = toy_on_t4(tmp_path / "farm")
    config.write_text(config.read_text() + f"store_wait: {value}\n")
    done = farm("verify", "--all", cwd=config.parent, env=env, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "farm.yaml" in done.stderr and "store_wait" in done.stderr, done.stderr
