"""Journal pruning (journal.prune): the newest `journal_keep` finished runs' journals
stay, older ones go, and a journal that may be the only copy of a record never does.

Every journal here is written by a real Store into a real SQLite file's journal
folder, as a run writes it; the last test runs `farm verify` on the toy farm.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest
from farm_cli import farm
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigErrors, StoreError
from orchestrator.store import journal
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord


def result_record(run_id: int, snapshot_id: int, variant: str) -> ResultRecord:
    now = datetime.now(UTC)
    return ResultRecord(
        run_id=run_id,
        snapshot_id=snapshot_id,
        kernel="k",
        variant=variant,
        node="n",
        contract="cc>=7.5",
        expected="pass",
        contract_expected="pass",
        expected_reason="r",
        outcome="pass",
        reason="printed its pass marker",
        stage_seconds={"run": 0.1},
        stage_details={},
        build_command="g++ k.cpp",
        build_log=b"",
        stdout=b"k: PASS\n\xff",
        stderr=b"",
        source_sha256="0" * 64,
        sources={"k.cpp": "0" * 64},
        instruction_counts={"ret": 1},
        required_instructions={"ret": 1},
        elf_targets=[],
        ptx_targets=[],
        started_at=now,
        ended_at=now,
    )


def attempt(run_id: int, variant: str) -> AttemptRecord:
    return AttemptRecord(run_id=run_id, node="n", kernel="k", variant=variant, attempt=1, status="ok")


def snapshot_of(run_id: int) -> SnapshotRecord:
    return SnapshotRecord(run_id=run_id, node="n", transport="local", address="local", bytes_shipped=0)


def journaled_run(store: Store, folder: Path, *, finish: bool = True) -> tuple[int, Path]:
    """One run as the scheduler stores it, its journal in `folder`: (run id, journal)."""
    token = secrets.token_hex(6)
    store.journal = Journal(folder, token)
    run_id = store.begin_run(
        token=token, trigger="test", farm_version="t", host="h", config_file="farm.yaml", selection="--all"
    )
    store.add_planned(run_id, [("k", "a", "n", ""), ("k", "b", "n", "")])
    snapshot = store.add_snapshot(snapshot_of(run_id))
    for variant in ("a", "b"):
        store.add_result(result_record(run_id, snapshot, variant), [attempt(run_id, variant)])
    if finish:
        store.finish_run(run_id, "finished", 0)
    store.journal.close()
    store.journal = None
    return run_id, folder / f"{token}.jsonl"


@pytest.fixture
def store(tmp_path: Path):
    opened = Store(f"sqlite:///{tmp_path / 'results.db'}")
    yield opened
    opened.close()


def journals_of(folder: Path) -> set[Path]:
    return set(folder.glob("*.jsonl"))


def test_the_newest_k_finished_runs_journals_stay_and_the_older_go(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "results.db.journal"
    runs = [journaled_run(store, folder) for _ in range(5)]
    deleted = journal.prune(folder, store, keep=2)
    assert deleted == [path for _, path in runs[:3]]
    assert journals_of(folder) == {path for _, path in runs[3:]}
    assert journal.prune(folder, store, keep=2) == []  # nothing more to do
    # what stays still rebuilds its run elsewhere
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert fresh.import_journal(runs[-1][1])[1:3] == ("finished", 2)
    fresh.close()
    with pytest.raises(ValueError, match="at least 1"):
        journal.prune(folder, store, keep=0)


def test_a_journal_whose_run_is_not_in_the_database_stays(store: Store, tmp_path: Path) -> None:
    """Another database's runs share the folder (farm.yaml `journal:`): none of
    them is this database's to judge, however old."""
    folder = tmp_path / "shared-journals"
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    foreign = [journaled_run(other, folder)[1] for _ in range(3)]
    other.close()
    mine = [journaled_run(store, folder)[1] for _ in range(3)]
    assert journal.prune(folder, store, keep=1) == mine[:2]
    assert journals_of(folder) == {*foreign, mine[2]}


def test_an_unfinished_runs_journal_stays(store: Store, tmp_path: Path) -> None:
    """A run still marked running, and one the next start marked aborted (the farm
    died: no finish was committed, the journal may hold what the database lacks)."""
    folder = tmp_path / "results.db.journal"
    _, died = journaled_run(store, folder, finish=False)
    store.abort_unfinished_runs()
    _, running = journaled_run(store, folder, finish=False)
    newer = [journaled_run(store, folder)[1] for _ in range(2)]
    assert journal.prune(folder, store, keep=1) == [newer[0]]
    assert journals_of(folder) == {died, running, newer[1]}


