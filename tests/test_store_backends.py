"""The results store on each backend: SQLite (a file) and PostgreSQL (a real server).

Every test taking `database_url` runs once per backend, each time on a fresh,
empty database: a new SQLite file, or a new PostgreSQL database made (and
dropped after) through the server named by FARM_TEST_POSTGRES_URL, whose role
may CREATE DATABASE. `scripts/setup.sh --test` installs and starts that server
(Debian's PostgreSQL, role farm/farm, database farm_test: the default URL).
The PostgreSQL tests never skip: without a server they fail, saying so.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script
from sqlalchemy import Engine, create_engine, event, inspect, make_url, select, text
from sqlalchemy.exc import ProgrammingError
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.errors import StoreError
from orchestrator.plan import plan_cells
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Base, Store
from orchestrator.store.engine import MIGRATIONS, redact_url
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord

POSTGRES_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql+psycopg://farm:farm@127.0.0.1:5432/farm_test")
BACKENDS = ["sqlite", "postgresql"]


def alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


# backends ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Engine]:
    """A connection to the test server, for CREATE/DROP DATABASE (autocommit)."""
    engine = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as err:
        engine.dispose()
        pytest.fail(
            f"PostgreSQL for the store's tests is not reachable at FARM_TEST_POSTGRES_URL="
            f"{redact_url(POSTGRES_URL)} ({err.__class__.__name__}: {str(err).strip().splitlines()[0]}). "
            "Run `scripts/setup.sh --test` as root (it installs Debian's postgresql, starts it and creates "
            "role farm/farm and database farm_test), or point FARM_TEST_POSTGRES_URL at a server whose "
            "role may CREATE DATABASE.",
            pytrace=False,
        )
    yield engine
    engine.dispose()


def _new_postgres_database(admin: Engine, tag: str) -> tuple[str, str]:
    name = f"farm_t_{tag}_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    return name, make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


def _drop_postgres_database(admin: Engine, name: str) -> None:
    # FORCE cannot end an autovacuum worker that has just begun on the database (its role is none
    # the farm role may signal: "must be a member of the role whose process is being terminated",
    # a CI flake); it ends within moments
    for attempt in range(10):
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except ProgrammingError:
            if attempt == 9:
                raise
            time.sleep(0.5)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database's URL on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'results.db'}"
        return
    admin = request.getfixturevalue("postgres_admin")
    name, url = _new_postgres_database(admin, "t")
    try:
        yield url
    finally:
        _drop_postgres_database(admin, name)


@pytest.fixture
def postgres_url(postgres_admin: Engine) -> Iterator[str]:
    name, url = _new_postgres_database(postgres_admin, "p")
    try:
        yield url
    finally:
        _drop_postgres_database(postgres_admin, name)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    opened = Store(database_url)
    yield opened
    opened.close()


def backend(store: Store) -> str:
    return store.engine.dialect.name


# rows ---------------------------------------------------------------------------
RUN_FIELDS = {
    "trigger": "test",
    "farm_commit": None,
    "farm_version": "0.0",
    "host": "here",
    "config_file": "farm.yaml",
    "selection": "--all",
}


def stdout_of(i: int) -> bytes:
    # not UTF-8, and a NUL: bytes must come back exactly as stored
    return b"cell %d: PASS\n\xff\xfe\x80 caf\xe9 nul:\x00:end\n" % i


def result_record(run_id: int, snapshot_id: int | None, i: int, kernel: str = "k") -> ResultRecord:
    now = datetime.now(UTC)
    return ResultRecord(
        run_id=run_id,
        snapshot_id=snapshot_id,
        kernel=kernel,
        variant=f"v{i}",
        node="n",
        contract="cc>=7.5",
        expected="pass",
        contract_expected="pass",
        expected_reason="the contract serves this card",
        known_failure_reason=None,
        outcome="pass",
        failed_stage=None,
        reason=f"cell {i} printed its pass marker",
        exit_code=0,
        stage_seconds={"build": 0.5, "inspect": 0.25, "run": i / 8},
        stage_details={"run": {"status": "ok", "detail": f"cell {i}"}},
        build_command=f"g++ -o bin/{i} k.cpp",
        build_cached=i % 2 == 0,
        build_log=b"\xff build log %d" % i,
        stdout=stdout_of(i),
        stderr=b"stderr \x80 %d" % i,
        stdout_size=len(stdout_of(i)),
        stderr_size=9,
        source_sha256="0" * 64,
        sources={"kernels/k.cpp": "0" * 64},
        binary_sha256="1" * 64,
        instruction_counts={"ret": i},
        required_instructions={"ret": 1},
        elf_targets=["sm_90"],
        ptx_targets=[],
        code_path="sass",
        started_at=now,
        ended_at=now,
    )


def add_snapshot(store: Store, run_id: int, node: str = "n") -> int:
    return store.add_snapshot(
        SnapshotRecord(
            run_id=run_id,
            node=node,
            transport="local",
            address="local",
            gpu_name="Tesla T4",
            cc="7.5",
            gpu_count=1,
            cc_mismatch=False,
            real_gpu=False,
            bytes_shipped=0,
        )
    )


# migrations ---------------------------------------------------------------------
def test_migrations_create_the_schema_at_head(store):
    tables = set(inspect(store.engine).get_table_names())
    assert set(Base.metadata.tables) | {"alembic_version"} <= tables
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
    columns = {c["name"]: c["type"] for c in inspect(store.engine).get_columns("results")}
    if backend(store) == "postgresql":
        assert columns["stdout"].__visit_name__ == "BYTEA"
        assert columns["started_at"].timezone is True
        assert columns["build_cached"].__visit_name__ == "BOOLEAN"
        assert columns["stage_seconds"].__visit_name__ == "JSON"
    # opening it again changes nothing
    Store(store.url).close()
    assert set(inspect(store.engine).get_table_names()) == tables


def reflected_schema(url: str) -> dict[str, tuple]:
    """Every table as a reflector sees it: columns (type, nullability, server default),
    primary key, indexes, unique constraints and foreign keys."""
    engine = create_engine(url)
    try:
        seen = inspect(engine)
        return {
            table: (
                sorted(
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default"))) for c in seen.get_columns(table)
                ),
                seen.get_pk_constraint(table)["constrained_columns"],
                sorted((i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in seen.get_indexes(table)),
                sorted(tuple(u["column_names"]) for u in seen.get_unique_constraints(table)),
                sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                    for f in seen.get_foreign_keys(table)
                ),
            )
            for table in sorted(seen.get_table_names())
        }
    finally:
        engine.dispose()


def query_all(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]
    finally:
        engine.dispose()


def test_a_new_database_gets_the_schema_its_migrations_would_give(database_url, request, tmp_path):
    """A new database is made from the models at once (engine.migrate), not by replaying
    every migration: the two must give the same tables, column by column, index by index,
    on each backend (an earlier farm's database is upgraded by the migrations alone)."""
    if database_url.startswith("sqlite"):
        replayed, dropped = f"sqlite:///{tmp_path / 'replayed.db'}", None
    else:
        admin = request.getfixturevalue("postgres_admin")
        dropped, replayed = _new_postgres_database(admin, "r")
    try:
        engine = create_engine(replayed)
        try:
            with engine.begin() as connection:
                config = alembic_config()
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        finally:
            engine.dispose()
        Store(database_url).close()
        made = reflected_schema(database_url)
        assert set(Base.metadata.tables) | {"alembic_version"} == set(made)
        assert made == reflected_schema(replayed)
        seeded = "SELECT key, value FROM farm_meta ORDER BY key"  # and the rows the migrations seed
        assert query_all(database_url, seeded) == query_all(replayed, seeded) == [("metric_baseline_from", "1")]
        engine = create_engine(database_url)
        try:
            with engine.connect() as connection:
                assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
                assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        finally:
            engine.dispose()
    finally:
        if dropped is not None:
            _drop_postgres_database(request.getfixturevalue("postgres_admin"), dropped)


def test_each_revision_applies_and_a_first_schema_database_upgrades(database_url):
    """0001 alone, then the farm opens it and applies the rest; and a database of
    the first schema with no alembic_version (farm 0.1.0) is stamped and upgraded."""
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "0001")
        assert "planned_cells" not in inspect(engine).get_table_names()
        with engine.begin() as connection:
            connection.execute(text("DROP TABLE alembic_version"))
            connection.execute(
                text(
                    "INSERT INTO runs (started_at, status, trigger, farm_version, host, config_file, selection) "
                    "VALUES (:t, 'finished', 'cron', '0.1.0', 'h', 'farm.yaml', '--all')"
                ),
                {"t": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},
            )
    finally:
        engine.dispose()
    store = Store(database_url)
    try:
        assert {"planned_cells", "attempts"} <= set(inspect(store.engine).get_table_names())
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
        (run,) = store.runs()
        assert (run.status, run.trigger, run.farm_version) == ("finished", "cron", "0.1.0")
        # and the upgraded database takes new runs, with ids after the old ones
        assert store.begin_run(**RUN_FIELDS) == run.id + 1
    finally:
        store.close()


