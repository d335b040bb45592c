"""The results store: migrations, and what a database of the first schema keeps."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from farm_cli import farm as farm_cli
from sqlalchemy import create_engine
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.errors import EXIT_INFRA, EXIT_OK, StoreError
from orchestrator.plan import plan_cells
from orchestrator.report import export
from orchestrator.report.site import render
from orchestrator.revisions import farm_commit
from orchestrator.run.scheduler import FarmRun, run_cells
from orchestrator.run.summary import NullListener
from orchestrator.store.database import Store
from orchestrator.store.engine import MIGRATIONS

FIRST_SCHEMA_DB = Path(__file__).parent / "data" / "first-schema.db"  # written by farm 0.1.0 on the H200


def migrations_head() -> str:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()


def test_first_schema_database_upgrades_in_place(tmp_path):
    path = tmp_path / "results.db"
    shutil.copyfile(FIRST_SCHEMA_DB, path)
    with sqlite3.connect(path) as db:
        before = db.execute("select id, kernel, variant, outcome from results order by id").fetchall()
        assert "alembic_version" not in {t for (t,) in db.execute("select name from sqlite_master")}
    store = Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        after = db.execute("select id, kernel, variant, outcome from results order by id").fetchall()
        (revision,) = db.execute("select version_num from alembic_version").fetchone()
    assert after == before and len(before) == 8
    # upgraded through every migration, to the newest one the farm ships
    assert revision == migrations_head() == max(p.name[:4] for p in (MIGRATIONS / "versions").glob("[0-9]*.py"))
    with sqlite3.connect(path) as db:
        cards = db.execute("select distinct device, cc, real_gpu, identity from results").fetchall()
    # filled from each result's node snapshot; no identity: the dependencies' bytes were never recorded
    assert cards == [("NVIDIA H200", "9.0", 1, None)]
    # the upgraded database still renders: its cells stand in the matrix, but a result whose
    # inputs were not all identified certifies nothing (issue 9, case 4)
    index = render(store, tmp_path / "reports").read_text()
    assert index.count('data-node="h200"') >= 4
    assert "CC 9.0: VERIFIED" not in index and "CC 9.0: unverified" in index


def revision_of(path: Path) -> str | None:
    with sqlite3.connect(path) as db:
        tables = {t for (t,) in db.execute("select name from sqlite_master where type='table'")}
        if "alembic_version" not in tables:
            return None
        return db.execute("select version_num from alembic_version").fetchone()[0]


def test_a_command_that_only_reads_never_upgrades_an_older_database(tmp_path):
    """Found by a red-team helper: `farm report` upgraded an older farm's results.db in
    place, and that farm, still running the nightly runs, then refused it (exit 5)
    every night. `farm show` and `farm report` now refuse it, naming its revision and
    this farm's, writing nothing; `farm verify` still upgrades it."""
    head = migrations_head()
    older = tmp_path / "older.db"
    shutil.copyfile(Path(__file__).resolve().parent.parent / "results.db", older)
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    previous = ScriptDirectory.from_config(config).get_revision(head).down_revision
    engine = create_engine(f"sqlite:///{older}")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, previous)
    engine.dispose()
    unrevisioned = tmp_path / "first.db"
    shutil.copyfile(FIRST_SCHEMA_DB, unrevisioned)
    farm_yaml = str(toy_farm(tmp_path / "toy"))
    for db, revision in ((older, previous), (unrevisioned, "none (a farm from before schema revisions wrote it)")):
        before = db.read_bytes()
        for args in (["report", "--format", "json"], ["report", "--out", str(tmp_path / "site")], ["show", "1"]):
            done = farm_cli(*args, "--config", farm_yaml, "--database", f"sqlite:///{db}")
            assert done.returncode == 5, (args, done.stdout, done.stderr)
            assert done.stderr == (
                f"Error: the results database sqlite:///{db} has schema revision {revision}, older than this "
                f"farm's {head}; a command that only reads does not upgrade it: `farm verify` upgrades it "
                "(back it up first: the farm that wrote it cannot read it after), or use the farm that wrote it\n"
            ), (args, done.stderr)
        assert db.read_bytes() == before
        with pytest.raises(StoreError, match=f"has schema revision {re.escape(revision)}, older than"):
            Store(f"sqlite:///{db}", create=False)
    verify = farm_cli("verify", "--all", "--no-report", "--config", farm_yaml, "--database", f"sqlite:///{older}")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert revision_of(older) == head