def test_a_journal_holding_what_the_database_lacks_or_unreadable_stays(store: Store, tmp_path: Path) -> None:
    """A result whose commit failed is in the journal only (journal first), though
    the run then finished; and a journal that cannot be read whole is no proof."""
    folder = tmp_path / "results.db.journal"
    token = secrets.token_hex(6)
    store.journal = Journal(folder, token)
    run_id = store.begin_run(token=token, trigger="t", farm_version="t", host="h", config_file="f", selection="s")
    snapshot = store.add_snapshot(snapshot_of(run_id))
    refused = dataclasses.replace(result_record(run_id, snapshot, "a"), outcome=None)  # NOT NULL: the commit fails
    with pytest.raises(StoreError):
        store.add_result(refused)
    store.finish_run(run_id, "aborted", 5)
    store.journal.close()
    store.journal = None
    lacking = folder / f"{token}.jsonl"
    _, garbled = journaled_run(store, folder)
    lines = garbled.read_text().splitlines()
    garbled.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    newest = journaled_run(store, folder)[1]
    assert journal.prune(folder, store, keep=1) == []
    assert journals_of(folder) == {lacking, garbled, newest}


def test_a_journal_is_read_a_line_at_a_time_its_cut_last_line_skipped(store: Store, tmp_path: Path) -> None:
    """A crash mid-write leaves a last line cut short: `farm import` reads the rest
    (the cut finish: the run is aborted); a bad line before the last is an error
    naming it, before anything is imported."""
    folder = tmp_path / "results.db.journal"
    _, path = journaled_run(store, folder)
    whole = path.read_bytes()
    path.write_bytes(whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 20])  # the finish record, cut
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert fresh.import_journal(path)[1:3] == ("aborted", 2)
    lines = whole.splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b'{"kind":"result","cut', b"\n", *lines[2:]]))
    with pytest.raises(StoreError, match=r"line 3 is not a journal record"):
        fresh.import_journal(path)
    assert len(fresh.runs()) == 1
    fresh.close()


def test_journal_keep_in_farm_yaml(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    assert load_farm(config).spec.journal_keep == 20
    for bad, expected in (("0", "greater than or equal to 1"), ("'3'", "a valid integer"), ("2.5", "valid integer")):
        config.write_text(toy_farm(tmp_path).read_text() + f"journal_keep: {bad}\n")
        with pytest.raises(ConfigErrors) as info:
            load_farm(config)
        assert "farm.yaml: journal_keep: found" in str(info.value) and expected in str(info.value), str(info.value)


def test_farm_verify_leaves_journal_keep_journals(tmp_path: Path) -> None:
    """K + 2 runs of the toy farm with journal_keep: K leave the newest K runs' journals."""
    keep = 2
    config = toy_farm(tmp_path)
    config.write_text(config.read_text() + f"journal_keep: {keep}\n")
    for _ in range(keep + 2):
        done = farm("verify", "--all", "--no-report", "--config", str(config), timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    store = Store(f"sqlite:///{tmp_path / 'results.db'}", create=False)
    runs = store.runs()
    store.close()
    assert [run.status for run in runs] == ["finished"] * (keep + 2)
    left = {path.stem for path in journals_of(tmp_path / "results.db.journal")}
    assert left == {run.token for run in runs[:keep]}  # runs() is newest first


def test_a_journal_older_than_the_newest_run_is_refused_and_farm_import_sorts_them(
    store: Store, tmp_path: Path
) -> None:
    """Found by a red-team helper: `farm import` of journals newest first made the
    older, green run the highest id, so every standing query took it for the newest.
    Such an import is refused, naming both starts; `farm import` given several
    journals imports them in the order their runs started."""
    folder = tmp_path / "results.db.journal"
    _, older = journaled_run(store, folder)
    _, newer = journaled_run(store, folder)
    assert journal.started_at(older) < journal.started_at(newer)
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert fresh.import_journal(newer)[0] == 1
    with pytest.raises(StoreError) as refused:
        fresh.import_journal(older)
    said = str(refused.value)
    assert said.startswith(f"{older}: its run started {journal.started_at(older).isoformat(timespec='seconds')}")
    assert "before run 1 (" in said and "import journals oldest first" in said, said
    assert len(fresh.runs()) == 1
    fresh.close()
    config = toy_farm(tmp_path / "farm")
    url = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    argv = ["import", str(newer), str(older), "--config", str(config), "--database", url]
    done = farm(*argv, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"imported {older} as run 1 (finished, 2 results)",
        f"imported {newer} as run 2 (finished, 2 results)",
    ]
    rebuilt = Store(url, create=False)
    assert [run.token for run in sorted(rebuilt.runs(), key=lambda r: r.id)] == [older.stem, newer.stem]
    rebuilt.close()