# a farm run, stored and read back ------------------------------------------------
TOY = r"""
#include <cstdio>
int main() {
    static const char out[] = "toy: PASS\n\xff\xfe\x80 caf\xe9 nul:\0:end\n";
    std::fwrite(out, 1, sizeof out - 1, stdout);
    std::fputs("to stderr \xff\n", stderr);
    return 0;
}
"""
TOY_STDOUT = b"toy: PASS\n\xff\xfe\x80 caf\xe9 nul:\x00:end\n"


@pytest.fixture
def standin_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "standin-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(nvidia_smi_script(CARDS["h100"]))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def farm_run(root: Path, url: str) -> tuple[Store, int]:
    """The toy farm on the local node, which (with a stand-in H100 nvidia-smi on
    PATH) runs the binary, so its stdout is stored; its `broken` variant is an
    undeclared build-fail."""
    config = toy_farm(root, source=TOY, broken="fails")
    # one cell at a time, in the plan's order: the two databases then give each cell the same result id
    config.write_text(config.read_text() + "    build_jobs: 1\n")
    farm = load_farm(config, database=url)
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm), cache_dir=root / "cache")
    return store, summary.run_id


def stored(store: Store, run_id: int) -> list[tuple]:
    """What a run's cells hold, less what differs between two farm folders (paths, times)."""
    return [
        (
            r.kernel,
            r.variant,
            r.node,
            r.contract,
            r.expected,
            r.outcome,
            r.failed_stage,
            r.exit_code,
            r.stdout,
            r.stderr,
            r.stdout_size,
            r.stderr_size,
            r.build_cached,
            r.source_sha256,
            r.sources,
            r.instruction_counts,
            r.required_instructions,
            r.elf_targets,
            r.ptx_targets,
            r.code_path,
            sorted(r.stage_seconds),
            {stage: d["status"] for stage, d in r.stage_details.items()},
        )
        for r in store.results(run_id)
    ]


