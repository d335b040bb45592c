"""Review round 86: the merged rounds 83-85 (the site's render lock and record, a killed run's
not-run cells on their probed card, a run whose start could not be stored, the SQLite URL's
`?timeout=`, a failed inspect's stderr in its reason, waiting for closed SSH transports).

1. A SQLite URL's `?timeout=` passed its check at load for any finite number of seconds, and the
   engine turned it into milliseconds: `?timeout=1e307` (finite, its milliseconds not) was an
   OverflowError traceback at every open of the database, no key named.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.config.database_url import check_sqlite_timeout
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