def test_fresh_database_is_created_at_head(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/new.db")
    assert store.latest_run() is None
    with sqlite3.connect(tmp_path / "new.db") as db:
        tables = {t for (t,) in db.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "results", "node_snapshots", "source_files", "alembic_version"} <= tables


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=farm test", "-c", "user.email=farm@test", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_each_run_records_the_git_commit_of_the_farm_it_ran_from(tmp_path, monkeypatch):
    """runs.farm_commit is `git rev-parse HEAD` of the farm folder's repository,
    "+dirty" when a tracked file differs from it; FARM_COMMIT overrides it (a
    copy of the tree without .git); no repository, no commit."""
    monkeypatch.delenv("FARM_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path counts
    config = toy_farm(tmp_path / "farm")
    root = config.parent
    git(root, "init", "-q")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "the toy farm")

    def stored_commit() -> str | None:
        farm = load_farm(config)
        store = Store(farm.database_url)
        try:
            summary = run_cells(farm, store, plan_cells(farm))
            assert summary.exit_code == 0
            (run,) = [r for r in store.runs() if r.id == summary.run_id]
            return run.farm_commit
        finally:
            store.close()

    first = git(root, "rev-parse", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{40}", first)
    assert stored_commit() == first  # results.db and the node's folder are untracked: still clean
    job = root / "jobs" / "toy.yaml"
    job.write_text(job.read_text() + "# edited, not committed\n")
    assert stored_commit() == f"{first}+dirty"
    git(root, "commit", "-q", "-am", "the edit")
    second = git(root, "rev-parse", "HEAD")
    assert second != first and stored_commit() == second
    store = Store(load_farm(config).database_url)
    assert [r.farm_commit for r in store.runs()] == [second, f"{first}+dirty", first]  # newest first
    store.close()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert farm_commit(elsewhere) is None  # not in a repository
    monkeypatch.setenv("FARM_COMMIT", "0123abc")
    assert farm_commit(root) == "0123abc"


def test_the_ccs_a_contract_names_are_stored_as_values(tmp_path: Path) -> None:
    """The ledger plans a column for every CC a kernel's contracts name; those
    were once re-parsed from the contract text by a regex in the report. Results
    now store them (`contract_ccs`); a database written before (the shipped
    results.db, with the H200 evidence, was at revision 0006) gets them from its
    contract text once, in migration 0007, and the ledger reads the values."""
    db = tmp_path / "results.db"
    shutil.copyfile(Path(__file__).resolve().parent.parent / "results.db", db)
    store = Store(f"sqlite:///{db}")
    try:
        named = {(r.kernel, r.variant): (r.contract, r.contract_ccs) for r in store.results(store.runs()[0].id)}
    finally:
        store.close()
    assert named[("wgmma_gemm", "gencode")] == ("CC == 9.0", ["9.0"])
    assert named[("cutlass_gemm", "sm75")] == ("CC >= 7.5", ["7.5"])
    assert named[("cutlass_gemm", "sm80")] == ("CC >= 8.0", ["8.0"])
    # and a fresh run stores them from the variant's contract itself
    config = toy_farm(tmp_path / "toy")
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives")
        rows = store.results(summary.run_id)
    finally:
        store.close()
    assert rows and all(r.contract_ccs == ["7.5"] and r.contract == "CC >= 7.5" for r in rows), [
        (r.contract, r.contract_ccs) for r in rows
    ]


@pytest.mark.parametrize("stop_at", ["the last cell's end", "the run's start"])
def test_a_stop_after_every_cell_has_its_verdict_finishes_the_run(tmp_path: Path, stop_at: str) -> None:
    """Found by a red-team helper: SIGTERM just after the last cell was stored made the
    run `aborted` in the database (its exports: incomplete, exit 4) while the farm said
    "every cell as expected" and exited 0. A stop that cuts nothing short now leaves a
    finished run (exit 0, not reported stopped); one that does is aborted, and exits 4.
    The stop comes from the run's own listener, at the moment named."""
    farm = load_farm(toy_farm(tmp_path, broken="known-failure"))  # two cells, both as expected
    cells = plan_cells(farm)
    assert len(cells) == 2

    class StopAt(NullListener):
        run: FarmRun
        finished = 0

        def run_started(self, run_id: int, planned: list) -> None:
            if stop_at == "the run's start":
                self.run.stop("SIGTERM")

        def cell_finished(self, cell: object, result: object, result_id: int) -> None:
            self.finished += 1
            if stop_at == "the last cell's end" and self.finished == len(cells):
                self.run.stop("SIGTERM")

    listener = StopAt()
    store = Store(farm.database_url)
    try:
        listener.run = FarmRun(farm, store, listener=listener, cache_dir=tmp_path / "archives")
        summary = listener.run.execute(cells)
        run = store.run(summary.run_id)
        assert run is not None
        stored = (run.status, run.exit_code)
    finally:
        store.close()
    if stop_at == "the last cell's end":
        assert (summary.stopped, summary.exit_code, stored) == (None, EXIT_OK, ("finished", EXIT_OK))
        assert summary.outcomes == {"compile-only": 1, "known-failure": 1}
    else:
        assert (summary.stopped, summary.exit_code, stored) == ("SIGTERM", EXIT_INFRA, ("aborted", EXIT_INFRA))
        assert summary.outcomes == {"not-run": 2}
    assert export.exit_code(run) == summary.exit_code  # what `farm report --format json` exits with


def test_a_server_database_is_one_database_however_its_url_is_written(tmp_path):
    """Found in review: farm.yaml's PostgreSQL URL without its password and FARM_DATABASE's
    with it were two databases: two run locks on one database, and a nightly run that
    never rendered its own site."""
    from orchestrator.store.location import same_database
    from orchestrator.store.lock import lock_path

    plain = "postgresql+psycopg://farm@db.lab/farm"
    spellings = [
        "postgresql+psycopg://farm:s3cret@db.lab/farm",
        "postgresql://farm@db.lab/farm",
        "postgresql+psycopg://farm@db.lab:5432/farm",
        "postgresql+psycopg://farm@DB.lab/farm?connect_timeout=5",
    ]
    for url in spellings:
        assert same_database(plain, url), url
        assert lock_path(url, tmp_path) == lock_path(plain, tmp_path), url
    for other in [
        "postgresql+psycopg://farm@db.lab/other",
        "postgresql+psycopg://farm@db2.lab/farm",
        "postgresql+psycopg://farm@db.lab:5433/farm",
        "postgresql+psycopg://ci@db.lab/farm",
    ]:
        assert not same_database(plain, other), other
        assert lock_path(other, tmp_path) != lock_path(plain, tmp_path), other


def test_a_journal_on_a_full_disk_still_lets_the_database_say_how_the_run_ended(tmp_path: Path) -> None:
    """Found by a red-team helper: the journal's disk filled mid-run. Its close() then
    raised a bare OSError (the farm said "a bug in farm", exit 70, hiding the journal's
    own error), and the run's end, journal first, never reached the database: the run
    stayed "running". The database is told now, and the journal's error (a StoreError
    naming it) is raised after; its close says the same, never a bare OSError."""
    from orchestrator.errors import StoreError
    from orchestrator.store.journal import Journal

    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        run_id = store.begin_run(
            token="tok", trigger="test", farm_version="t", host="h", config_file="farm.yaml", selection="--all"
        )
        (tmp_path / "journal").mkdir()
        os.symlink("/dev/full", tmp_path / "journal" / "tok.jsonl")  # every write: ENOSPC
        store.journal = Journal(tmp_path / "journal", "tok")
        with pytest.raises(StoreError, match="cannot append to the run's journal"):
            store.finish_run(run_id, "aborted", 5)
        run = store.run(run_id)
        assert run is not None and (run.status, run.exit_code) == ("aborted", 5)
        with pytest.raises(StoreError, match="cannot finish the run's journal"):
            store.journal.close()
        store.journal.close()  # once is enough: closed
    finally:
        store.close()