def page(path: Path, root: Path) -> str:
    """A rendered page with what differs between two farm folders and two runs'
    clocks masked: the folder (and build keys made from it), times, durations."""
    html = path.read_text().replace(str(root), "ROOT")
    html = re.sub(r"-[0-9a-f]{20}/", "-KEY/", html)
    html = re.sub(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2})?(\.\d+)?(\+00:00)?", "TIME", html)
    html = re.sub(r"\b\d{2}:\d{2}\b", "HH:MM", html)
    html = re.sub(r"<td>\d+\.\d+</td>", "<td>N</td>", html)
    return re.sub(r"\d+\.\d+ ?(s|ms)\b", "N s", html)


def test_a_farm_run_on_postgresql_reads_back_as_on_sqlite(tmp_path, postgres_url, standin_gpu):
    runs = {}
    for name, url in (("sqlite", f"sqlite:///{tmp_path / 'sqlite' / 'results.db'}"), ("postgresql", postgres_url)):
        root = tmp_path / name
        store, run_id = farm_run(root, url)
        assert backend(store) == name
        model = collect(store, run_id)
        index = render(store, root / "reports", run_id)
        runs[name] = (root, store, run_id, model, index)

    (lite_root, lite, lite_run, lite_model, lite_index), (pg_root, pg, pg_run, pg_model, pg_index) = runs.values()
    cells = sorted(stored(pg, pg_run))
    assert sorted((c[1], c[5]) for c in cells) == [("broken", "build-fail"), ("plain", "pass")]
    plain = next(r for r in pg.results(pg_run) if r.variant == "plain")
    assert plain.stdout == TOY_STDOUT and plain.stderr == b"to stderr \xff\n"
    assert plain.started_at.utcoffset().total_seconds() == 0  # PostgreSQL hands times back in UTC
    assert cells == sorted(stored(lite, lite_run))  # the cells finish in either order

    # what the report is made of, and the pages themselves
    assert pg_model.counts == lite_model.counts == {"good": 1, "bad": 1, "infra": 0}
    assert pg_model.run_counts == lite_model.run_counts
    assert [(r.status, r.exit_code, r.trigger, r.selection) for r in pg_model.runs] == [
        (r.status, r.exit_code, r.trigger, r.selection) for r in lite_model.runs
    ]
    assert {k: c.change for k, c in pg_model.changes.items()} == {k: c.change for k, c in lite_model.changes.items()}
    # (run, outcome) per cell; the result ids follow the order the two cells finished in
    assert {k: [e[:2] for e in v] for k, v in pg_model.cell_history.items()} == {
        k: [e[:2] for e in v] for k, v in lite_model.cell_history.items()
    }
    assert [(s.node, s.gpu_name, s.cc, s.real_gpu, s.cc_mismatch) for s in pg_model.snapshots] == [
        (s.node, s.gpu_name, s.cc, s.real_gpu, s.cc_mismatch) for s in lite_model.snapshots
    ]
    assert "caf\ufffd" in (pg_root / "reports" / "cells" / f"{plain.id}.html").read_text()
    pages = sorted(p.relative_to(lite_index.parent) for p in lite_index.parent.rglob("*.html"))
    assert pages == sorted(p.relative_to(pg_index.parent) for p in pg_index.parent.rglob("*.html"))
    assert len(pages) >= 5
    for name in pages:
        assert page(pg_index.parent / name, pg_root) == page(lite_index.parent / name, lite_root), name
    lite.close()
    pg.close()


