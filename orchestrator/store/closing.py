"""Where in a run's journal another farm's start closed the run: a mark it appends there.

A run the database closed (another farm's start marked it aborted: its PostgreSQL lock session
had ended) may go on until it sees its lock gone, and that start kills what it left on the nodes
(reap_dead_runs): a kernel so killed is journaled as its crash. `farm import` completing the run
(completing.py) took no journaled result that ended after the close, comparing the result's end
with the close's stamp: two readings of wall clocks that step, and of two hosts. With the run's
clock ahead, real verdicts were turned away; behind, a killed kernel's crash got in (a review
finding, 136). The closing start appends a `closed` record to the run's journal where it can
reach it (the same journal folder), after the abort is committed and before its reap kills
anything: every record above it was written before any kill, every one below it after the close.
The order of a file's appends cannot step.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

KIND = "closed"


def mark_closed(folder: Path | None, token: str | None, at: datetime) -> bool:
    """Append the closing mark to the journal of run `token` in `folder`, where there is one
    (never made here: a run journaled elsewhere gets none). One write of O_APPEND: never inside
    a record the run itself is appending (a run appending between the look at the last byte and
    this write leaves a blank line, which the journal's reader skips). Whether it was written; a
    failure is no error (the import judges by the clocks then, and says so)."""
    if folder is None or not token:
        return False
    line = json.dumps({"kind": KIND, "at": {"$time": at.isoformat()}}, separators=(",", ":")) + "\n"
    with contextlib.suppress(OSError):
        path = folder / f"{token}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.write(fd, (b"\n" if _cut_short(path) else b"") + line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    return False


def _cut_short(path: Path) -> bool:
    """Whether the journal's last record lacks its line break (the run's crash cut it short): the
    mark then goes on a line of its own, else glued to the piece, one line that parsed as nothing,
    skipped as a crash's cut, and the mark was lost (red-team 209)."""
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


def closed_at(records: list[tuple[str, dict[str, Any]]]) -> int | None:
    """The index of the first closing mark among a journal's records, or None."""
    return next((i for i, (kind, _fields) in enumerate(records) if kind == KIND), None)


def journaled_end(records: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """How the journal says its run ended (a finish's fields: status, exit_code, ended_at), or None.
    A finish journaled after a closing mark, or none at all, is the close's: aborted at the mark's
    stamp (None where the mark holds no time). A rebuild (rebuilding.py) and a completion
    (completing.py) both go by it: the completion had taken the finish its farm journaled after the
    close, and the run read finished where a rebuild of the same journal read aborted (review 145)."""
    mark = closed_at(records)
    finish_at = next((index for index, (kind, _fields) in enumerate(records) if kind == "finish"), None)
    if mark is None or (finish_at is not None and finish_at < mark):
        return records[finish_at][1] if finish_at is not None else None
    at = records[mark][1].get("at")
    return {"status": "aborted", "exit_code": None, "ended_at": at} if isinstance(at, datetime) else None
