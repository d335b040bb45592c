"""Which results database a site's folder was rendered from, and a folder started afresh
when another one renders into it.

Pages are kept from render to render (stamps.py), and a cell or run page is trusted by
its stamp: ids and a run's start. Once results.db was replaced (lost, a fresh one, run
ids from 1 again), the old database's runs/N.html and cells/N.html stayed beside the new
one's, and a page whose stamp matched was kept and linked from the new index: the old
green page over the new verdict (a red-team finding). So the folder records the database
(SITE_FILE), and a render from another one first takes the old site's pages away.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

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


def take_site(out_dir: Path, identity: str, mark: Callable[[], None]) -> None:
    """Make `out_dir` the site of the database `identity` (Store.database_identity): where it
    holds a site of another database, or of one unknown (written before this file was), its
    index first says no report (`mark`: site.mark_unrendered's call, so a reader never opens an
    old index linking to new pages, nor the other way round), then the old pages go, each
    folder by a rename first (it is gone at once; its files are deleted after), and the folder
    is recorded as this database's. A render killed on the way leaves the old record: the
    next one takes the folder again."""
    recorded = f"farm site of results database {identity}\n"
    found = _recorded(out_dir)
    if found == recorded:
        return
    # a site unrecorded: its index or history page is there (a folder of that name alone is not a site)
    if found is not None or any((out_dir / name).exists() for name in ("index.html", "history.html")):
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