# the result's rows on the driver's cursor (store/inserts.py) ---------------------------
def test_a_results_rows_skip_cores_execution_and_read_back_as_core_writes_them(store):
    """A result, its metric value, SASS counts and attempt go through the driver's
    cursor, not Core's execution (no INSERT of them reaches Core's cursor events),
    and every column of every row reads back as the same record written by Core's
    own insert: NUL, non-UTF-8 bytes, JSON, times and NULLs alike."""
    run_id = store.begin_run(**RUN_FIELDS)
    snapshot = add_snapshot(store, run_id)
    seen: list[str] = []

    def through_core(_conn, _cursor, statement, *_rest) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", through_core)
    record = result_record(run_id, snapshot, 5)
    metric = {"name": "gflops", "value": 1.5, "unit": "GFLOP/s", "better": "higher", "tolerance": 0.1}
    metric |= {"note": "printed by the kernel", "baseline": None, "regressed": False}
    attempt = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v5", attempt=1, status="ok")
    farm_id = store.add_result(record, [attempt], [metric])
    farm_wrote, seen[:] = list(seen), []

    tables = {name: Base.metadata.tables[name] for name in ("results", "metric_values", "sass_counts", "attempts")}
    with store.engine.begin() as connection:
        fields = record.columns()
        core_id = connection.execute(tables["results"].insert(), fields).inserted_primary_key[0]
        key = {"run_id": run_id, "kernel": "k", "variant": "v5", "node": "n", "device": ""}
        connection.execute(tables["metric_values"].insert(), {"result_id": core_id, **key, **metric})
        connection.execute(
            tables["sass_counts"].insert(),
            [{"result_id": core_id, "identity": None, "instruction": "ret", "count": 5}],
        )
    event.remove(store.engine, "before_cursor_execute", through_core)
    inserts = [sql for sql in farm_wrote if sql.lstrip().upper().startswith("INSERT")]
    assert not inserts, inserts
    assert len([sql for sql in seen if sql.lstrip().upper().startswith("INSERT")]) == 3, seen  # the events work

    def rows(table: str, where: str, value: int) -> list[dict]:
        with store.engine.connect() as connection:
            found = connection.execute(select(tables[table]).where(tables[table].c[where] == value)).mappings()
            return [{k: v for k, v in row.items() if k not in ("id", "result_id", "at")} for row in found]

    assert rows("results", "id", farm_id) == rows("results", "id", core_id) != []
    assert rows("metric_values", "result_id", farm_id) == rows("metric_values", "result_id", core_id) != []
    assert rows("sass_counts", "result_id", farm_id) == rows("sass_counts", "result_id", core_id) != []
    tried = rows("attempts", "run_id", run_id)
    assert [(a["node"], a["kernel"], a["variant"], a["attempt"], a["status"]) for a in tried] == [
        ("n", "k", "v5", 1, "ok")
    ]
    assert rows("results", "id", farm_id)[0]["stdout"] == stdout_of(5)


