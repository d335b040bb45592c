"""Red-team 209: another farm's closing mark appended to a journal whose last record was cut short.

A run that died while appending (a full disk: the journal's write stopped mid-record) leaves a last
line without its line break. The start that closes the run appends its `closed` mark (closing.py),
which was glued to that piece: one line that parses as nothing, the last, skipped as a crash's cut.
The mark was lost, and the import judged the run's later records by wall clocks again (review 136's
finding, back by another way)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.store import journal as journal_file
from orchestrator.store.closing import closed_at, journaled_end, mark_closed


def _journal(folder: Path, token: str) -> Path:
    j = journal_file.Journal(folder, token)
    j.write("run", {"token": token, "started_at": datetime(2026, 12, 7, 8, 0, tzinfo=UTC)})
    j.write("result", {"kernel": "k", "variant": "v", "outcome": "pass"})
    j.close()
    return j.path


def test_a_closing_mark_after_a_record_cut_short_is_read(tmp_path):
    """Before: the mark glued to the cut record: closed_at None, the run's end None (judged by
    clocks). Figure: the mark on a line of its own, read; the cut record skipped, the others kept."""
    folder = tmp_path
    path = _journal(folder, "tok-a")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"kind":"result","kernel":"k","variant":"w","outc')  # the disk filled here
    at = datetime(2026, 12, 7, 8, 5, tzinfo=UTC)
    assert mark_closed(folder, "tok-a", at)
    records = list(journal_file.read(path))
    assert [kind for kind, _ in records] == ["run", "result", "closed"]
    assert closed_at(records) == 2
    assert journaled_end(records) == {"status": "aborted", "exit_code": None, "ended_at": at}


def test_a_closing_mark_after_a_whole_record_adds_no_line(tmp_path):
    """Figure: after a whole last record the mark is appended as before (no blank line), and a blank
    line (a mark's line break raced by the run's own append) is no record and no error."""
    path = _journal(tmp_path, "tok-b")
    assert mark_closed(tmp_path, "tok-b", datetime(2026, 12, 7, 8, 5, tzinfo=UTC))
    assert "\n\n" not in path.read_text()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n")
    assert mark_closed(tmp_path, "tok-b", datetime(2026, 12, 7, 8, 6, tzinfo=UTC))
    assert [kind for kind, _ in journal_file.read(path)] == ["run", "result", "closed", "closed"]


def test_a_record_cut_short_inside_the_journal_is_still_refused(tmp_path):
    """Figure: only closing marks may follow a cut record; a result after one is no crash's cut
    but a damaged journal, refused naming its line."""
    path = _journal(tmp_path, "tok-c")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"kind":"result","kern\n{"kind":"result","kernel":"k","variant":"x","outcome":"pass"}\n')
    with pytest.raises(StoreError, match="line 3 is not a journal record"):
        list(journal_file.read(path))
