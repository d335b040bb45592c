"""Store's writes of a run's records (database.py): the run, its planned cells and sources, each
node's attempts and snapshot, each cell's result, the run's end. Every one goes to the run's
journal first, then to the database in one transaction, committed at once.

Each write of the run this store began reads, in its transaction, that the run still runs
(Store._still_open, Store._ended: another farm's start may have closed it, review 188).

It writes through Store's own: _writing / _writing_rows (one transaction, the file checked), _add,
_journal / _journal_many, the journal, not_begun (recovery.py) and _binary_written (binaries.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Select, func, select

from orchestrator.errors import StoreError
from orchestrator.store.binaries import RunBinaries
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord
from orchestrator.store.result_rows import (
    INSERT_PLANNED,
    SNAPSHOTS,
    insert_node,
    insert_result,
    newest_snapshot,
    stored,
)
from orchestrator.store.tables import (
    SEED_DATABASE_ID,
    Attempt,
    NodeSnapshotRow,
    PlannedCell,
    ResultRow,
    Run,
    SourceFile,
)


class Recording:
    """Store's writes (database.py); what it reads back is queries.py's and the other mixins'."""

    def begin_run(
        self,
        planned: Sequence[tuple[str, str, str, str]] = (),
        sources: Sequence[tuple[str, str, bytes]] = (),
        **fields: Any,
    ) -> int:
        """A new run (its columns, `fields`), with the cells it plans (as add_planned) and
        its sources' files ((sha256, path, content), as add_source), in one journal
        write and one transaction: three commits and syncs were on every run's start."""
        started = datetime.now(UTC)
        records: list[tuple[str, dict[str, Any]]] = [("run", {"started_at": started, **fields})]
        if planned:
            records.append(("planned", {"cells": [list(cell) for cell in planned]}))
        records += [("source", {"sha256": sha, "path": path, "content": content}) for sha, path, content in sources]
        if self.journal is not None:
            self.journal.write_many(records)
        run_fields = {"started_at": started, "status": "running", **fields}

        def write() -> int:
            with self._writing_rows() as connection:
                connection.execute(SEED_DATABASE_ID, {"id": uuid.uuid4().hex})  # with its first run: database_identity
                run_id = connection.execute(
                    Run.__table__.insert(), stored(Run.__table__, run_fields)
                ).inserted_primary_key[0]
                rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in planned]
                if rows:
                    connection.execute(INSERT_PLANNED, [stored(PlannedCell.__table__, row) for row in rows])
                new = {sha: (path, content) for sha, path, content in sources}
                if new:
                    have = connection.scalars(select(SourceFile.sha256).where(SourceFile.sha256.in_(list(new))))
                    for sha in list(have):
                        del new[sha]
                if new:
                    kept = [
                        {"sha256": sha, "path": path, "content": content, "first_seen": started}
                        for sha, (path, content) in new.items()
                    ]
                    connection.execute(SourceFile.__table__.insert(), [stored(SourceFile.__table__, r) for r in kept])
            return run_id

        # its planned cells and sources are in the run's own transaction: the run found, they are too
        token = Run.token == fields["token"] if fields.get("token") is not None else Run.token.is_(None)
        mine = (Run.started_at == started, token)
        try:
            run_id = self._retrying(write, self._landed(lambda: select(Run.id).where(*mine)))
        except StoreError as err:
            raise self.not_begun(err, fields.get("token")) from err
        self._run = (run_id, "running")
        self._binaries = RunBinaries(node for _, _, node, _ in planned)
        return run_id

    def finish_run(self, run_id: int, status: str, exit_code: int) -> None:
        """How the run ended, journal first; where the journal cannot take it (its disk
        full), the database is still told, and then the journal's error raised: a run
        left "running" reads as one whose farm died."""
        unjournaled: StoreError | None = None
        try:
            self._journal("finish", {"status": status, "exit_code": exit_code, "ended_at": datetime.now(UTC)})
        except StoreError as err:
            unjournaled = err
        # the code the process returns: the journal's error's, where it could not take the end
        code = exit_code if unjournaled is None else max(exit_code, unjournaled.exit_code)
        ended = datetime.now(UTC)

        def write() -> bool:
            with self._writing_rows() as connection:
                self._ended(connection, run_id, {"status": status, "exit_code": code, "ended_at": ended})
            return True

        mine = (Run.id == run_id, Run.status == status, Run.exit_code == code, Run.ended_at == ended)
        self._retrying(write, self._landed(lambda: select(Run.id).where(*mine)))
        self._run = (run_id, status)  # its own end, never another farm's write (lock._written_meanwhile)
        if unjournaled is not None:
            raise unjournaled

    def add_snapshot(self, record: SnapshotRecord) -> int:
        ref = self._new_ref()
        fields = record.columns()
        self._journal("snapshot", {"ref": ref, **{k: v for k, v in fields.items() if k != "run_id"}})
        newer = _NewerSnapshot(fields)

        def write() -> int:
            with self._writing_rows() as connection:
                newer.floor = newer.read(connection)
                row = stored(NodeSnapshotRow.__table__, fields)
                added = connection.execute(NodeSnapshotRow.__table__.insert(), row).inserted_primary_key[0]
                self._still_open(connection, fields["run_id"])
                return added

        snapshot_id = self._retrying(write, self._landed_after(newer))
        self._snapshot_refs[snapshot_id] = ref
        return snapshot_id

    def add_result(
        self,
        record: ResultRecord,
        attempts: Sequence[AttemptRecord] = (),
        metrics: Sequence[dict[str, Any]] = (),
    ) -> int:
        """A cell's result, its metric values (metrics.Measured.record) and the
        attempts that led to it, in one transaction (and one journal write)."""
        ref = self._snapshot_refs.get(record.snapshot_id or 0)
        at = datetime.now(UTC)
        fields = record.columns()
        tries = [{"at": at, **a.columns()} for a in attempts]
        kept = {k: v for k, v in fields.items() if k not in ("run_id", "snapshot_id")}
        records: list[tuple[str, dict[str, Any]]] = [
            ("result", {"snapshot_ref": ref, **kept, **({"metrics": list(metrics)} if metrics else {})})
        ]
        records += [("attempt", {k: v for k, v in a.items() if k != "run_id"}) for a in tries]
        if self.journal is not None:
            self.journal.write_many(records)

        def write() -> int:
            with self._writing_rows() as connection:
                result_id = insert_result(connection, fields, metrics, tries)
                self._still_open(connection, fields["run_id"])  # another farm's start closed it meanwhile?
                return result_id

        # its cell and its start to the microsecond: the row of this try's commit, if it landed
        cell = ("run_id", "started_at", "kernel", "variant", "node", "device")
        mine = _key(ResultRow, {"device": "", **fields}, cell)
        result_id = self._retrying(write, self._landed(lambda: select(ResultRow.id).where(*mine())))
        # once committed: a result the database refused vouched for no cached build (binaries.py)
        self._binary_written(fields)
        return result_id

    def add_planned(self, run_id: int, cells: list[tuple[str, str, str, str]]) -> None:
        """(kernel, variant, node, device) of cells a run sets out to do; a node's
        cells are planned again per card model once its probe found several."""
        self._journal("planned", {"cells": [list(cell) for cell in cells]})
        if not cells:
            return
        rows = [{"run_id": run_id, "kernel": k, "variant": v, "node": n, "device": d} for k, v, n, d in cells]

        def write() -> bool:
            with self._writing_rows() as connection:  # one executemany: the ORM's objects cost 1.4 ms a cell (profiled)
                connection.execute(INSERT_PLANNED, [stored(PlannedCell.__table__, row) for row in rows])
                self._still_open(connection, run_id)
            return True

        # a cell is planned once a run (again per card model: another device); all in one transaction
        first = _key(PlannedCell, rows[0], tuple(rows[0]))
        self._retrying(write, self._landed(lambda: select(PlannedCell.id).where(*first()).limit(1)))

    def add_node_records(self, attempt: AttemptRecord, snapshot: SnapshotRecord) -> int:
        """A node's attempt that succeeded and its snapshot (add_attempt, then add_snapshot),
        in one journal write and one transaction: two commits and syncs per node were one."""
        at = datetime.now(UTC)
        tried, fields = {"at": at, **attempt.columns()}, snapshot.columns()
        ref = self._new_ref()
        self._journal_many(("attempt", tried), ("snapshot", {"ref": ref, **fields}))

        newer = _NewerSnapshot(fields)

        def write() -> int:
            with self._writing_rows() as connection:
                newer.floor = newer.read(connection)
                snapshot_id = insert_node(connection, tried, fields)
                self._still_open(connection, fields["run_id"])
                return snapshot_id

        attempt = _attempt_key(tried)
        landed_attempt = self._landed(lambda: select(Attempt.id).where(*attempt()))
        landed_snapshot = self._landed_after(newer)
        # the attempt and its snapshot in one transaction: the attempt found, the node's snapshot is this one
        snapshot_id = self._retrying(write, lambda: landed_snapshot() if landed_attempt() is not None else None)
        self._snapshot_refs[snapshot_id] = ref
        return snapshot_id

    def _new_ref(self) -> int:
        with self._refs_lock:
            return next(self._refs)

    def add_attempt(self, record: AttemptRecord) -> None:
        at = datetime.now(UTC)
        fields = record.columns()
        self._journal("attempt", {"at": at, **{k: v for k, v in fields.items() if k != "run_id"}})
        tried = {"at": at, **fields}
        attempt = _attempt_key(tried)
        self._retrying(lambda: self._add(Attempt, tried), self._landed(lambda: select(Attempt.id).where(*attempt())))

    def add_source(self, sha256: str, path: str, content: bytes) -> None:
        self._journal("source", {"sha256": sha256, "path": path, "content": content})

        def write() -> bool:  # looks before it adds: tried again, it is its own landed check
            with self._writing() as session:
                if session.get(SourceFile, sha256) is None:
                    session.add(SourceFile(sha256=sha256, path=path, content=content, first_seen=datetime.now(UTC)))
                    session.commit()
            return True

        self._retrying(write, lambda: None)

    def _landed_after(self, newer: _NewerSnapshot) -> Callable[[], int | None]:
        """The snapshot a failed try committed after all: one newer than its transaction read."""

        def find() -> int | None:
            if newer.floor is None:
                return None
            after = newer.newest().where(SNAPSHOTS.c.id > newer.floor)
            return self._landed(lambda: after)()

        return find

    def _landed(self, query: Callable[[], Select[Any]]) -> Callable[[], Any]:
        """The first value `query()` reads, on a session of its own (None: the failed try left nothing).
        The query is built only when a try failed: built per record, it was a third of a result's
        store write (profiled, session 42)."""

        def find() -> Any:
            with self._guard("writing"), self.session() as session:
                return session.execute(query()).scalar()

        return find


