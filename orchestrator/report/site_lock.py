"""One render at a time per site folder.

`farm report` beside `farm verify`'s render (or two reports) wrote one folder at once: the render
that read the database first could write its index last, a finished run shown as running over
the newer render's (a red-team finding), and its `.farm-site` record over the other's. A render,
and every index.html that says "no report" (site.mark_unrendered), holds a lock in the folder
(LOCK_FILE, taken with filelock: the OS releases it when the process dies), and reads the
database only once it holds it: the render that writes last read last. A folder whose filesystem
has no file locks (NFS without its lock daemon, GlusterFS, some FUSE mounts) is rendered unlocked,
as before the lock: every render there failed at it (a review finding). Its file is made
group-writable, and one another user made that this one may not write is a LockError naming its
owner and the fix (lock_files.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from orchestrator.errors import LockError
from orchestrator.report.pagewriter import make_folders
from orchestrator.store.lock_files import MODE, NO_LOCKS, not_writable

LOCK_FILE = ".farm-render.lock"
WAIT = 900.0  # seconds a render waits for another to finish (a cold render of a big site takes minutes)
_LOCKS: dict[str, FileLock] = {}  # folder -> its lock: one object per folder, so a thread may take it again
_GUARD = threading.Lock()


def _lock(out_dir: Path) -> FileLock:
    folder = os.path.realpath(out_dir)
    with _GUARD:
        if folder not in _LOCKS:
            # thread-local (filelock's default): another thread of this process waits as another process does
            _LOCKS[folder] = FileLock(os.path.join(folder, LOCK_FILE), mode=MODE)
        return _LOCKS[folder]


@contextmanager
def rendering(out_dir: Path, wait: float = WAIT) -> Iterator[None]:
    """Holds `out_dir`'s render lock (taken again by the thread holding it: at once). LockError
    after `wait` seconds, naming the lock; OSError where it cannot be made (a read-only folder:
    its pages could not be written either); none at all where its filesystem has no locks."""
    lock = _lock(out_dir)
    try:
        make_folders(str(out_dir))  # before filelock makes it, under the umask: the report is published
        lock.acquire(timeout=wait)
        locked = True
    except Timeout:
        raise LockError(
            f"another render of {out_dir} holds {lock.lock_file}; waited {wait:.0f} s. Let it finish, "
            "then run `farm report` again"
        ) from None
    except NotImplementedError:  # filelock 3's word for a filesystem without flock (ENOSYS)
        locked = False
    except OSError as err:
        if (why := not_writable(Path(lock.lock_file), err)) is not None:  # cron's, and this is a reviewer
            raise LockError(f"cannot take the render lock: {why}") from err
        if err.errno not in NO_LOCKS:
            raise
        locked = False  # no lock to be had on this filesystem: rendered as before the lock
    try:
        yield
    finally:
        if locked:
            lock.release()
