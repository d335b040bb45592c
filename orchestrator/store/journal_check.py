"""A journal read back as the farm wrote it, or refused whole, naming the file, the record and
what the farm writes there (`farm import` and the next start's completion of a dead run).

The records hold only what the store journals: never a row's or another row's id (the store fills
`id`, `run_id`, `snapshot_id` itself, and a journal holding one put its verdict in another run, or
failed every start after on the database's constraint: red-team 190), and no result twice.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.errors import StoreError
from orchestrator.outcomes import Outcome
from orchestrator.store import journal
from orchestrator.store.tables import Attempt, MetricValue, NodeSnapshotRow, ResultRow, Run, SourceFile

# a journal's fields the import trusts to be of these types (what Store wrote); any other is refused
_JOURNAL_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "run": {
        "trigger": (str,),
        "farm_version": (str,),
        "host": (str,),
        "config_file": (str,),
        "selection": (str,),
        "started_at": (datetime,),
        "token": (str, type(None)),
        "farm_commit": (str, type(None)),
        "cell_env": (str, type(None)),
    },
    "finish": {"status": (str,), "exit_code": (int, type(None)), "ended_at": (datetime,)},
    "result": {
        "kernel": (str,),
        "variant": (str,),
        "node": (str,),
        "outcome": (str,),
        "cuda_waived": (bool,),  # a journal before 0015 has none (cuda_waiver.journaled)
        "exit_code": (int, type(None)),
        "started_at": (datetime,),
    },
    "source": {"sha256": (str,), "path": (str,), "content": (bytes,)},
}


_INT64 = -(1 << 63)  # SQLite's and PostgreSQL's BIGINT: a number past it was an OverflowError, "a bug in farm"


# keys the store fills itself, never journaled: the rebuild's and completion's rows took the record's
# own over the run's (a result's run_id put its verdict in another run); a run record's end is its finish's
_FILLED = {
    "run": ("id", "status", "exit_code", "ended_at"),
    "result": ("id", "run_id", "snapshot_id", "result_id"),
    "attempt": ("id", "run_id", "result_id"),
    "snapshot": ("id", "run_id"),
    "source": ("first_seen",),
}
_METRIC_FILLED = ("id", "result_id", "run_id", "kernel", "variant", "node", "device")  # its result's


def _columns(table: Any, *own: str) -> frozenset[str]:
    return frozenset({column.name for column in table.__table__.columns} | set(own))


# each record's keys this farm knows: its row's columns and the journal's own (a snapshot's ref, a result's
# snapshot_ref and metrics). A key past them is a newer farm's field: the import dropped it without a word,
# whatever it said of the verdict (a flag a later revision adds, as 0016's farm_writable was), red-team 215
_KNOWN = {
    "run": _columns(Run),
    "result": _columns(ResultRow, "snapshot_ref", "metrics"),
    "snapshot": _columns(NodeSnapshotRow, "ref"),
    "attempt": _columns(Attempt),
    "source": _columns(SourceFile),
    "planned": frozenset({"cells"}),
    "finish": frozenset({"status", "exit_code", "ended_at"}),
}
_METRIC_KNOWN = _columns(MetricValue)


def _unknown(kind: str, fields: dict[str, Any]) -> str | None:
    """A key of the record (or of its metrics) this farm never writes, else None."""
    known = _KNOWN.get(kind)
    if known is None:  # a kind this farm does not read into rows (closing.py's mark)
        return None
    if key := next((k for k in fields if k not in known), None):
        return key
    metrics = fields.get("metrics", []) if kind == "result" and isinstance(fields.get("metrics"), list) else []
    return next((f"metrics' {k}" for m in metrics if isinstance(m, dict) for k in m if k not in _METRIC_KNOWN), None)


def _filled(kind: str, fields: dict[str, Any]) -> str | None:
    """What of a record the store fills itself (the record's own key named), else None."""
    if key := next((k for k in _FILLED.get(kind, ()) if k in fields), None):
        return key
    metrics = fields.get("metrics", []) if kind == "result" else []
    if not isinstance(metrics, list) or not all(isinstance(m, dict) for m in metrics):
        return "metrics (a list of metric objects)"
    found = {k for m in metrics for k in _METRIC_FILLED if k in m}
    return f"metrics' {', '.join(sorted(found))}" if found else None


def _same_result(fields: dict[str, Any]) -> tuple[Any, ...]:
    """A result's cell and start (to the microsecond): two records alike are one result journaled twice."""
    return tuple(fields.get(k) for k in ("kernel", "variant", "node", "device", "started_at"))


def _cells(cells: Any) -> bool:
    """A planned record's cells as Store writes them: [kernel, variant, node, device] strings."""
    return isinstance(cells, list) and all(
        isinstance(c, list) and len(c) == 4 and all(isinstance(x, str) for x in c) for c in cells
    )


def _unplanned(path: Path, records: list[tuple[str, dict[str, Any]]]) -> None:
    """StoreError naming the first result of a cell its run never planned: the farm stores a result
    only of a cell its run planned (for the node, or per card), so one that is not is a record added
    by hand or spliced from another run's journal; imported, it was a pass on the matrix of a cell
    never scheduled (red-team 239). Planned anywhere in the journal: a card's plan may come late. A
    journal with no plan at all (a run stored without one, as the store's callers may) is not judged."""
    planned = {tuple(cell) for kind, fields in records if kind == "planned" for cell in fields["cells"]}
    if not any(kind == "planned" for kind, _fields in records):
        return
    for number, (kind, fields) in enumerate(records, 1):
        if kind != "result":
            continue
        kernel, variant, node, device = (fields.get(k) or "" for k in ("kernel", "variant", "node", "device"))
        if (kernel, variant, node, "") not in planned and (kernel, variant, node, device) not in planned:
            on = f" ({device})" if device else ""
            raise StoreError(
                f"{path}: record {number} (result): cell {kernel}:{variant} on {node}{on}, which its run never "
                "planned; the farm journals results of its run's planned cells only: a record added or from "
                "another run's journal. Nothing was imported"
            )


def _check_journal(path: Path, records: list[tuple[str, dict[str, Any]]]) -> None:
    """A journal is read back as the farm wrote it, or refused whole (nothing imported):
    the types of the fields that name and judge a run, one run and at most one finish,
    known outcomes, each source's bytes hashing to its sha256, no key the store fills
    itself (_FILLED), and no result twice."""
    counts = {"run": 0, "finish": 0}
    results: dict[tuple[Any, ...], int] = {}
    for number, (kind, fields) in enumerate(records, 1):
        counts[kind] = counts.get(kind, 0) + 1
        if filled := _filled(kind, fields):
            raise StoreError(
                f"{path}: record {number} ({kind}): {filled}, which the farm never journals (the database "
                "fills it): a record edited or from elsewhere"
            )
        if unknown := _unknown(kind, fields):
            version = records[0][1].get("farm_version") if records and records[0][0] == "run" else None
            raise StoreError(
                f"{path}: record {number} ({kind}): {unknown}, a field this farm does not know: a newer farm "
                f"wrote it (farm_version {version!r}), or it was edited, and this one would drop what it says. Nothing "
                "was imported: import it with a farm as new as the one that wrote it"
            )
        if kind == "result" and (first := results.setdefault(_same_result(fields), number)) != number:
            raise StoreError(
                f"{path}: record {number} (result) repeats record {first} (the same cell and start): one result "
                "journaled once; the journal copied into itself? remove the repeat"
            )
        for key, types in _JOURNAL_TYPES.get(kind, {}).items():
            value = fields.get(key)
            # a bool is an int to isinstance: where a number is owed, true or false is refused
            if key in fields and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                found = f"{key} is {fields[key]!r}"
                raise StoreError(f"{path}: record {number} ({kind}): {found}, not what the farm writes")
        if big := next((v for v in fields.values() if isinstance(v, int) and not _INT64 <= v < -_INT64), None):
            raise StoreError(f"{path}: record {number} ({kind}): the number {big}, past the 64 bits the farm writes")
        if kind == "planned" and not _cells(fields.get("cells")):
            found = repr(fields.get("cells"))[:80]
            raise StoreError(
                f"{path}: record {number} (planned): cells {found}, not [kernel, variant, node, device] lists"
            )
        if kind == "result" and fields.get("outcome") not in {o.value for o in Outcome}:
            raise StoreError(f"{path}: record {number} (result): outcome {fields.get('outcome')!r} is no outcome")
        if kind == "finish" and fields.get("status") not in ("finished", "aborted"):
            raise StoreError(f"{path}: record {number} (finish): status {fields.get('status')!r}")
        if kind == "source" and hashlib.sha256(fields.get("content", b"")).hexdigest() != fields.get("sha256"):
            raise StoreError(f"{path}: record {number} (source): its bytes do not hash to its sha256")
    if counts["run"] != 1 or counts["finish"] > 1:
        raise StoreError(f"{path}: {counts['run']} run and {counts['finish']} finish records (one run, one finish)")
    _unplanned(path, records)


def read_journal(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """A journal's records, as the farm wrote them, or StoreError saying what is wrong. `farm
    import` reads every journal it is given first: a damaged second one was refused after the
    first was stored, and a file that is no journal after an older database was upgraded."""
    records = list(journal.read(path))
    if not records or records[0][0] != "run":
        raise StoreError(f"{path}: not a farm journal (its first record is not a run)")
    _check_journal(path, records)
    return records