class _NewerSnapshot:
    """A node's snapshot of a try, told from the node's earlier ones of the run (the lost-cells path
    of scheduler.py stores one per missing cell): newer than the newest the try read in its own
    transaction. The node's newest snapshot, taken as the cut try's, was an earlier one (review 182)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        # as the insert stores them (result_rows.stored: a node's name past its column cut), as _key has it
        self.key = stored(SNAPSHOTS, {"run_id": fields["run_id"], "node": fields["node"]})
        self.floor: int | None = None  # None: no try got as far as its insert

    def read(self, connection: Connection) -> int:
        """The newest in the try's transaction (0: none), on a statement prepared once per database
        (inserts.py): built and run by Core for each node, it was a fifth of its records' write."""
        return newest_snapshot(connection, self.key["run_id"], self.key["node"]) or 0

    def newest(self) -> Select[Any]:
        """The same read as a query of its own (_landed_after: only once a try failed)."""
        run_id, node = SNAPSHOTS.c.run_id == self.key["run_id"], SNAPSHOTS.c.node == self.key["node"]
        return select(func.max(SNAPSHOTS.c.id)).where(run_id, node)


def _attempt_key(tried: dict[str, Any]) -> Callable[[], list[Any]]:
    """An attempt's row, by its node, cell, number and time (to the microsecond)."""
    return _key(Attempt, tried, ("run_id", "node", "kernel", "variant", "attempt", "at"))


def _key(model: type[Any], fields: dict[str, Any], keys: tuple[str, ...]) -> Callable[[], list[Any]]:
    """Where `model`'s row has these `fields` as the insert stored them (result_rows.stored: a
    string past its column cut, NUL replaced): compared as given, a node's 300-character card name
    never found its landed row, and the retry stored the cell twice (review 178)."""
    values = {k: fields.get(k) for k in keys}  # as they are now, whenever the clause is built

    def where() -> list[Any]:
        table, kept = model.__table__, stored(model.__table__, values)
        return [table.c[k] == kept[k] if kept[k] is not None else table.c[k].is_(None) for k in keys]

    return where