@pytest.mark.parametrize("broken", ["result", "attempt"])
def test_a_driver_error_on_the_results_insert_is_a_store_error(store, broken):
    """What the driver refuses (here a NOT NULL column) is the store's StoreError,
    as Core's errors are, and the transaction leaves nothing behind: an attempt
    refused after its result's row was written takes that row with it."""
    run_id = store.begin_run(**RUN_FIELDS)
    record = result_record(run_id, None, 1)
    tried = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v1", attempt=1, status="ok")
    if broken == "result":
        record = dataclasses.replace(record, outcome=None)
    else:
        tried = dataclasses.replace(tried, status=None)
    with pytest.raises(StoreError, match="failed writing"):
        store.add_result(record, [tried])

    def count(table: str) -> int:
        with store.engine.connect() as connection:
            return connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar()

    assert (count("results"), count("sass_counts"), count("attempts")) == (0, 0, 0)
    store.add_result(result_record(run_id, None, 2))  # the connection is fine for the next one
    assert count("results") == 1


# unattended: interrupted runs ----------------------------------------------------------
def test_abort_unfinished_runs(store):
    finished = store.begin_run(**RUN_FIELDS)
    store.finish_run(finished, "finished", 0)
    killed = store.begin_run(**RUN_FIELDS)
    store.add_planned(killed, [("k", "v0", "n", ""), ("k", "v1", "n", ""), ("k", "v2", "n", "")])
    snapshot = add_snapshot(store, killed)
    store.add_result(result_record(killed, snapshot, 0))

    assert [a[:2] for a in store.abort_unfinished_runs()] == [(killed, 2)]
    assert store.abort_unfinished_runs() == []
    run = store.run(killed)
    assert run.status == "aborted" and run.ended_at is not None
    assert store.run(finished).status == "finished"
    outcomes = {(r.variant, r.outcome) for r in store.results(killed)}
    assert outcomes == {("v0", "pass"), ("v1", "not-run"), ("v2", "not-run")}
    model = collect(store, killed)
    assert model.counts == {"good": 1, "bad": 0, "infra": 2}  # not-run is infrastructure's


# errors --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refusing_server_is_a_store_error_without_the_password(postgres_admin):
    secret = "s3cret-" + secrets.token_hex(4)
    url = f"postgresql+psycopg://farm:{secret}@127.0.0.1:{free_port()}/farm_test"
    with pytest.raises(StoreError) as info:
        Store(url)
    message = str(info.value)
    assert "cannot open the results database" in message and "refused" in message.lower()
    assert secret not in message and "farm:***@127.0.0.1" in message

    # a server that answers but refuses the password
    wrong = make_url(POSTGRES_URL).set(password=secret).render_as_string(hide_password=False)
    with pytest.raises(StoreError) as info:
        Store(wrong)
    assert secret not in str(info.value) and "password authentication failed" in str(info.value)

    # a URL the driver cannot even parse
    for bad in (f"postgresql+psycopg://farm:{secret}@127.0.0.1:port/db", f"postgresql+psycopg//farm:{secret}@h/db"):
        with pytest.raises(StoreError) as info:
            Store(bad)
        assert secret not in str(info.value) and "***" in str(info.value)


