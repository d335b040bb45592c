"""Review round 183: a PostgreSQL server that stops answering an open session (hung, SIGSTOPped, a
firewall's DROP) mid-run, and a run that store_wait ended (exit 5) seen in its reports.

The server is the tests' real one behind test_review182's fault proxy (never a restart of the shared
server): its `blackhole` swallows every byte of the open sessions and of new ones, never closing
them, as a hung server whose host still acknowledges TCP does (keepalives see nothing of it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import make_url
from test_redteam87 import RUN
from test_review175 import _count
from test_review182 import Faults, _store, faults  # noqa: F401 (fixture)
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
    result_record,
)

from orchestrator.errors import StoreError
from orchestrator.store import liveness
from orchestrator.store.database import Store
from orchestrator.store.lock import DatabaseLock
from orchestrator.store.tables import ResultRow


def _write_in_thread(store: Store, run_id: int) -> tuple[threading.Thread, list[object]]:
    """A result written on a thread; what it ended with (None, or its error) and its seconds."""
    ended: list[object] = []

    def write() -> None:
        began = time.monotonic()
        try:
            store.add_result(result_record(run_id, None, 1))
            ended.append(None)
        except StoreError as err:
            ended.append(err)
        ended.append(time.monotonic() - began)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread, ended


def test_a_hung_server_ends_the_run_within_store_wait_not_never(
    tmp_path: Path,
    faults: tuple[str, Faults],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the write was still waiting after 90 s (it waits for ever: the proxy's kernel ACKs every
    byte, as a SIGSTOPped postgres's does), holding the write lock and the run lock. Figure: the run
    lock held, a store_wait of 4 s, every session of the server swallowed from the run's start on,
    ANSWER_WAIT 8 s (the farm's 30 s took 38 s of CI; still past store_wait and the probe's 3 s, as
    30 s is): the write fails, unreachable, within ANSWER_WAIT + store_wait + a margin."""
    monkeypatch.setattr(liveness, "ANSWER_WAIT", 8.0)
    url, proxy = faults
    with DatabaseLock(url, 0):
        store = _store(url, tmp_path, 4)
        try:
            run_id = store.begin_run(host="a", config_file="f", token="hung", **RUN)
            time.sleep(1.1)  # the lock's session is looked at on the next write (lock.CHECK_EVERY)
            proxy.blackhole = True
            thread, ended = _write_in_thread(store, run_id)
            thread.join(90)
            assert not thread.is_alive(), "the write still waits on the hung server"
        finally:
            proxy.blackhole = False
            proxy.cut()
            store.close()
    assert isinstance(ended[0], StoreError), ended
    assert "store_wait" in str(ended[0])
    assert ended[1] < liveness.ANSWER_WAIT + 4 + 8, ended


