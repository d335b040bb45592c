"""Which results database a site's folder was rendered from, and a folder started afresh
when another one renders into it.

Pages are kept from render to render (stamps.py), and a cell or run page is trusted by
its stamp: ids and a run's start. Once results.db was replaced (lost, a fresh one, run
ids from 1 again), the old database's runs/N.html and cells/N.html stayed beside the new
one's, and a page whose stamp matched was kept and linked from the new index: the old
green page over the new verdict (a red-team finding). So the folder records the database
(SITE_FILE), and a render from another one first takes the old site's pages away.

results.db restored from an older backup of itself keeps its database_id, but not the runs made
after the backup: their pages stayed, verdicts the database no longer holds (a red-team finding).
So the folder records the newest run (id, token, start) and result it was rendered with too, and a
database that does not hold them (a backup taken mid-run holds the run, not its later results) is
another history: its site is taken afresh as well.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from orchestrator.report.pagewriter import write_page

SITE_FILE = ".farm-site"  # the database the folder's pages were rendered from
# what a render writes; nothing else in the folder is touched (an --out may hold the user's files)
SITE_ENTRIES = ("cells", "runs", "kernels", "nodes", "history.html")
_OLD = ".farm-old-"  # an old site's entries on their way out (a render killed meanwhile leaves them)


def _recorded(out_dir: Path) -> str | None:
    try:
        return (out_dir / SITE_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # not there (a fresh folder, a site of an older farm), or not ours
        return None


class History(Protocol):
    """What of a database's runs and results a site records (Store's)."""

    def run_mark(self, run_id: int | None = None) -> str | None: ...
    def result_mark(self, result_id: int | None = None) -> str | None: ...


def _held(mark: str, lookup: Callable[[int], str | None]) -> bool:
    """Whether the run or result `mark` ("run N ...", "result N of ...") is in the database as it was."""
    number = mark.split(" ", 2)[1] if mark.count(" ") >= 1 else ""
    return mark == "result none" or (number.isdigit() and lookup(int(number)) == mark)


def _same_history(found: str | None, head: str, history: History) -> bool:
    """Whether the record `found` is of this database (`head`) and its newest run and result then
    are still here as they were. A record without them (an older farm's) cannot say: the site is
    taken afresh, once."""
    lines = (found or "").split("\n")
    if len(lines) != 4 or lines[0] != head or lines[3]:
        return False
    run, result = (line.removeprefix("newest ") for line in lines[1:3])
    return (
        lines[1].startswith("newest run ")
        and lines[2].startswith("newest result ")
        and _held(run, history.run_mark)
        and _held(result, history.result_mark)
    )


def take_site(out_dir: Path, identity: str, history: History, mark: Callable[[], None]) -> None:
    """Make `out_dir` the site of the database `identity` (Store.database_identity) as it is now
    (`history`: the Store, its runs and results): where it holds a site of another database, of one
    unknown (written before this file was), or of this one's runs or results that it no longer holds
    (restored from a backup), its index first says no report (`mark`: site.mark_unrendered's call,
    so a reader never opens an old index linking to new pages, nor the other way round), then the
    old pages go, each folder by a rename first (it is gone at once; its files are deleted after),
    and the folder is recorded as this database's, with its newest run and result. A render killed
    on the way leaves the old record: the next one takes the folder again."""
    head = f"farm site of results database {identity}"
    recorded = f"{head}\nnewest {history.run_mark()}\nnewest {history.result_mark() or 'result none'}\n"
    found = _recorded(out_dir)
    if found == recorded:
        return
    # a site unrecorded: its index or history page is there (a folder of that name alone is not a site)
    if not _same_history(found, head, history) and (
        found is not None or any((out_dir / name).exists() for name in ("index.html", "history.html"))
    ):
        if (out_dir / "index.html").exists():
            mark()
        for name in SITE_ENTRIES:
            page = out_dir / name
            if not (page.is_file() if name.endswith(".html") else page.is_dir()):
                continue  # not the site's (a file where its cells/ go fails the render, as before)
            with contextlib.suppress(FileNotFoundError):
                os.rename(page, out_dir / f"{_OLD}{os.getpid()}-{name}")
        for old in out_dir.glob(f"{_OLD}*"):  # this render's, and those a killed one left
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
    write_page(str(out_dir / SITE_FILE), recorded.encode(), compare=False)
