"""Red-team round 50: PostgreSQL parity. The store claims SQLite and PostgreSQL alike; a
reviewer must see on one what the other shows, never a green the other would not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool
from test_store_backends import (  # noqa: F401 (fixtures: each test on both backends)
    database_url,
    postgres_admin,
    postgres_url,
    standin_gpu,
)
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.errors import LockError, StoreError
from orchestrator.store import lock
from orchestrator.store.database import Store
from orchestrator.store.lock import DatabaseLock, run_lock
from orchestrator.store.records import AttemptRecord

# a SHA-256 repository's commit (64 hex digits) with tracked files changed: revisions.farm_commit
DIRTY_SHA256_COMMIT = "9f" * 32 + "+dirty"


def farm_on(root: Path, url: str, **toy: object) -> Path:
    """The toy farm in `root`, its farm.yaml's database `url`."""
    config = toy_farm(root, **toy)  # type: ignore[arg-type]
    config.write_text(config.read_text().replace("database: sqlite:///results.db", f"database: {url}"))
    return config


def test_a_farm_commit_longer_than_its_column_is_stored_alike_on_both_backends(
    tmp_path: Path,
    database_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runs.farm_commit is String(64): SQLite kept any length, PostgreSQL refused one longer.
    A farm checked out of a SHA-256 repository (`git init --object-format=sha256`) with a
    tracked file changed records 64 hex digits and "+dirty": on PostgreSQL every `farm
    verify` failed at its start ("value too long for type character varying(64)", exit 5),
    storing nothing: here the red night (toy:broken build-fail) was lost, `farm report
    --format json` exited 0 on run 1 and the site read "Run 1: 1 of 1 cells as expected",
    while on SQLite the same night was stored and shown red. Both store it now, cut to the
    column alike (its middle given up), and its "+dirty" is kept."""
    config = farm_on(tmp_path, database_url)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0  # run 1, green
    farm_on(tmp_path, database_url, broken="fails")  # the next night: toy:broken fails to build
    monkeypatch.setenv("FARM_COMMIT", DIRTY_SHA256_COMMIT)
    done = cli.invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 1, done.output  # run 2, red; PostgreSQL: 5, nothing stored
    exported = cli.invoke(main, ["report", "--format", "json", "--config", str(config)])
    assert exported.exit_code == 1, exported.output[:300]  # PostgreSQL: 0, run 1's green
    shown = json.loads(exported.output)["run"]
    assert shown["id"] == 2
    commit = str(shown["farm_commit"])
    assert len(commit) <= 64 and commit.startswith("9f9f") and commit.endswith("+dirty"), commit


def test_a_declared_gpu_longer_than_its_column_is_stored_alike_on_both_backends(
    tmp_path: Path,
    database_url: str,  # noqa: F811
) -> None:
    """node_snapshots.declared_gpu is String(255), and farm.yaml's `gpu:` has no bound: a
    node declared with a longer description ran on SQLite, but on PostgreSQL the run failed
    at its first node's snapshot (exit 5; "this run's records are in its journal", whose
    `farm import` failed the same way), the run left "running", its cells never stored."""
    config = farm_on(tmp_path, database_url)
    config.write_text(config.read_text() + "    gpu: '" + "NVIDIA H200 " * 30 + "'\n")
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    store = Store(database_url)
    try:
        (snapshot,) = store.snapshots(1)
        assert snapshot.declared_gpu is not None and len(snapshot.declared_gpu) == 255
        assert snapshot.declared_gpu.startswith("NVIDIA H200 NVIDIA H200")
        assert store.run(1).status == "finished"  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_journal_of_values_longer_than_their_columns_is_imported_alike_on_both_backends(
    tmp_path: Path,
    database_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`farm import` rebuilds a run from its journal, which holds what the run meant to store,
    uncut: the long declared GPU and farm commit above. Into PostgreSQL the import failed
    ("value too long"), the run that `farm verify` could not store was not recoverable
    either; into SQLite it was kept whole. Both import it as a run stores it now."""
    monkeypatch.setenv("FARM_COMMIT", DIRTY_SHA256_COMMIT)
    config = farm_on(tmp_path, database_url)
    config.write_text(config.read_text() + "    gpu: '" + "NVIDIA H200 " * 30 + "'\n")
    scratch = f"sqlite:///{tmp_path}/scratch.db"  # the run whose database is gone: its journal is left
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--database", scratch, "--config", str(config)]).exit_code == 0
    journal = next((tmp_path / "scratch.db.journal").glob("*.jsonl"))
    done = cli.invoke(main, ["import", str(journal), "--config", str(config)])
    assert done.exit_code == 0 and "as run 1" in done.output, done.output
    store = Store(database_url)
    try:
        (snapshot,) = store.snapshots(1)
        assert snapshot.declared_gpu is not None and len(snapshot.declared_gpu) == 255
        commit = store.run(1).farm_commit  # type: ignore[union-attr]
        assert commit is not None and len(commit) == 64 and commit.endswith("+dirty"), commit
        assert [r.outcome for r in store.results(1)] == ["compile-only"]
    finally:
        store.close()