# readers during a run ------------------------------------------------------------------
def test_reading_sees_one_snapshot_and_never_blocks_the_writer(store):
    run_id = store.begin_run(**RUN_FIELDS)
    snapshot = add_snapshot(store, run_id)
    store.add_result(result_record(run_id, snapshot, 0))
    with store.reading():
        assert len(store.results(run_id)) == 1
        clock = time.monotonic()
        store.add_result(result_record(run_id, snapshot, 1))
        assert time.monotonic() - clock < 1.0
        assert len(store.results(run_id)) == 1  # the block's snapshot
        assert len(store.run_matrix([run_id])) == 1
    assert len(store.results(run_id)) == 2


def test_readers_during_a_run_never_block_the_writer_nor_see_half_a_cell(store, tmp_path):
    cells = 120
    run_id = store.begin_run(**RUN_FIELDS)
    snapshot = add_snapshot(store, run_id)
    store.add_planned(run_id, [("k", f"v{i}", "n", "") for i in range(cells)])
    store.add_result(result_record(run_id, snapshot, 0))
    writes: list[float] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(1, cells):
                clock = time.monotonic()
                store.add_result(result_record(run_id, snapshot, i))
                writes.append(time.monotonic() - clock)
                time.sleep(0.002)
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    reads = 0
    seen = 0
    thread = threading.Thread(target=writer, name="writer")
    thread.start()
    try:
        while not done.is_set() or reads < 3:
            if reads % 4 == 3:
                with store.reading():
                    render(store, tmp_path / "reports", run_id)
            with store.reading():
                model = collect(store, run_id)
            for r in model.results:
                i = int(r.variant[1:])
                assert r.stdout == stdout_of(i) and r.stdout_size == len(stdout_of(i))
                assert r.outcome == "pass" and r.reason == f"cell {i} printed its pass marker"
                assert r.stage_seconds == {"build": 0.5, "inspect": 0.25, "run": i / 8}
                assert r.instruction_counts == {"ret": i} and r.snapshot_id == snapshot
            # one snapshot: the matrix and the run's history counts agree
            assert len(model.results) == sum(model.run_counts[run_id].values()) == model.counts["good"]
            assert len(model.results) >= seen  # committed cells never disappear
            seen = len(model.results)
            reads += 1
    finally:
        thread.join()
    assert not errors, errors
    assert len(writes) == cells - 1
    assert reads >= 3
    assert max(writes) < 1.0, f"the writer was blocked {max(writes):.2f} s by readers"
    assert len(collect(store, run_id).results) == cells


def test_two_farm_hosts_sharing_a_postgresql_database_take_turns(postgres_admin, tmp_path):
    """Issue 10, case 7: the run lock is also the database's: a farm on
    another host (here: another folder, so another lock file) is refused
    while a run holds the PostgreSQL advisory lock, and runs once it is free."""
    from orchestrator.store.lock import DatabaseLock

    config = toy_farm(tmp_path)
    env = {**os.environ, "FARM_DATABASE": POSTGRES_URL}
    verify = ("verify", "--all", "--no-report", "--config", str(config))
    with DatabaseLock(POSTGRES_URL):
        held = farm(*verify, env=env, timeout=120)
    assert held.returncode == 6, held.stdout + held.stderr
    assert "holds the advisory lock" in held.stderr and "farm pid" in held.stderr
    assert "farm:farm@" not in held.stderr  # the password is never printed
    free = farm(*verify, env=env, timeout=300)
    assert free.returncode == 0, free.stdout + free.stderr
