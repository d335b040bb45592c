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
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.errors import StoreError

KINDS = ("run", "source", "planned", "snapshot", "attempt", "result", "finish")


def journal_folder(database_url: str, farm_root: Path, configured: str | None = None) -> Path:
    """farm.yaml's `journal` folder (relative to farm.yaml), else beside the database."""
    if configured:
        return (farm_root / Path(configured).expanduser()).resolve()
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and database_url != prefix + ":memory:":
        return Path(database_url[len(prefix) :] + ".journal")
    return farm_root / ".farm-journal"


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, datetime):
        return {"$time": value.isoformat()}
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    return value


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

    def __init__(self, folder: Path, token: str) -> None:
        self.path = folder / f"{token}.jsonl"
        self._lock = threading.Lock()
        self._handle = None
        self.folder = folder

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        self.write_many([(kind, fields)])

    def write_many(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Several records, flushed to disk together (one fsync)."""
        line = "".join(
            json.dumps({"kind": kind, **_encode(fields)}, separators=(",", ":")) + "\n" for kind, fields in records
        )
        with self._lock:
            try:
                if self._handle is None:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
                self._handle.write(line)
                self._handle.flush()
                os.fsync(self._handle.fileno())
            except OSError as err:
                raise StoreError(f"cannot append to the run's journal {self.path}: {err.strerror or err}") from err

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None


def read(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, fields) of each record; a last line cut short by a crash is skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise StoreError(f"cannot read the journal {path}: {err}") from err
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):
                return  # the write the crash interrupted
            raise StoreError(f"{path}: line {number} is not a journal record ({err})") from err
        kind = record.pop("kind", None)
        if kind not in KINDS:
            raise StoreError(f"{path}: line {number} has an unknown kind {kind!r}")
        yield kind, _decode(record)