@pytest.mark.parametrize("command", [["show", "3000000000"], ["report", "--format", "json", "--run", "3000000000"]])
def test_an_id_past_postgresqls_integer_is_no_run_nor_result_on_both_backends(
    tmp_path: Path,
    database_url: str,  # noqa: F811
    command: list[str],
) -> None:
    """The ids are INTEGER: 64 bits in SQLite, 32 in PostgreSQL. `farm show 3000000000` (or
    `farm report --run 3000000000`, a mistyped id) said "no result 3000000000" on SQLite;
    on PostgreSQL "the results database failed reading: DataError: integer out of range",
    a database fault where there was only no such result. Both say there is none."""
    config = farm_on(tmp_path, database_url)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    done = cli.invoke(main, [*command, "--config", str(config)])
    assert done.exit_code == 5, done.output
    assert f"no {'result' if command[0] == 'show' else 'run'} 3000000000 in" in done.output, done.output
    assert "failed reading" not in done.output


NUL_STDERR = (  # passes its marker, then dies saying a line with a NUL in it
    "#include <cstdio>\n"
    'int main() { fputs("toy: PASS\\n", stdout); fwrite("fatal: bad\\0value\\n", 1, 17, stderr); return 3; }\n'
)


def test_a_nul_in_a_kernels_last_words_is_shown_alike_on_both_backends(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    standin_gpu: None,  # noqa: F811
) -> None:
    """PostgreSQL's text cannot hold NUL: the store wrote U+FFFD there, and kept the NUL in
    SQLite. A kernel whose last stderr line held one (binary garbage, a C string written
    whole) was shown two ways: `farm show` and its cell page said `last stderr line:
    "fatal: bad\\x00value"` on SQLite and `"fatal: bad\ufffdvalue"` on PostgreSQL, the same
    run's words not the same on the two. Both keep U+FFFD now."""
    shown = {}
    for name, url in (("sqlite", f"sqlite:///{tmp_path / 'sqlite' / 'results.db'}"), ("postgresql", postgres_url)):
        config = farm_on(tmp_path / name, url, source=NUL_STDERR)
        cli = CliRunner()
        assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1
        done = cli.invoke(main, ["show", "1", "--config", str(config)])
        assert done.exit_code == 0, done.output
        shown[name] = done.output.split("\n")[1]  # the outcome's line, with the last stderr line
    assert shown["sqlite"] == shown["postgresql"], shown
    assert 'last stderr line: "fatal: bad\ufffdvalue"' in shown["sqlite"], shown


def test_a_run_whose_advisory_lock_the_server_ended_stops_writing(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    postgres_admin: Engine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run lock on PostgreSQL is an advisory lock of the lock's own session, idle for
    the whole run: the server ending that session (idle_session_timeout, a DBA's
    pg_terminate_backend, a pooler) released it without a word to the run, which went on
    writing. A second farm host then took the lock, marked the live run aborted with its
    cells not-run (abort_unfinished_runs) and wrote beside it: two runs at once on one
    database, what the lock is for (SQLite's file lock lives as long as its process). The
    run's next write now takes the lock again, or, another farm holding it, stops."""
    monkeypatch.setattr(lock, "CHECK_EVERY", 0.0, raising=False)  # every write checks (else at most once a second)
    config = farm_on(tmp_path, postgres_url)
    with run_lock(postgres_url, tmp_path, 0):
        store = Store(postgres_url)
        run_id = store.begin_run(trigger="cron", farm_version="0", host="a", config_file=str(config), selection="--all")
        with postgres_admin.connect() as db:  # the server ends the lock's session
            ended = db.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE :me"),
                {"me": f"farm pid {os.getpid()} %"},
            ).all()
        assert ended == [(True,)]
        store.add_attempt(AttemptRecord(run_id=run_id, node="here", attempt=1, status="ok"))  # taken again
        with pytest.raises(LockError):  # so no second farm host writes beside this run
            DatabaseLock(postgres_url).__enter__()
        with postgres_admin.connect() as db:
            db.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE :me"),
                {"me": f"farm pid {os.getpid()} %"},
            )
        other = create_engine(postgres_url, poolclass=NullPool)  # another host's run takes it, in between
        try:
            with other.connect() as host_b:
                assert host_b.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": lock.ADVISORY_KEY}).scalar()
                with pytest.raises(StoreError, match="run lock"):
                    store.add_attempt(AttemptRecord(run_id=run_id, node="here", attempt=2, status="ok"))
        finally:
            other.dispose()
            store.close()
