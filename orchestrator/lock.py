"""One farm run at a time per results database.

Two `farm verify` runs writing one database would race (and a cron run
overlapping a hand run is the usual way it happens). The lock is a file beside
the SQLite database (or, for a server database, in the farm's folder, named by
the URL), taken with filelock: the OS releases it when the process dies, even
by SIGKILL, so a crashed run never leaves a stale lock behind. A second run
waits up to --wait seconds, then exits with a message naming the holder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import LockError


def lock_path(database_url: str, farm_root: Path) -> Path:
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and database_url != prefix + ":memory:":
        return Path(database_url[len(prefix) :] + ".lock")
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return farm_root / f".farm-{digest}.lock"


class RunLock:
    def __init__(self, path: Path, wait: float = 0.0) -> None:
        self.path = path
        self.wait = wait
        self._lock = FileLock(str(path))
        self._info = path.with_name(path.name + ".holder")

    def __enter__(self) -> RunLock:
        try:
            self._lock.acquire(timeout=self.wait)
        except Timeout:
            raise LockError(
                f"another farm run holds {self.path} ({self._holder()}); waited {self.wait:.0f} s. "
                "Let it finish, or pass --wait SECONDS to queue behind it."
            ) from None
        except OSError as err:  # a directory in its place, a read-only or missing folder (Timeout is one too)
            raise LockError(f"cannot take the run lock {self.path}: {err.strerror or err}") from err
        with contextlib.suppress(OSError):  # who holds it is a courtesy for the next run's message
            self._info.write_text(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "since": datetime.now(UTC).isoformat(timespec="seconds"),
                    }
                )
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def _holder(self) -> str:
        try:
            info = json.loads(self._info.read_text())
            return f"pid {info['pid']} on {info['host']} since {info['since']}"
        except (OSError, ValueError, KeyError):
            return "holder unknown"
