"""Can this process write the farm's SQLite files? Asked before a run takes its lock.

cron or a systemd unit run as another user than the one who made results.db (or a
night run with umask 077 before it) failed deep inside: "unable to open database
file" with no cause, or "attempt to write a readonly database" after the run's
journal was begun, which then told the operator to `farm import` a journal of a run
never stored, into a database it could not write either (a red-team finding).
"""

from __future__ import annotations

import errno
import os
import pwd
from pathlib import Path

from orchestrator.store.location import real_sqlite_file


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # a uid with no name on this machine (a restored backup, a container's)
        return f"uid {uid}"


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _refused(path: Path) -> bool:
    """Opened read-write (never created, never truncated) and closed: the kernel's own answer,
    capabilities and ACLs included, where os.access would guess from the real uid."""
    try:
        os.close(os.open(path, os.O_RDWR))
    except PermissionError:
        return True
    except OSError as err:  # gone meanwhile, a folder in its place: the store's open says what it is
        return err.errno == errno.EROFS  # but a read-only mount, which root's open meets too, is refused
    return False


def write_problem(database_url: str, journal_folder: Path) -> str | None:
    """Why this process cannot run the farm on its SQLite database (None: it can, or it is
    no SQLite file): a file beside it or a folder it writes in that it may not write."""
    file = real_sqlite_file(database_url)
    if file is None:
        return None
    # results.db, SQLite's -wal and -shm, the run lock and who holds it: each opened read-write
    files = [file.with_name(file.name + end) for end in ("", "-wal", "-shm", ".lock", ".lock.holder")]
    refused = [path for path in files if path.exists() and _refused(path)]
    # SQLite makes -wal/-shm beside the file, the run its journal: each folder written in
    folders = [file.parent, journal_folder if journal_folder.is_dir() else journal_folder.parent]
    refused += [folder for folder in folders if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK)]
    if not refused:
        return None
    path = refused[0]
    if _read_only_mount(path):  # no owner or mode makes it writable: chown and chmod fail there too (red-team 190)
        return (
            f"{path} is on a read-only file system (mounted read-only, or remounted so after a disk error). "
            "Nothing was started or written: remount it read-write, or point farm.yaml's `database` (and "
            "`journal`) at a writable disk"
        )
    found = path.stat()
    me = _user(os.geteuid())
    name = me.split(" ")[0] if not me.startswith("uid ") else str(os.geteuid())  # chown takes either
    more = f" (and {len(refused) - 1} more such)" if len(refused) > 1 else ""
    return (
        f"{path} cannot be read and written by this process, {me}: it belongs to {_user(found.st_uid)}, "
        f"mode {found.st_mode & 0o7777:04o}{more}. Nothing was started or written: run the farm as the user "
        "who owns its files (that user's crontab, the unit's User=), or give them to this one: "
        f"chown -R {name} {file}* {journal_folder}; chmod -R u+rwX {file}* {journal_folder} "
        "(and mind the umask of whatever made them)"
    )
