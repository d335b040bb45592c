"""Runs that did not end well: aborted at the next start, rebuilt from their journals."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.errors import EXIT_STORE, StoreError
from orchestrator.outcomes import FOUND_AT_NEXT_START
from orchestrator.store.closing import mark_closed
from orchestrator.store.completing import complete_run
from orchestrator.store.engine import first_line
from orchestrator.store.journal_check import read_journal
from orchestrator.store.not_run_rows import never_finished, not_run_row, probed_cards, unfinished
from orchestrator.store.queries import BISECT_TRIGGER, CHUNK
from orchestrator.store.rebuilding import Imported, rebuild_run
from orchestrator.store.run_order import check_after_newest
from orchestrator.store.tables import (
    Attempt,
    NodeSnapshotRow,
    PlannedCell,
    ResultRow,
    Run,
)


class Aborted(NamedTuple):
    """A run the next start found running: its not-run cells, the results its journal held that
    the database lacked (added), the exit code its journal said it ended with (None: its farm
    died before it could say), and why its journal could not be read ("" where it could or has none)."""

    run_id: int
    not_run: int
    added: int = 0
    exit_code: int | None = None
    unread: str = ""
    end_taken: bool = False  # its end (exit_code) read from its journal: the database never took it
    refused: str = ""  # completing.Completed.refused: its journal's results not taken, and why (review 186)

    def said(self) -> str:
        """The start's line for it (verify's and bisect's)."""
        taken = f"{self.added} result{'s' * (self.added != 1)} its database lacked taken from its journal"
        taken = taken if self.added else ""
        if self.exit_code is not None:  # it said how it ended
            line = f"run {self.run_id} had stopped with exit {self.exit_code}"
            line += ", its end taken from its journal" if self.end_taken else ""
            line += f", and {taken}" if taken else ""
            line += f"; {self.not_run} unfinished cells recorded as not-run"
        else:
            line = f"run {self.run_id} was interrupted (the farm was stopped): "
            line += f"{taken}; " if taken else ""
            line += f"marked aborted, {self.not_run} unfinished cells recorded as not-run"
        line += self.refused  # the not-run rows of those cells stand: the journal still holds them
        if self.unread:
            line += f"; its journal could not be read ({self.unread}): `farm import` it once mended"
        return line


def _done(session: Any, results: Any, run_id: int) -> set[tuple[str, str, str, str]]:
    """(kernel, variant, node, device) of the run's stored results."""
    rows = session.execute(results.where(ResultRow.__table__.c.run_id == run_id))
    return {(kernel, variant, node, device or "") for kernel, variant, node, device in rows}


def _left(session: Any, run_id: int, cells: list[PlannedCell]) -> list[PlannedCell]:
    """The cells no later fleet run has a result of. A run that stopped itself (exit 5) from before
    review 185 was taken at the first start after, runs after it: a not-run row took a new, highest
    id, and the standing (a cell's highest id) set it over a later run's pass (review 186)."""
    table = ResultRow.__table__
    fleet = table.c.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))  # as the standing's
    left = []
    for cell in cells:
        same = [table.c.kernel == cell.kernel, table.c.variant == cell.variant, table.c.node == cell.node]
        same += [table.c.device == cell.device] if cell.device else []  # none planned: any card of the node
        later = select(table.c.id).where(table.c.run_id > run_id, fleet, *same).limit(1)
        if session.execute(later).first() is None:
            left.append(cell)
    return left


def _stopped_with_cells_left() -> Any:
    """The ids of runs that stopped themselves (aborted, exit 5) with a planned cell that neither
    they nor a later fleet run hold a result of: one query on the cell index at every start, where
    each such run's cells were loaded and looked up one by one, at every start for good (5,000 such
    runs: 1 to 2.4 s a start, review 186). _left and never_finished decide; this only narrows."""
    planned, table, later = PlannedCell.__table__, ResultRow.__table__, ResultRow.__table__.alias("later")
    fleet = later.c.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))

    def cell(rows: Any) -> list[Any]:
        same = [rows.c.kernel == planned.c.kernel, rows.c.variant == planned.c.variant, rows.c.node == planned.c.node]
        return [*same, or_(func.coalesce(planned.c.device, "") == "", rows.c.device == planned.c.device)]

    own = select(table.c.id).where(table.c.run_id == planned.c.run_id, *cell(table))
    after = select(later.c.id).where(later.c.run_id > planned.c.run_id, fleet, *cell(later))
    stopped = select(Run.id).where(Run.status == "aborted", Run.exit_code == EXIT_STORE)
    return select(planned.c.run_id).where(planned.c.run_id.in_(stopped), ~own.exists(), ~after.exists()).distinct()


