"""Review round 86: the merged rounds 83-85 (the site's render lock and record, a killed run's
not-run cells on their probed card, a run whose start could not be stored, the SQLite URL's
`?timeout=`, a failed inspect's stderr in its reason, waiting for closed SSH transports).

1. A SQLite URL's `?timeout=` passed its check at load for any finite number of seconds, and the
   engine turned it into milliseconds: `?timeout=1e307` (finite, its milliseconds not) was an
   OverflowError traceback at every open of the database, no key named.
2. The render lock (site_lock.py) on a reports folder whose filesystem has no file locks: NFS
   without its lock daemon (flock: ENOLCK), GlusterFS or a FUSE mount (EOPNOTSUPP); filelock falls
   back to a soft lock for ENOSYS alone. Every render failed there ("report not rendered", the
   site never again brought up to date), where before the lock it rendered.
"""

from __future__ import annotations

import errno
import fcntl
import sqlite3
from pathlib import Path

import pytest
from farm_cli import farm
from toyfarm import toy_farm

from orchestrator.config.database_url import check_sqlite_timeout
from orchestrator.report import site as site_mod
from orchestrator.store.database import Store

# ------------------------------------------------------------ 1. a huge ?timeout=


@pytest.mark.parametrize("seconds", ["1e307", "1.7e308"])
def test_a_huge_sqlite_timeout_opens_with_sqlites_longest_wait(tmp_path: Path, seconds: str) -> None:
    url = f"sqlite:///{tmp_path / 'results.db'}?timeout={seconds}"
    check_sqlite_timeout(url, "farm.yaml")  # a finite number of seconds: allowed at load
    store = Store(url)  # was OverflowError: cannot convert float infinity to integer
    try:
        with store.engine.connect() as connection:
            waits = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
    finally:
        store.engine.dispose()
    assert waits == 2**31 - 1  # SQLite's longest (about 24.8 days), as for any wait past it
    assert sqlite3.connect(tmp_path / "results.db").execute("SELECT count(*) FROM runs").fetchone() == (0,)


# ------------------------------------------------------------ 2. a reports folder with no file locks


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_site_on_a_filesystem_without_file_locks_still_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--no-report", "--config", str(config), text=False).returncode == 0
    real = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX:
            raise OSError(code, "No locks available")
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    out = tmp_path / "site"
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        index = site_mod.render(store, out, 1)  # was the OSError: every render failed at the lock
    finally:
        store.engine.dispose()
    assert "run 1" in index.read_text()
    site_mod.mark_unrendered(out, 2, "is starting")
    assert "is starting" in (out / "index.html").read_text()
