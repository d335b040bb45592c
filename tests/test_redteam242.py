"""Red-team round 242: the PostgreSQL store's integers and a DBA's transaction timeouts.

1. PostgreSQL's INTEGER is 32 bits. A node's bytes shipped past 2 GiB, a result's stream size, an
   instruction count past 2147483647 were cut to 2147483647 (result_rows.fit, round 233, on both
   backends: the same lie on each), and a table's ids stopped at 2147483647: "nextval: reached maximum
   value of sequence", every later run refused. Migration 0018 widens them to BIGINT on PostgreSQL
   (SQLite's INTEGER is 64 bits already: nothing to do there), and fit keeps them whole.
2. `idle_in_transaction_session_timeout` on the farm's role: the report's read snapshot is held while
   pages render between its reads, the server ended the session, and the render failed (`farm
   verify`: the run stored, its report never written, exit 5 or 70). The snapshot's transaction is
   exempt now (SET LOCAL), its own alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from test_metrics import new_run, result_record
from test_redteam218 import _set_for_farm
from test_store_backends import (  # noqa: F401 (fixtures)
    BACKENDS,
    alembic_config,
    database_url,
    postgres_admin,
    postgres_url,
)

from orchestrator.report import site
from orchestrator.store.database import Store
from orchestrator.store.records import SnapshotRecord

BIG = 5 << 30  # 5 GiB: past 2**31 - 1 = 2147483647
COUNT = 3_000_000_000


def _scalar(url: str, sql: str) -> object:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql)).scalar()
    finally:
        engine.dispose()


def _big_rows(store: Store) -> tuple[int, int]:
    """A run whose node shipped BIG bytes, and a result that printed BIG bytes and counted COUNT HMMA."""
    run_id, _ = new_run(store)
    snapshot = store.add_snapshot(
        SnapshotRecord(run_id=run_id, node="n", transport="ssh", address="a", gpu_count=1, bytes_shipped=BIG)
    )
    record = replace(result_record(run_id, snapshot), stdout_size=BIG, instruction_counts={"HMMA": COUNT})
    store.add_result(record)
    return run_id, snapshot


def test_sizes_and_counts_past_32_bits_are_kept_whole(database_url: str) -> None:  # noqa: F811
    """Before: bytes_shipped, stdout_size and the HMMA count read back 2147483647 on both backends (cut
    to PostgreSQL's INTEGER). Figure: 5 GiB and 3000000000 read back as written, on each backend."""
    store = Store(database_url)
    store.journal = None
    try:
        run_id, snapshot = _big_rows(store)
        (found,) = [s for s in store.snapshots(run_id) if s.id == snapshot]
        (result,) = store.results(run_id)
        assert (found.bytes_shipped, result.stdout_size) == (BIG, BIG)
    finally:
        store.close()
    assert _scalar(database_url, "SELECT count FROM sass_counts") == COUNT


def test_ids_go_on_past_32_bits_on_postgresql(postgres_url: str) -> None:  # noqa: F811
    """Before: with runs' ids at 2147483647 (years of runs, or a restored sequence), the next run was
    "StoreError ... nextval: reached maximum value of sequence": no run could be stored any more.
    Figure: run 2147483648 is stored, its node and result with it, and read back by its id."""
    Store(postgres_url).close()
    for table in ("runs", "node_snapshots", "results"):
        _scalar(postgres_url, f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), 2147483647)")
    store = Store(postgres_url)
    store.journal = None
    try:
        run_id, snapshot = _big_rows(store)
        assert (run_id, snapshot) == (2**31, 2**31 + 1)  # new_run stored a snapshot of its own first
        assert store.run(run_id) is not None and store.results(run_id)[0].id == 2**31
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_database_of_the_older_schema_is_widened_and_then_holds_big_values(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Before: a 0017 database opened by the farm kept its INTEGER columns: 5 GiB read back 2147483647,
    and past id 2147483647 nothing was stored. Figure: upgraded to 0018 in place (PostgreSQL: BIGINT
    columns, BIGINT id sequences; SQLite: as it was, INTEGER is 64 bits there), its earlier run kept,
    the big values read back whole."""
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "0017")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (started_at, status, trigger, farm_version, host, config_file, selection) "
                    "VALUES (CURRENT_TIMESTAMP, 'finished', 'cron', '0.9', 'h', 'farm.yaml', '--all')"
                )
            )
    finally:
        engine.dispose()
    store = Store(url)
    store.journal = None
    try:
        assert _scalar(url, "SELECT version_num FROM alembic_version") == "0018"
        if backend == "postgresql":
            kinds = _scalar(
                url,
                "SELECT string_agg(DISTINCT data_type, ',') FROM information_schema.columns WHERE "
                "(table_name, column_name) IN (('runs', 'id'), ('results', 'run_id'), ('node_snapshots', "
                "'bytes_shipped'), ('sass_counts', 'count'), ('metric_values', 'run_id'))",
            )
            assert kinds == "bigint"
            _scalar(url, "SELECT setval(pg_get_serial_sequence('runs', 'id'), 3000000000)")
        assert [r.farm_version for r in store.runs()] == ["0.9"]
        run_id, snapshot = _big_rows(store)
        assert run_id == (3000000001 if backend == "postgresql" else 2)
        (found,) = [s for s in store.snapshots(run_id) if s.id == snapshot]
        assert (found.bytes_shipped, store.results(run_id)[0].stdout_size) == (BIG, BIG)
    finally:
        store.close()


@pytest.fixture
def slow_pages(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cell pages that take 1.5 s to write, as a big fleet's do: the read snapshot sits idle meanwhile."""
    written = site.write_cell_pages

    def slow(*args: object, **kwargs: object) -> object:
        time.sleep(1.5)
        return written(*args, **kwargs)

    monkeypatch.setattr(site, "write_cell_pages", slow)
    yield


def test_a_dbas_idle_in_transaction_timeout_lets_the_report_render(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    slow_pages: None,
) -> None:
    """Before: StoreError "the results database ... failed reading: OperationalError: consuming input
    failed: terminating connection due to idle-in-transaction timeout" halfway through the render.
    Figure: idle_in_transaction_session_timeout = 1s on the role in the database; the site renders
    whole (its run page written after the 1.5 s pause), and the role's setting still holds outside it."""
    Store(postgres_url).close()
    _set_for_farm(postgres_url, "idle_in_transaction_session_timeout = '1s'")
    store = Store(postgres_url)
    store.journal = None
    try:
        run_id, snapshot = new_run(store)
        store.add_result(result_record(run_id, snapshot))
        store.finish_run(run_id, "finished", 0)
        index = site.render(store, tmp_path / "site")
        assert index.is_file() and (tmp_path / "site" / "runs" / f"{run_id}.html").is_file()
        with store.engine.connect() as connection:  # the DBA's setting, for every other transaction
            assert connection.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "1s"
    finally:
        store.close()


def test_a_verify_run_under_an_idle_in_transaction_timeout_ends_with_its_own_exit_code(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: `farm verify --all` stored its pass (exit 0), then said "report not rendered: ... failed
    reading: InternalError: (psycopg.errors.IdleInTransactionSessionTimeout) terminating connection due
    to idle-in-transaction timeout", both at the run's start and its end: reviewers kept the site of the
    night before, marked unrendered. Figure: the toy farm on
    PostgreSQL with idle_in_transaction_session_timeout = 1s and cell pages slowed 1.5 s (sitecustomize):
    exit 0, the report rendered (no "not rendered"), the pass stored."""
    from farm_cli import farm
    from toyfarm import toy_on_t4

    config, env = toy_on_t4(tmp_path / "farm")
    config.write_text(config.read_text().replace("sqlite:///results.db", postgres_url))
    Store(postgres_url).close()
    _set_for_farm(postgres_url, "idle_in_transaction_session_timeout = '1s'")
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import time\n"
        "import orchestrator.report.site as site\n"
        "written = site.write_cell_pages\n"
        "def slow(*args, **kwargs):\n"
        "    time.sleep(1.5)\n"
        "    return written(*args, **kwargs)\n"
        "site.write_cell_pages = slow\n"
    )
    ran = farm("verify", "--all", cwd=config.parent, env={**env, "PYTHONPATH": str(slow)}, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr and "not rendered" not in ran.stdout + ran.stderr
    assert (config.parent / "reports" / "runs" / "1.html").is_file()
    store = Store(postgres_url)
    try:
        assert [r.outcome for r in store.results(1)] == ["pass"]
    finally:
        store.close()


def test_a_dbas_search_path_to_another_schema_never_splits_the_results(postgres_url: str) -> None:  # noqa: F811
    """Before: with the farm's tables in public and `ALTER ROLE farm IN DATABASE ... SET search_path =
    other`, the farm found "no tables", made a second schema in `other` and stored the run there: exit 0,
    the fleet's earlier runs gone from every page. Figure: StoreError naming the schema that holds them
    and search_path; nothing made in `other`."""
    from orchestrator.errors import StoreError

    store = Store(postgres_url)
    store.journal = None
    new_run(store)
    store.close()
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("CREATE SCHEMA other"))
    engine.dispose()
    _set_for_farm(postgres_url, "search_path = other")
    with pytest.raises(StoreError, match=r"farm's tables in schema public.*search_path \(other\)"):
        Store(postgres_url)
    assert _scalar(postgres_url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'other'") == 0


def test_a_search_path_of_no_schema_names_the_setting(postgres_url: str) -> None:  # noqa: F811
    """Before: "ProgrammingError: (psycopg.errors.InvalidSchemaName) no schema has been selected to create
    in", no setting named. Figure: a new database under search_path = nowhere: the error names search_path
    and its RESET."""
    from orchestrator.errors import StoreError

    _set_for_farm(postgres_url, "search_path = nowhere")
    with pytest.raises(StoreError, match=r"no schema has been selected.*search_path.*RESET it"):
        Store(postgres_url)


def test_a_dbas_statement_timeout_names_the_setting(postgres_url: str) -> None:  # noqa: F811
    """Before: "OperationalError: (psycopg.errors.QueryCanceled) canceling statement due to statement
    timeout", no setting named (nor the farm's own words: its password "farm" masked them). Figure:
    statement_timeout = 200ms on the role, a read held behind another session's lock:
    the error names statement_timeout, its RESET and the URL option that lifts it for the farm alone."""
    from orchestrator.errors import StoreError

    Store(postgres_url).close()
    _set_for_farm(postgres_url, "statement_timeout = '200ms'")
    holder = create_engine(postgres_url)
    try:
        with holder.begin() as connection:  # another session's lock: the farm's read waits past the timeout
            connection.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
            store = Store(postgres_url)
            try:
                with pytest.raises(StoreError) as raised:
                    store.runs()
            finally:
                store.close()
    finally:
        holder.dispose()
    said = str(raised.value)
    assert "statement timeout" in said and "RESET statement_timeout" in said and "statement_timeout%3D0" in said
    assert "farm's statement" in said