def _own_journal(folder: Path | None, token: str | None) -> tuple[list[tuple[str, dict[str, Any]]] | None, str]:
    """The records of run `token`'s journal in `folder` (None where it has none there), and why it
    could not be read (a damaged journal: the run is aborted as before, the journal kept to import)."""
    if folder is None or not token or not (path := folder / f"{token}.jsonl").is_file():
        return None, ""
    try:
        records = read_journal(path)
    except StoreError as err:
        return None, str(err)
    if (named := records[0][1].get("token")) != token:  # another run's journal under this one's name: not its results
        return None, f"{path}: its run record's token is {named!r}, not {token!r}, the run its name says (a copy?)"
    return records, ""


def _same_run(run: dict[str, Any]) -> Any:
    """The query for the journal's run here: by its token, or, a run record with none (an older farm's,
    or its token emptied), by a token-less run of the same start and host. Looked up by nothing, such
    a journal imported again was stored again, a second run of the same passes (red-team 239)."""
    if token := run.get("token"):
        return select(Run.id).where(Run.token == token)
    same = (Run.started_at == run.get("started_at"), Run.host == run.get("host"))
    return select(Run.id).where(or_(Run.token.is_(None), Run.token == ""), *same).order_by(Run.id)


class JournaledRun(NamedTuple):
    """A run found by its journal's token, with its rows that a journal also holds."""

    run_id: int
    status: str
    exit_code: int | None  # None: finish_run never committed (the farm died; marked aborted later)
    results: int
    attempts: int
    snapshots: int
    planned: int


