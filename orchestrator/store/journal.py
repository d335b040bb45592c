"""Every run's records, also appended to a journal beside the database.

The database is the record; the journal is its safety copy. Each run writes
one JSON-lines file, `<results.db>.journal/<run token>.jsonl` (for a server
database: `.farm-journal/` beside farm.yaml), and every record the store is
about to commit (the run, node snapshots, planned cells, attempts, results,
the run's end) is appended and fsync'd first. So when results.db is deleted,
replaced or cannot be written (a full disk), the run stops with exit 5 and
names its journal, and `farm import JOURNAL` rebuilds the run in a database
(the restored one, or a fresh one) from it. Bytes (stdout, logs) are stored
base64-encoded, times as ISO 8601.

Journals of finished runs are pruned after each `farm verify` (`prune`): the
newest `journal_keep` (farm.yaml, default 20) stay, and an older one goes only
when the database holds every record it does.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import StoreError
from orchestrator.store.location import real_sqlite_file
from orchestrator.utc import as_utc

if TYPE_CHECKING:  # database.py imports this module
    from orchestrator.store.database import Store
    from orchestrator.store.recovery import JournaledRun

CLOSED = "closed"  # another farm's start closed the run here (closing.py)
KINDS = ("run", "source", "planned", "snapshot", "attempt", "result", "finish", CLOSED)


def journal_folder(database_url: str, farm_root: Path, configured: str | None = None) -> Path:
    """farm.yaml's `journal` folder (relative to farm.yaml), else beside the database
    file itself (as the run lock: one file, one journal folder, however it is named)."""
    if configured:
        return (farm_root / Path(configured).expanduser()).resolve()
    if (file := real_sqlite_file(database_url)) is not None:
        return file.with_name(file.name + ".journal")
    return farm_root / ".farm-journal"


def journal_mode(database_url: str) -> int:
    """A new journal's permission bits (the umask still applies): it copies the database record
    for record, outputs included, so it gets no more readers than the database: a SQLite file's
    own bits (0644 under umask 022 for the farm's reviewers, 0600 where the operator keeps
    results.db to themselves: its journal was 0644 all the same, a red-team finding), and for a
    server's database, which its login guards and no file mode can ask, its owner's alone."""
    file = real_sqlite_file(database_url)
    if file is None:
        return 0o600
    try:
        return file.stat().st_mode & 0o666
    except OSError:  # not made yet: the store makes it before the run's first record
        return 0o600


def _encode(value: Any) -> Any:
    """What JSON cannot hold, as a tagged object: json's C encoder calls this only
    for such values, so a record is encoded in one pass (no copy of it first)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, datetime):
        return {"$time": value.isoformat()}
    raise TypeError(f"a journal record cannot hold {type(value).__name__}")


# one encoder for every record: json.dumps with options builds a new one per call (issue 11)
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_encode)


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        if set(value) == {"$time"}:
            return datetime.fromisoformat(value["$time"])
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


