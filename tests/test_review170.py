"""Review round 170: the attempt of a cell whose module was reloaded under it says so.

Round 157 made such a cell the node's infra-error (no verdict on a driver the probe never saw), but
its attempt was stored as an `ok` try and counted as a success for the node's health (review 161's
note): `farm show` listed an infra-error cell whose only attempt was fine.
"""

from __future__ import annotations

import errno
import os
import select
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from farm_cli import farm
from faults import Tmpfs
from nodes import standin_job, standin_variant
from test_redteam157 import PROBED, RELOADED, _node
from test_verdicts import MIN75, rows, run

from orchestrator.cli import verify
from orchestrator.report import site
from orchestrator.report.pagewriter import write_fresh


def test_a_reloaded_cells_attempt_is_the_nodes(make_farm, tmp_path: Path) -> None:
    """Before: the attempt ("ok", no stage, no error). Figure: ("infra", "run", the reload's words)."""
    prelude = tmp_path / "reload.sh"
    prelude.write_text(f"printf '%s\\n' '{RELOADED}' > /proc/driver/nvidia/version\n")
    node = _node(tmp_path / "node", PROBED)
    node.start()
    try:
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
        entry = node.farm_entry(tmp_path / "work")
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    db = tmp_path / "farm" / "results.db"
    [row] = rows(db, summary.run_id).values()
    assert row["outcome"] == "infra-error", row["reason"]
    with sqlite3.connect(db) as connection:
        tries = connection.execute(
            "SELECT status, stage, error FROM attempts WHERE run_id = ? AND kernel IS NOT NULL", (summary.run_id,)
        ).fetchall()
    assert len(tries) == 1, tries
    status, stage, error = tries[0]
    assert (status, stage) == ("infra", "run"), tries
    assert "535.104.05" in (error or ""), tries


def test_a_fresh_cell_page_cut_short_by_a_full_disk_is_not_left(tmp_path: Path) -> None:
    """Red-team 167's note: a full reports/ left a new cell page without its end (nothing linked it,
    and the next render rewrote it, but a reviewer opening the folder found half a page). Before: the
    cut page stayed. Figure: the write fails (ENOSPC) and no page is there."""
    disk = Tmpfs(tmp_path / "reports", "64k")
    try:
        page = disk.path / "cells" / "r1" / "1.html"
        with pytest.raises(OSError) as full:
            write_fresh(str(page), b"<!doctype html>" + b"x" * 400_000)
        assert full.value.errno == errno.ENOSPC
        assert not page.exists(), page.stat().st_size
    finally:
        disk.unmount()


def test_a_farm_folder_whose_path_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """Red-team 167's note: farm.yaml in a folder named in Latin-1 (b"f\\xe9"). Before: exit 70, "internal
    error (UnicodeEncodeError ...); this is a bug in farm". Figure: exit 3 naming farm.yaml and UTF-8."""
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/f\xe9"))
    folder.mkdir()
    (folder / "farm.yaml").write_text("nodes:\n  local:\n    transport: local\n")
    done = farm("verify", "--all", cwd=folder, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "farm.yaml" in done.stderr and "not valid UTF-8" in done.stderr, done.stderr
    assert "bug in farm" not in done.stderr, done.stderr


def test_a_runs_output_writer_leaves_its_workers_forked(tmp_path: Path) -> None:
    """Red-team 171 wrote progress over a pipe or a terminal from a thread of its own; run/workers.py
    forks workers only beside threads a child resets, so every such run started them from the fork
    server (0.5-1.3 s later). Before: "forkserver". Figure: "fork", and a forked child's line, written
    by itself (no writer thread came with it), reaches the pipe."""
    from orchestrator.guarded import Guarded
    from orchestrator.run.workers import start_method

    read, write = os.pipe()
    stream = open(write, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        guarded = Guarded(stream, "a pipe")
        assert start_method() == "fork"
        pid = os.fork()
        if pid == 0:  # the child: a write, then out at once (no atexit, as a multiprocessing worker)
            try:
                guarded.write("from the child\n")
                guarded.flush()
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert select.select([read], [], [], 10)[0], "nothing came from the child"
        assert os.read(read, 100) == b"from the child\n"
    finally:
        stream.close()
        os.close(read)


@pytest.mark.parametrize(("run_id", "said"), [(7, "Run 7 did not finish"), (0, "could not start")])
def test_a_stored_run_whose_database_went_away_is_not_said_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_id: int, said: str
) -> None:
    """Red-team 173's note: a run stored, then its database lost mid-run (the site's render fails
    too). Before: the index said "Run 7 could not start ...; nothing of it was stored", of a run
    that had stored cells. Figure: "did not finish", the command that renders it named; a run
    never stored (id 0) still "could not start"."""

    def down(*_args: object, **_kwargs: object) -> None:
        raise OSError("connection to server lost")

    monkeypatch.setattr(site, "render", down)
    farm = SimpleNamespace(reports_dir=tmp_path / "reports")
    verify._site_after_failed_start(None, farm, run_id, RuntimeError("server closed the connection"))  # type: ignore[arg-type]
    page = (tmp_path / "reports" / "index.html").read_text()
    assert said in page, page
    if run_id:
        assert "nothing of it was stored" not in page and "farm report --run 7" in page, page
