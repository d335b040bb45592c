"""One render at a time per site folder.

`farm report` beside `farm verify`'s render (or two reports) wrote one folder at once: the render
that read the database first could write its index last, a finished run shown as running over
the newer render's (a red-team finding), and its `.farm-site` record over the other's. A render,
and every index.html that says "no report" (site.mark_unrendered), holds a lock in the folder
(LOCK_FILE, taken with filelock: the OS releases it when the process dies), and reads the
database only once it holds it: the render that writes last read last.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from orchestrator.errors import LockError

LOCK_FILE = ".farm-render.lock"
WAIT = 900.0  # seconds a render waits for another to finish (a cold render of a big site takes minutes)
_LOCKS: dict[str, FileLock] = {}  # folder -> its lock: one object per folder, so a thread may take it again
_GUARD = threading.Lock()


def _lock(out_dir: Path) -> FileLock:
    folder = os.path.realpath(out_dir)
    with _GUARD:
        if folder not in _LOCKS:
            # thread-local (filelock's default): another thread of this process waits as another process does
            _LOCKS[folder] = FileLock(os.path.join(folder, LOCK_FILE))
        return _LOCKS[folder]


@contextmanager
def rendering(out_dir: Path, wait: float = WAIT) -> Iterator[None]:
    """Holds `out_dir`'s render lock (taken again by the thread holding it: at once). LockError
    after `wait` seconds, naming the lock; OSError where it cannot be made (a read-only folder:
    its pages could not be written either)."""
    lock = _lock(out_dir)
    try:
        lock.acquire(timeout=wait)
    except Timeout:
        raise LockError(
            f"another render of {out_dir} holds {lock.lock_file}; waited {wait:.0f} s. Let it finish, "
            "then run `farm report` again"
        ) from None
    try:
        yield
    finally:
        lock.release()
