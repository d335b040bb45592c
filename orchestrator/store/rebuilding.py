"""A run rebuilt from its journal in a database that lacks it (`farm import`: a fresh database, one
rebuilt after a lost disk, or a run whose begin never committed).

A journal may hold another farm's closing mark (closing.py): that start closed the run in its own
database and killed what the run had on the nodes. What the run journaled after the mark is no
verdict (a killed kernel's crash, a finish the closed run wrote regardless): a rebuild that took it
made that crash a cell's verdict and the run finished (a review finding, 142). After the mark the
cells are not-run and the run is aborted, as the database that closed it holds it.

Nor is what a run journaled after its own end (a worker's result after the run stopped, exit 5:
its commit refused, the run no longer open). The next start's completion turned it away (review
186), but a rebuild of the same journal stored it, a verdict no run stood by (red-team 239).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from orchestrator.outcomes import CLOSED_BEFORE, FROM_JOURNAL
from orchestrator.store.closing import closed_at, journaled_end
from orchestrator.store.not_run_rows import never_finished, not_run_row, probed_cards
from orchestrator.store.older_journals import as_stored, transports
from orchestrator.store.result_rows import (
    ATTEMPT_NULLABLE,
    ATTEMPTS,
    INSERT_SNAPSHOT,
    RESULTS,
    fit,
    insert_result,
    stored,
)
from orchestrator.store.tables import SEED_DATABASE_ID, PlannedCell, Run, SourceFile

Cell = tuple[str, str, str, str]  # kernel, variant, node, device
PLANNED_KEYS = ("run_id", "kernel", "variant", "node", "device")  # a planned cell's columns


class Imported(NamedTuple):
    """What `farm import` stored of one journal."""

    run_id: int
    status: str
    results: int
    note: str = ""  # what the import's line says besides: how results were told from after a close


def rebuild_run(session: Session, records: list[tuple[str, dict[str, Any]]]) -> Imported:
    """Store the journal's run as a new run of this database, its results up to any closing
    mark; the caller has checked the run is not here and may come after the newest."""
    mark = closed_at(records)
    end = journaled_end(records)  # after a closing mark, the close ended it, not its farm
    # the run's own end, before any mark: what comes after it is no verdict of the run (red-team 239)
    finish = next((i for i, (kind, _fields) in enumerate(records) if kind == "finish"), None)
    own_end = finish if finish is not None and (mark is None or finish < mark) else None
    run_fields = stored(Run.__table__, dict(records[0][1]))  # as begin_run stored it (result_rows.fit)
    planned_table = PlannedCell.__table__  # its rows: fit, as begin_run's
    run = Run(
        status=end["status"] if end else "aborted",
        exit_code=end["exit_code"] if end else None,
        ended_at=end["ended_at"] if end else run_fields["started_at"],
        **run_fields,
    )
    session.add(run)
    session.execute(SEED_DATABASE_ID, {"id": uuid.uuid4().hex})  # a database rebuilt is one of its own
    session.flush()
    connection = session.connection()  # the rows a run writes many of, as Store writes them
    snapshots: dict[int, int] = {}
    transport = transports(records)  # an older farm's journal: flags as its migrations fill them (older_journals.py)
    results = 0
    done: set[Cell] = set()
    late: set[Cell] = set()  # journaled after another farm's start closed the run
    after_end: set[Cell] = set()  # journaled after the run's own end
    taking = True  # an attempt belongs to the result journaled before it
    planned: list[PlannedCell] = []
    for index, (kind, fields) in enumerate(records[1:], start=1):
        if kind == "snapshot":
            ref = fields.pop("ref")
            inserted = connection.execute(INSERT_SNAPSHOT, stored(INSERT_SNAPSHOT.table, {"run_id": run.id, **fields}))
            snapshots[ref] = inserted.inserted_primary_key[0]
        elif kind == "result":
            kept = fit(RESULTS, fields)  # the cell as stored, to match its planned one's
            cell = (kept["kernel"], kept["variant"], kept["node"], kept.get("device", ""))
            taking = (mark is None or index < mark) and (own_end is None or index < own_end)
            if not taking:
                (late if own_end is None else after_end).add(cell)
                continue
            ref = fields.pop("snapshot_ref")
            metrics = fields.pop("metrics", [])
            row = {"run_id": run.id, "snapshot_id": snapshots.get(ref), **as_stored(fields, transport.get(ref))}
            insert_result(connection, row, metrics, ())
            done.add(cell)
            results += 1
        elif kind == "attempt" and taking:
            attempt = {**ATTEMPT_NULLABLE, "run_id": run.id, **fields}
            connection.execute(ATTEMPTS.insert(), stored(ATTEMPTS, attempt))
        elif kind == "planned":
            cells = [
                PlannedCell(**stored(planned_table, dict(zip(PLANNED_KEYS, [run.id, *cell], strict=True))))
                for cell in fields["cells"]
            ]
            session.add_all(cells)
            planned += cells
        elif kind == "source" and session.get(SourceFile, fields["sha256"]) is None:
            session.add(SourceFile(first_seen=run.started_at, **fields))
    # what the run planned but never finished: not-run, as abort_unfinished_runs records it
    session.flush()
    cards = probed_cards(session, run.id)
    missing = never_finished(planned, done)
    for cell in missing:
        before = CLOSED_BEFORE if mark is not None and own_end is None else "the run stopped before this cell finished"
        session.add(not_run_row(run.id, cell, run.ended_at, f"{before} {FROM_JOURNAL}", cards))
    if missing and run.status == "finished":  # a journaled "finished" with a cell unstored (a record lost,
        run.status = "aborted"  # edited): not-run rows under a finished run read complete, exit 0 (red-team 190)
    session.commit()
    note = f"; {len(late)} results journaled after another farm's start closed the run not taken" if late else ""
    note += f"; {len(after_end)} results journaled after the run's own end not taken" if after_end else ""
    return Imported(run.id, run.status, results, note)