class Recovery:
    """Store's part for runs that did not end well (database.py): a run whose farm died, marked
    aborted with its unfinished cells not-run; a run rebuilt from its journal; what a journal
    holds that the database has."""

    def abort_unfinished_runs(self, journals: Path | None = None) -> list[Aborted]:
        """Runs still marked running belong to a farm that died (the caller holds
        the run lock, so none is alive): mark them aborted, and record each cell
        they planned but never finished as not-run. `journals`: the runs' journal folder,
        where each gets its closing mark (closing.py) once committed, before the caller's
        reap kills what they left.

        A run whose journal there holds what the database lacks is completed from it first, as
        `farm import` of that journal would (completing.py): a farm killed between its journal
        and its commit, a database that failed past store_wait (the run's end journaled, exit 5),
        and a run that ended aborted with exit 5 itself (a full disk refused a result, then took
        the end). Their verdicts and exit codes stood lost behind "the farm was stopped", or the
        run's cells stayed unfinished for good, until an operator imported the journal."""
        aborted, tokens = [], []
        now = datetime.now(UTC)
        stopped = or_(Run.status == "running", Run.id.in_(_stopped_with_cells_left()))
        with self._reading() as session:  # most starts find none: no write lock taken for nothing
            if session.scalars(select(Run.id).where(stopped).limit(1)).first() is None:
                return []  # (BEGIN IMMEDIATE waited out another program's lock, and its error named none)
        with self._writing() as session:
            # the runs locked before their journals are read: a farm that lost its lock session writes on
            # a moment, and its result committed after this read the journal was stored twice (review 188).
            # Its writes read their run's status FOR SHARE (Store._still_open): they wait for this, then stop
            if self.engine.dialect.name == "sqlite":
                session.connection().exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now, not at the flush
            for run in session.scalars(select(Run).where(stopped).order_by(Run.id).with_for_update(of=Run)):
                running = run.status == "running"
                table = ResultRow.__table__
                results = select(table.c.kernel, table.c.variant, table.c.node, table.c.device)
                planned = list(session.scalars(select(PlannedCell).where(PlannedCell.run_id == run.id)))
                if not running and not _left(session, run.id, never_finished(planned, _done(session, results, run.id))):
                    continue  # the store's own abort with every cell stored (or re-run since): nothing to do
                records, unread = _own_journal(journals, run.token)
                completed = complete_run(session, run.id, records) if records is not None else None
                session.flush()
                missing = never_finished(planned, _done(session, results, run.id))
                missing = missing if running else _left(session, run.id, missing)
                cards = probed_cards(session, run.id)
                said = run.status != "running"  # how it ended: its own record, or its journal's
                for cell in missing:
                    why = (
                        f"the run stopped (exit {run.exit_code}) before this cell finished {FOUND_AT_NEXT_START}"
                        if said
                        else f"the farm was stopped before this cell finished {FOUND_AT_NEXT_START}"
                    )
                    session.add(not_run_row(run.id, cell, now, why, cards))
                if not said:
                    run.status = "aborted"
                    run.ended_at = run.ended_at or now
                elif missing and run.status == "finished":  # a journaled "finished" with a cell unstored:
                    run.status = "aborted"  # not-run rows under a finished run would read green (exports)
                added = completed.added if completed is not None else 0
                end = bool(completed and completed.ended)
                code = run.exit_code if said else None
                refused = completed.refused() if completed is not None else ""
                aborted.append(Aborted(run.id, len(missing), added, code, unread, end, refused))
                if running:
                    tokens.append(run.token)
            session.commit()
        for token in tokens:
            mark_closed(journals, token, now)
        return aborted

    def not_begun(self, err: StoreError, token: str | None) -> StoreError:
        """A run whose start could not be stored. Where the database shows it is not there, its
        journal holds nothing to rebuild and goes: the error said `farm import` it, which made an
        aborted run of no results over the night's standing. A SQLite lock another program holds
        is said so (a red-team finding: "database is locked" alone, after 30 s)."""
        cause = err.__cause__
        if not isinstance(cause, SQLAlchemyError | OSError):  # the file deleted or replaced: its journal is all
            return err
        said = first_line(cause, self.url)
        try:
            with self._reading() as session:
                there = session.scalar(select(Run.id).where(Run.token == token)) if token else None
        except StoreError:
            return err  # cannot tell: its journal stays, and the error says to import it
        if there is not None:
            return err
        if self.journal is not None:
            with contextlib.suppress(StoreError, OSError):
                self.journal.close()
                self.journal.path.unlink(missing_ok=True)
            self.journal = None
        if "database is locked" in said:
            said += (
                "; another program holds a write lock on it (a sqlite3 shell, a backup or a script mid-write: "
                "farm runs queue on its .lock file instead): let it finish, or wait longer with ?timeout=SECONDS "
                "in the database URL"
            )
        return StoreError(
            f"the results database {self.redacted_url} could not store this run's start: {said}; "
            "nothing of this run was stored"
        )

    def journaled_runs(self, tokens: Sequence[str]) -> dict[str, JournaledRun]:
        """token -> the run of that token and how many of each journaled row it
        holds (journal.prune compares them with its journal); unknown tokens left out."""
        found: dict[str, JournaledRun] = {}
        tables = {"results": ResultRow, "attempts": Attempt, "snapshots": NodeSnapshotRow, "planned": PlannedCell}
        with self._reading() as session:
            for start in range(0, len(tokens), CHUNK):
                chunk = sorted(set(tokens[start : start + CHUNK]))
                query = select(Run.id, Run.token, Run.status, Run.exit_code).where(Run.token.in_(chunk))
                runs = {rid: (token, status, code) for rid, token, status, code in session.execute(query)}
                counts: dict[str, dict[int, int]] = {name: {} for name in tables}
                if runs:
                    for name, table in tables.items():
                        grouped = select(table.run_id, func.count()).where(table.run_id.in_(list(runs)))
                        counts[name] = dict(session.execute(grouped.group_by(table.run_id)).all())
                for rid, (token, status, code) in runs.items():
                    found[token] = JournaledRun(rid, status, code, *(counts[name].get(rid, 0) for name in tables))
        return found

    def import_journal(self, path: Path, given_order: bool = False) -> Imported:
        """Rebuild a run from its journal (journal.py) as a new run of this database.
        Returns (run id, status, results). A run already here is refused, but for the results it
        lacks (a commit that failed: completing.py), which are added to it; and so is
        one that started before the newest run here (run_order.py; `given_order`: the
        operator says it came after): an older run imported later would pass for it."""
        records = read_journal(path)
        run_fields = dict(records[0][1])
        with self._guard("importing"), self._write_lock, self.session() as session:
            if (found := session.scalars(_same_run(run_fields)).first()) is not None:
                # a run whose commit failed: its journal's results the database lacks (completing.py)
                done = complete_run(session, found, records)
                if done.added or done.ended:
                    session.commit()
                    status = session.scalars(select(Run.status).where(Run.id == found)).one()
                    return Imported(found, status, done.added, done.taken())
                raise StoreError(f"{path}: its run is already in {self.redacted_url} as run {found}{done.refused()}")
            check_after_newest(session, path, run_fields.get("started_at"), self.redacted_url, given_order)
            return rebuild_run(session, records)

    def unfinished_cells(self, run_id: int) -> list[tuple[str, str, str, str]]:
        """(kernel, variant, node, device) of the cells the run planned that have no
        result (yet): a run still running, one whose farm died before the next start
        marked it aborted (abort_unfinished_runs), or one that lost a cell. Asked at
        every run's end and every render: plain rows of the run's index entries."""
        with self._reading() as session:
            connection = session.connection()
            planned = select(PlannedCell.kernel, PlannedCell.variant, PlannedCell.node, PlannedCell.device)
            cells = [
                (k, v, n, d or "") for k, v, n, d in connection.execute(planned.where(PlannedCell.run_id == run_id))
            ]
            results = select(ResultRow.kernel, ResultRow.variant, ResultRow.node, ResultRow.device)
            done = {(k, v, n, d or "") for k, v, n, d in connection.execute(results.where(ResultRow.run_id == run_id))}
        return unfinished(cells, done)

    def run_tokens(self, run_ids: Sequence[int]) -> dict[int, str]:
        """run id -> its FARM_RUN token, for the runs of `run_ids` that have one (an older farm's have none)."""
        with self._reading() as session:
            rows = session.execute(select(Run.id, Run.token).where(Run.id.in_(list(run_ids))))
            return {run_id: token for run_id, token in rows if token}