class Journal:
    """Append-only, one line per record, each flushed to disk before it returns."""

    def __init__(self, folder: Path, token: str, mode: int = 0o600) -> None:
        self.path = folder / f"{token}.jsonl"
        self.mode = mode  # journal_mode: the database's readers, no more
        self._lock = threading.Lock()
        self._handle = None
        self.folder = folder

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        self.write_many([(kind, fields)])

    def write_many(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Several records, flushed to disk together (one fsync)."""
        line = "".join(_ENCODER.encode({"kind": kind, **fields}) + "\n" for kind, fields in records)
        with self._lock:
            try:
                if self._handle is None:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                    fd = os.open(self.path, flags, self.mode)  # the mode applies to a new file only
                    self._handle = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
                self._handle.write(line)
                self._handle.flush()
                os.fsync(self._handle.fileno())
            except OSError as err:
                why = err.strerror or str(err)
                if self.folder.exists() and not self.folder.is_dir():  # was "File exists" (a red-team finding)
                    why = f"{self.folder} is a file, where the journal's folder goes; move it away"
                raise StoreError(f"cannot append to the run's journal {self.path}: {why}") from err

    def close(self) -> None:
        """Closed; a StoreError where what it held back could not be written (its disk full):
        it was a "bug in farm" (a bare OSError) that hid the write's own error."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                try:
                    handle.close()
                except OSError as err:
                    raise StoreError(f"cannot finish the run's journal {self.path}: {err.strerror or err}") from err


def started_at(path: Path) -> datetime | None:
    """When the journal's run started (its first record, in UTC), without reading the rest."""
    records = read(path)
    try:
        kind, fields = next(records, ("", {}))
    finally:
        records.close()
    started = fields.get("started_at") if kind == "run" else None
    if not isinstance(started, datetime):
        return None
    return as_utc(started)


def read(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, fields) of each record, a line at a time (a big run's journal is
    never all in memory); a last line cut short by a crash is skipped, and so is one that only
    other farms' closing marks follow (closing.py: appended after the crash)."""
    try:
        with open(path, encoding="utf-8") as handle:
            cut: tuple[int, json.JSONDecodeError] | None = None  # a line that did not parse: the last one?
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue  # a closing mark's line break, raced by the run's own append (closing.py)
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    record = err
                # only closing marks follow a record a crash cut short: another start's, appended after
                is_mark = isinstance(record, dict) and record.get("kind") == CLOSED
                if cut is not None and not is_mark:
                    raise StoreError(f"{path}: line {cut[0]} is not a journal record ({cut[1]})") from cut[1]
                if isinstance(record, json.JSONDecodeError):
                    cut = (number, record)
                    continue
                kind = record.pop("kind", None) if isinstance(record, dict) else None
                if kind not in KINDS:
                    raise StoreError(f"{path}: line {number} has an unknown kind {kind!r}")
                try:
                    fields = _decode(record)
                except (ValueError, TypeError) as err:  # a $time that is no time, $bytes no base64
                    raise StoreError(f"{path}: line {number} holds a value it cannot have ({err})") from None
                yield kind, fields
    except (OSError, UnicodeDecodeError) as err:
        raise StoreError(f"cannot read the journal {path}: {err}") from err


def _held_by(path: Path, run: JournaledRun) -> bool:
    """Whether the database holds every record of this journal: it reads whole (what
    `farm import` could read), holds its run's finish, and the run has at least
    as many results, attempts, node snapshots and planned cells as it journaled."""
    journaled: Counter[str] = Counter()
    try:
        for kind, fields in read(path):
            journaled[kind] += len(fields.get("cells", ())) if kind == "planned" else 1
    except StoreError:
        return False
    stored = {"result": run.results, "attempt": run.attempts, "snapshot": run.snapshots, "planned": run.planned}
    return journaled["finish"] > 0 and all(journaled[kind] <= count for kind, count in stored.items())


def prune(folder: Path, store: Store, keep: int) -> list[Path]:
    """Delete the journals in `folder` of finished runs beyond the newest `keep`
    (by run id); returns the paths deleted, oldest first.

    A journal may be the only copy of what a failed commit left out, so one goes
    only when its run is in `store` (by its token), finished there (finish_run
    committed its status and exit code), and the database holds every record it
    does (_held_by). Another database's run, a run still going or killed
    (marked aborted at the next start, with no exit code), a commit that
    failed (a full disk), a file that cannot be read: all stay. A file that
    cannot be deleted stays too, for the next run to try again."""
    if keep < 1:
        raise ValueError(f"prune: keep must be at least 1, not {keep}")
    try:
        journals = {path.stem: path for path in folder.glob("*.jsonl") if path.is_file()}
    except OSError:
        return []
    runs = store.journaled_runs(sorted(journals))
    finished = sorted(
        (run for run in runs.values() if run.status != "running" and run.exit_code is not None),
        key=lambda run: run.run_id,
        reverse=True,
    )
    tokens = {run.run_id: token for token, run in runs.items()}
    deleted: list[Path] = []
    for run in reversed(finished[keep:]):  # oldest first
        path = journals[tokens[run.run_id]]
        if not _held_by(path, run):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        deleted.append(path)
    return deleted
