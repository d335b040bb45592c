"""What the farm's two file locks (the run lock, store/lock.py; the render lock,
report/site_lock.py) share: the mode their files are made with, and what a failure to take
one means for the user.

cron's `farm` user made them under umask 022 (0644), and a reviewer of the farm's group running
`farm report` or `farm verify` by hand could not open them for writing, which flock's filelock
needs: a bare "Permission denied" (a red-team finding). They are made group-writable now, and
one that is not names its owner and the fix.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import socket
from pathlib import Path

MODE = 0o664  # the farm's group takes a lock its cron user made; a lock file holds nothing to protect
# flock's errors where the filesystem has no locks (filelock falls back to a soft lock for ENOSYS alone)
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def _name(lookup: object, number: int) -> str:
    try:
        return lookup(number)[0]  # type: ignore[operator] - pwd.getpwuid or grp.getgrgid
    except KeyError:
        return str(number)


def not_writable(path: Path, err: OSError) -> str | None:
    """Where `err` is the lock file `path` existing and not writable by this user: why, with the
    fix (its owner's chmod); else None."""
    if err.errno not in (errno.EACCES, errno.EPERM):
        return None
    try:
        info = path.stat()
    except OSError:
        return None  # no such file: the folder is what cannot be written, said as it is
    owner = f"{_name(pwd.getpwuid, info.st_uid)}:{_name(grp.getgrgid, info.st_gid)}"
    me = _name(pwd.getpwuid, os.geteuid())
    return (
        f"{path} belongs to {owner}, mode {info.st_mode & 0o777:04o}, and this user ({me}) may not write it; "
        f"its owner may `chmod g+w {path}` for the group {_name(grp.getgrgid, info.st_gid)}, "
        "or remove it while no farm runs (farm makes it group-writable)"
    )


def recorded_holder(record: Path) -> tuple[str, bool]:
    """The run lock's last holder as its `.holder` record says, and whether it is a process of this
    host that has ended: an old record's pid had been named as the holder of a lock `flock` held
    (review 208)."""
    try:
        info = json.loads(record.read_text())
        said = f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown", False
    pid = info["pid"]
    if info["host"] != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return said, False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return said, True
    except OSError:  # another user's process (EPERM): alive
        pass
    return said, False


def held_by_another_program(path: Path, holder: str, wait: float) -> str:
    """The exit-6 message where the farm run recorded as the lock's holder has ended."""
    return (
        f"{path} is held, but not by a farm run: the farm run last recorded as its holder ({holder}) has ended, "
        f"and the OS frees the lock of a process that ended, so another program holds it (`flock`, a backup or "
        f"sync tool; `fuser -v {path}` names it); waited {wait:.0f} s"
    )