def test_a_server_hung_a_while_is_waited_out_and_the_result_stored_once(
    tmp_path: Path,
    faults: tuple[str, Faults],  # noqa: F811
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the write waited for ever, the server back or not. Figure: ANSWER_WAIT 3 s, store_wait
    30 s; the server hung 6 s, then back: the write's session is cut, its retries wait out the
    silence, the result is stored, once."""
    monkeypatch.setattr(liveness, "ANSWER_WAIT", 3.0)
    url, proxy = faults
    store = _store(url, tmp_path, 30)
    try:
        run_id = store.begin_run(host="a", config_file="f", token="back", **RUN)
        proxy.blackhole = True
        thread, ended = _write_in_thread(store, run_id)
        time.sleep(6)
        proxy.blackhole = False
        thread.join(40)
        assert not thread.is_alive(), "the write still waits on the server that hung"
    finally:
        proxy.blackhole = False
        store.close()
    assert ended[0] is None, ended
    assert _count(postgres_url, ResultRow, run_id) == 1


def test_a_sigterm_ends_a_write_stuck_on_a_hung_server_in_seconds(
    tmp_path: Path,
    faults: tuple[str, Faults],  # noqa: F811
) -> None:
    """Before: the stop waited behind the write for ever. Figure: store_wait 120 s, the server hung,
    the run stopped (its SIGTERM) 2 s into the write: the write gives up within 8 s of the stop,
    naming it."""
    url, proxy = faults
    store = _store(url, tmp_path, 120)
    stop_at: list[float] = []
    store.outage.stopped = lambda: "SIGTERM" if stop_at and time.monotonic() >= stop_at[0] else None
    try:
        run_id = store.begin_run(host="a", config_file="f", token="term", **RUN)
        proxy.blackhole = True
        thread, ended = _write_in_thread(store, run_id)
        stop_at.append(time.monotonic() + 2)
        thread.join(60)
        assert not thread.is_alive(), "the stopped write still waits on the hung server"
    finally:
        proxy.blackhole = False
        proxy.cut()
        store.close()
    assert isinstance(ended[0], StoreError) and "SIGTERM" in str(ended[0]), ended
    assert ended[1] < 2 + 8, ended


def _parameters(engine) -> dict[str, str]:
    with engine.connect() as connection:
        return connection.connection.dbapi_connection.info.get_parameters()


def test_sessions_get_keepalives_unless_the_url_sets_its_own(postgres_url: str) -> None:  # noqa: F811
    """Before: no keepalives, no tcp_user_timeout (libpq's defaults: the kernel's two hours idle, 15 min
    of retransmissions). Figure: the store's and the run lock's sessions get the farm's; a URL's own
    keepalives_idle=7 is kept, the rest added."""
    store = Store(postgres_url)
    try:
        given = _parameters(store.engine)
    finally:
        store.close()
    assert given.get("keepalives") == "1" and given.get("keepalives_idle") == "10", given
    assert given.get("tcp_user_timeout") == "30000", given
    own = make_url(postgres_url).update_query_dict({"keepalives_idle": "7"}).render_as_string(hide_password=False)
    store = Store(own)
    try:
        given = _parameters(store.engine)
    finally:
        store.close()
    assert given.get("keepalives_idle") == "7" and given.get("keepalives_count") == "3", given
    with DatabaseLock(postgres_url, 0) as lock:
        given = _parameters(lock._engine)
    assert given.get("tcp_user_timeout") == "30000", given


def test_a_run_that_store_wait_ended_looks_green_nowhere(
    tmp_path: Path,
    faults: tuple[str, Faults],  # noqa: F811
    postgres_url: str,  # noqa: F811
) -> None:
    """A check that stays so (it held before this round): a run ended by store_wait (exit 5) is
    never green. Figure: the server gone after the run's first result, store_wait 2 s: exit 5 naming
    store_wait and the journal; the site's index says the run did not finish; with the server back,
    its JSON is incomplete and not finished, its JUnit has the incomplete-run error; the next
    `farm verify` marks it aborted, its unfinished cells not-run, and its JSON stays incomplete."""
    import json

    from farm_cli import farm
    from test_review175 import SLEEPY
    from toyfarm import toy_on_t4

    url, proxy = faults
    config, env = toy_on_t4(tmp_path / "farm", source=SLEEPY)
    job = config.parent / "jobs" / "toy.yaml"
    plain = job.read_text().split("  plain:\n", 1)[1]
    job.write_text(job.read_text() + "".join(f"  v{i}:\n{plain}" for i in range(2, 5)))
    config.write_text(config.read_text().replace("sqlite:///results.db", url) + "store_wait: 2\n")
    done: dict[str, object] = {}
    run = threading.Thread(target=lambda: done.update(r=farm("verify", "--all", cwd=config.parent, env=env)))
    run.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.is_alive():
        try:
            if _count(postgres_url, ResultRow, 1) >= 1:
                break
        except Exception:
            pass
        time.sleep(0.1)
    proxy.down()
    run.join(120)
    ended = done["r"]
    assert ended.returncode == 5, ended.stdout + ended.stderr  # type: ignore[attr-defined]
    assert "store_wait" in ended.stderr and "farm import" in ended.stderr, ended.stderr  # type: ignore[attr-defined]
    index = (config.parent / "reports" / "index.html").read_text()
    assert "did not finish" in index and "Nothing here is a verdict" in index, index[:2000]
    proxy.up()
    exported = farm("report", "--format", "json", cwd=config.parent, env=env)
    assert exported.returncode != 0, exported.stdout
    body = json.loads(exported.stdout)
    assert body["complete"] is False and body["run"]["status"] != "finished", body["run"]
    junit = farm("report", "--format", "junit", cwd=config.parent, env=env)
    assert junit.returncode != 0 and 'type="incomplete-run"' in junit.stdout, junit.stdout[:2000]
    rendered = farm("report", cwd=config.parent, env=env)
    assert rendered.returncode == 0, rendered.stderr
    index = (config.parent / "reports" / "index.html").read_text()
    assert "Run 1 did not finish" in index and "not green" in index, index[:3000]
    again = farm("verify", "--all", cwd=config.parent, env=env)
    # its end and the results whose commits failed, from its journal (review 185)
    assert "run 1 had stopped with exit 5, its end taken from its journal, and " in again.stdout, again.stdout
    body = json.loads(farm("report", "--format", "json", "--run", "1", cwd=config.parent, env=env).stdout)
    assert body["complete"] is False and body["run"]["status"] == "aborted", body["run"]
