"""Review round 185: the next start reads a dead run's journal before it calls the run "stopped".

A run whose database failed (a full disk under results.db, a server gone past `store_wait`) stops
with exit 5 and "farm import JOURNAL"; its journal holds the cell whose commit failed and the run's
own end (aborted, exit 5). The night operator's next cron start found the run still "running",
marked it aborted "(the farm was stopped)" and wrote the cell not-run, "the farm was stopped before
this cell finished": the kernel's verdict and the run's exit code stood lost behind a wrong cause
until someone ran the import. Now that start completes the run from its journal first, as the
import would (store/completing.py), and says so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from farm_cli import farm
from faults import Tmpfs, faults_job, faults_variant
from faults import write_fault_farm as write_farm
from nodes import Fleet, query
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.recovery import Aborted

MIN75 = {"min": "7.5"}


def _verify(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return farm("verify", "--all", "--config", str(config), "--no-report", cwd=root, timeout=180)


def test_the_next_start_takes_a_full_disks_cell_and_exit_from_the_journal(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Before: the next start said "run 1 was interrupted (the farm was stopped)" and stored the
    cell whose commit the full disk refused as not-run, "the farm was stopped before this cell
    finished"; the run's exit was None. Figure: results.db on a 700 KiB tmpfs, a kernel whose
    1 MiB of kept output cannot fit: exit 5; the disk grown, the next start takes the cell (pass,
    its 2 MiB of stdout) and the run's exit 5 from the journal, and says so."""
    disk = Tmpfs(tmp_path / "small", "700k")
    try:
        variants = {"flood": faults_variant("FLOOD", MIN75, "FLOOD_MIB=2")}
        config = write_farm(
            tmp_path,
            {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")},
            [faults_job(variants)],
            database=f"sqlite:///{disk.path / 'results.db'}",
            journal="journals",
        )
        first = _verify(tmp_path, config)
        assert first.returncode == 5 and "farm import" in first.stderr, first.stdout + first.stderr
        grown = subprocess.run(["mount", "-o", "remount,size=64m", str(disk.path)], capture_output=True, text=True)
        assert grown.returncode == 0, grown.stderr
        again = _verify(tmp_path, config)
        assert "run 1 had stopped with exit 5, and 1 result its database lacked" in again.stdout, again.stdout
        assert "the farm was stopped" not in again.stdout, again.stdout
        (run,) = query(disk.path / "results.db", "SELECT status, exit_code FROM runs WHERE id = 1")
        assert (run["status"], run["exit_code"]) == ("aborted", 5)
        rows = query(disk.path / "results.db", "SELECT outcome, stdout_size, reason FROM results WHERE run_id = 1")
        assert [r["outcome"] for r in rows] == ["pass"], [dict(r) for r in rows]
        assert rows[0]["stdout_size"] > 2 << 20
    finally:
        disk.unmount()


def test_a_run_whose_farm_died_is_still_said_stopped(tmp_path: Path) -> None:
    """The other side, unchanged: a run with no journal end (its farm killed) is aborted "(the farm
    was stopped)", its unfinished cells not-run with that cause, and nothing is said taken."""
    farm_ = load_farm(toy_farm(tmp_path))
    store = Store(farm_.database_url)
    folder = tmp_path / "journals"
    store.journal = Journal(folder, "feedbeef0001")  # a journal with no end: its farm killed
    run_id = store.begin_run(
        [("toy", "plain", "here", "")], trigger="test", farm_version="0", host="h", config_file="farm.yaml",
        selection="--all", token="feedbeef0001",
    )  # fmt: skip
    store.journal.close()
    store.close()
    later = Store(farm_.database_url)
    try:
        (aborted,) = later.abort_unfinished_runs(folder)
    finally:
        later.close()
    assert aborted == Aborted(run_id, 1, 0, None, "")
    assert aborted.said() == (
        f"run {run_id} was interrupted (the farm was stopped): marked aborted, 1 unfinished cells recorded as not-run"
    )
    (row,) = query(tmp_path / "results.db", "SELECT outcome, reason FROM results")
    assert row["outcome"] == "not-run" and "the farm was stopped" in row["reason"], dict(row)


def test_a_damaged_journal_is_named_and_the_run_aborted_as_before(tmp_path: Path) -> None:
    """A journal that cannot be read is no reason to leave a dead run running: aborted as before,
    the line naming the journal's fault and the import to run once it is mended."""
    said = Aborted(3, 2, 0, None, "results.db.journal/x.jsonl: line 4 has an unknown kind 'zz'").said()
    assert said.startswith("run 3 was interrupted (the farm was stopped): marked aborted, 2 unfinished")
    assert "its journal could not be read (results.db.journal/x.jsonl: line 4" in said and "farm import" in said


def test_a_journaled_finish_with_a_cell_unstored_is_no_finished_run(tmp_path: Path) -> None:
    """Self-review of this round: a journal whose run says "finished" but holds no result of a planned
    cell (a journal written by hand, a record lost) had its end taken as it said: a finished run with a
    not-run row, which the exports read as complete. Figure: the start's run is aborted, exit kept."""
    from datetime import UTC, datetime

    farm_ = load_farm(toy_farm(tmp_path))
    store = Store(farm_.database_url)
    folder = tmp_path / "journals"
    store.journal = Journal(folder, "feedbeef0002")
    store.begin_run(
        [("toy", "plain", "here", "")], trigger="test", farm_version="0", host="h", config_file="farm.yaml",
        selection="--all", token="feedbeef0002",
    )  # fmt: skip
    store.journal.write("finish", {"status": "finished", "exit_code": 0, "ended_at": datetime.now(UTC)})
    store.journal.close()
    store.close()  # the database never took the end
    later = Store(farm_.database_url)
    try:
        (aborted,) = later.abort_unfinished_runs(folder)
    finally:
        later.close()
    assert (aborted.not_run, aborted.exit_code, aborted.end_taken) == (1, 0, True)
    (run,) = query(tmp_path / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("aborted", 0), dict(run)
