"""Red-team round 85: a kernel author's first job file, and a night operator's killed run.

1. An inspection that failed said only "the disassembler exit 255" (in `farm show`, on the cell's
   page, in the matrix and JUnit): what the disassembler printed on stderr (cuobjdump's "File ...
   does not contain device code" for a job left on the default inspect, objdump's "No such file")
   was written on the node to inspect.err and never brought back, so the author had to log in to
   the node to learn why.
2. A `farm verify` SIGKILLed mid-run (the OOM killer, a reboot) had its unfinished cells recorded
   not-run by the next start with no card (planned before the probe), so the matrix grew a column
   "NODE, no GPU" for a node with a GPU, for good (no later run writes a cell there), counted in
   the fleet's standing, under a "job changed since" that read "now says CC >= 7.5 (then ): on CC
   None the kernel must now build only; this verdict held it to unknown".
3. A SQLite URL's `?timeout=SECONDS` (README: the wait for a lock) was overridden by a fixed 30 s
   busy_timeout on every connection: `?timeout=300`, for a nightly backup holding results.db a
   minute, still gave up after 30 s.
4. A run whose start could not be stored (results.db's write lock held by another program, a
   sqlite3 shell or a backup) said only "database is locked" and "this run's records are in its
   journal: farm import ...": that import made an aborted run of no results the site's newest, and
   the journal, of a run the database never had, was never pruned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from nodes import CARDS, nvidia_smi_script, smi_on_path
from toyfarm import toy_farm


def rows(db: Path, sql: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# ------------------------------------------------------------ 1. what the disassembler said


def test_an_inspect_that_fails_says_what_the_disassembler_printed(tmp_path: Path, runner: str) -> None:
    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    text = job.read_text().replace("instructions: {ret: 1}", "instructions: {}")
    job.write_text(text.replace("inspect: 'objdump -d {binary}'", "inspect: 'objdump -d {binary} /no/such/lib.a'"))
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    (row,) = rows(tmp_path / "results.db", "SELECT id, outcome, reason FROM results")
    assert row["outcome"] == "inspect-fail", dict(row)
    assert "/no/such/lib.a" in row["reason"] and "No such file" in row["reason"], row["reason"]
    shown = farm("show", str(row["id"]), "--config", str(config))
    assert "/no/such/lib.a" in shown.stdout, shown.stdout
    page = (tmp_path / "reports" / "cells" / f"{row['id']}.html").read_text()
    assert "/no/such/lib.a" in page


# ------------------------------------------------------------ 2. a killed run's unfinished cells


def test_a_killed_runs_unfinished_cells_keep_their_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    slow = "  slow:\n    build: 'g++ -O2 -o {binary} {sources}'\n    inspect: 'sleep 60; objdump -d {binary}'\n"
    job.write_text(job.read_text() + slow + "    cc: {min: '7.5'}\n")
    db = tmp_path / "results.db"
    argv = farm_argv("verify", "--all", "--quiet", "--config", str(config))
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=farm_env()
    ) as night:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the quick cell stored, the slow one in its inspect
            with contextlib.suppress(sqlite3.OperationalError):  # made, its schema not yet (a CI flake)
                if db.exists() and rows(db, "SELECT 1 FROM results WHERE variant = 'plain'"):
                    break
            time.sleep(0.2)
        time.sleep(1)
        os.killpg(night.pid, signal.SIGKILL)
        night.wait(timeout=30)
    again = farm("verify", "toy:plain", "--config", str(config))
    assert again.returncode == 0 and "run 1 was interrupted" in again.stdout, again.stdout + again.stderr
    (lost,) = rows(db, "SELECT device, cc FROM results WHERE run_id = 1 AND variant = 'slow'")
    assert (lost["device"], lost["cc"]) == ("Tesla T4", "7.5"), dict(lost)
    index = (tmp_path / "reports" / "index.html").read_text()
    assert "no GPU" not in index and "(then )" not in index and "CC None" not in index


# ------------------------------------------------------------ 3, 4. results.db held by another program


def verify_under_a_held_lock(tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`farm verify` of the toy farm (`?timeout=1`, run 1 stored) while another program holds
    results.db's write lock (a sqlite3 shell or a script mid-write, not a farm run); its seconds."""
    config = toy_farm(tmp_path)
    config.write_text(config.read_text().replace("sqlite:///results.db", "sqlite:///results.db?timeout=1"))
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    holder = sqlite3.connect(tmp_path / "results.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        done = farm("verify", "--all", "--config", str(config))
        return done, time.monotonic() - started
    finally:
        holder.close()


def test_a_sqlite_urls_timeout_is_the_wait_for_a_lock(tmp_path: Path) -> None:
    done, waited = verify_under_a_held_lock(tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    # a connection's busy_timeout of 30 s overrode it: `?timeout=300` (README) gave up after 30 s
    assert waited < 20, f"waited {waited:.0f} s for a lock under ?timeout=1"


def test_a_run_never_stored_leaves_no_journal_to_import(tmp_path: Path) -> None:
    done, _ = verify_under_a_held_lock(tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "farm import" not in done.stderr, done.stderr  # its run was never stored: nothing to rebuild
    assert "another program" in done.stderr and "nothing of this run was stored" in done.stderr, done.stderr
    assert [r["id"] for r in rows(tmp_path / "results.db", "SELECT id FROM runs")] == [1]
    assert len(list((tmp_path / "results.db.journal").glob("*.jsonl"))) == 1, "run 1's journal alone"
