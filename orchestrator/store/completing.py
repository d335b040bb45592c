"""A run the database holds, completed from its journal (recovery.import_journal).

A result whose commit the database refused (a statement timeout, a server restarted, a full disk)
stops the run, its records in its journal; the database keeps the run and every cell before it, and
the next start records the cell not-run. Its journal's import was refused ("already in") and the
verdict it holds was lost (a red-team finding): here the results the run lacks are added, each with
the attempts journaled with it, over the not-run row that start wrote in its place.
A run still running here takes the journal's end, a result added or not (red-team 173).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from orchestrator.outcomes import Outcome
from orchestrator.store.closing import closed_at, journaled_end
from orchestrator.store.older_journals import as_stored, transports
from orchestrator.store.result_rows import ATTEMPT_NULLABLE, ATTEMPTS, RESULTS, fit, insert_result, stored
from orchestrator.store.tables import NodeSnapshotRow, ResultRow, Run
from orchestrator.utc import as_utc

NOT_RUN = Outcome.NOT_RUN.value


def _rerun_later(session: Session, run_id: int, kept: dict[str, Any]) -> bool:
    """Whether a run after `run_id` holds a result of the cell (kernel, variant, node, device)."""
    table = ResultRow.__table__
    cell = [table.c[key] == kept.get(key, "") for key in ("kernel", "variant", "node", "device")]
    return session.execute(select(table.c.id).where(table.c.run_id > run_id, *cell).limit(1)).first() is not None


class Completed(NamedTuple):
    """What complete_run added, and what it did not as it came after the run was closed."""

    added: int
    late: int
    # how "after" was told: "journal" (its closing mark), "own end" (its finish: it ended itself), "clocks",
    # "clocks disagree", "" (not closed)
    by: str
    ended: bool = False  # the journal's end taken for a run the database still held running

    def taken(self) -> str:
        """The import line's words beyond the results added: the end taken, how results were told."""
        ended = "; its end, which the database lacked, taken from the journal" if self.ended else ""
        return ended + self._by_clocks()

    def _by_clocks(self) -> str:
        """The import line's words on results taken by the clocks alone: no closing mark told
        them from after the close, two hosts' clocks did (a review finding, 142)."""
        if self.by != "clocks" or not self.added:
            return ""
        return (
            f"; taken by the clocks of the run's host and of the start that closed it, which may disagree "
            f"(no closing mark in the journal): {self.added} results"
        )

    def refused(self) -> str:
        """The refusal's words for the results not taken, where none was added."""
        if not self.late:
            return ""
        said = f"; the {self.late} results it lacks "
        if self.by == "own end":
            return said + "were journaled after the run's own end: not taken"
        if self.by == "journal":
            return said + (
                "were journaled after another farm's start closed the run (its mark in the journal), "
                "which killed what it ran on the nodes: not taken"
            )
        if self.by == "clocks":
            return said + (
                "ended after another farm's start closed the run (which killed what it ran on the nodes), by the "
                "clocks of the run's host and of that start's, which may disagree (the journal holds no closing "
                "mark: that farm could not reach it): not taken"
            )
        return said + (
            "cannot be told from after another farm's start closed the run (which killed what it ran on the "
            "nodes): the journal holds no closing mark, and that start's clock read earlier than the run's own "
            "start, so the clocks disagree: not taken"
        )


def complete_run(session: Session, run_id: int, records: list[tuple[str, dict[str, Any]]]) -> Completed:
    """Add to run `run_id` the journal's results it lacks (a cell with no row, or only not-run
    rows, where the journal holds its verdict) and, the run still marked running, its end
    (closing.journaled_end: after a closing mark, the close's).
    Returns how many results were added, and how many were not as they came after the run was
    closed (see below); the caller commits."""
    run = session.get(Run, run_id)
    # a run the database closed (another farm's start, its lock session ended) may have gone on until
    # it saw its lock gone: that start killed its processes on the nodes (reap_dead_runs), and what it
    # journaled after is no verdict of its own (a killed kernel's crash: a review finding). Told by the
    # start's mark in the journal (closing.py), whose order cannot step; without one, by the clocks
    mark = closed_at(records)
    closed = as_utc(run.ended_at) if run is not None and run.status != "running" and run.ended_at else None
    by = "journal" if mark is not None else "clocks" if closed is not None else ""
    if mark is None and closed is not None and as_utc(run.started_at) > closed:  # a close before the run began
        by = "clocks disagree"
    # an exit code is the run's own end (another start's close leaves none): no start closed it, nothing
    # was killed; what it journaled before its finish is its own, whatever its clock read then. Told by
    # the clocks, a step back before its end turned a verdict away as "after another farm's start closed
    # the run", and the next start stored the cell not-run without a word (review 186)
    own = mark is None and closed is not None and run is not None and run.exit_code is not None
    finish = next((index for index, (kind, _fields) in enumerate(records) if kind == "finish"), len(records))
    by = "own end" if own else by
    late = 0
    table = ResultRow.__table__
    rows = session.execute(
        select(table.c.id, table.c.kernel, table.c.variant, table.c.node, table.c.device, table.c.outcome).where(
            table.c.run_id == run_id
        )
    ).all()
    # the journal's snapshot refs are the run's snapshots in the order stored, where all were stored
    snapshots = list(
        session.scalars(select(NodeSnapshotRow.id).where(NodeSnapshotRow.run_id == run_id).order_by(NodeSnapshotRow.id))
    )
    refs = [fields["ref"] for kind, fields in records if kind == "snapshot"]
    by_ref = dict(zip(refs, snapshots, strict=True)) if len(refs) == len(snapshots) else {}
    transport = transports(records)
    connection = session.connection()
    added = 0
    adding = False  # the attempts after an added result were journaled with it, in its transaction
    for index, (kind, fields) in enumerate(records):
        if kind == "attempt" and adding:
            connection.execute(ATTEMPTS.insert(), stored(ATTEMPTS, {**ATTEMPT_NULLABLE, "run_id": run_id, **fields}))
            continue
        adding = False
        if kind != "result" or fields.get("outcome") == NOT_RUN:
            continue
        fields = dict(fields)
        ref, metrics = fields.pop("snapshot_ref", None), fields.pop("metrics", [])
        kept = fit(RESULTS, fields)
        cell = (kept["kernel"], kept["variant"], kept["node"])
        same = [
            r for r in rows if (r.kernel, r.variant, r.node) == cell and r.device in (None, "", kept.get("device", ""))
        ]
        if any(r.outcome != NOT_RUN for r in same):
            continue  # stored before the failure
        ended = fields.get("ended_at") or fields.get("started_at")
        if mark is not None:
            after = index > mark
        elif own:
            after = index > finish
        else:
            stamped_after = isinstance(ended, datetime) and closed is not None and as_utc(ended) > closed
            after = closed is not None and (by == "clocks disagree" or stamped_after)
        if after:
            late += 1
            continue
        # the standing takes a cell's highest result id as its latest: the verdict takes the not-run
        # row's id, below a later run's re-run of the cell; a new id stood over it (a review finding)
        at: dict[str, int] = {}
        if same:  # the next start's not-run rows give way to the verdict
            at["id"] = min(r.id for r in same)
            connection.execute(delete(table).where(table.c.id.in_([r.id for r in same])))
        elif _rerun_later(session, run_id, kept):
            continue  # no row to take the place of: a new id would stand over the later run's
        # the flags later revisions added, as their migrations fill them for an older farm's run
        row = {**at, "run_id": run_id, "snapshot_id": by_ref.get(ref), **as_stored(fields, transport.get(ref))}
        insert_result(connection, row, metrics, ())
        added += 1
        adding = True
    end = journaled_end(records)  # a finish after the closing mark is the close's: aborted (closing.py)
    # with no result added too: the end's own commit refused (a server restarted as the run ended) left the
    # run running with every cell stored, and the import the error named refused it, "already in" (red-team 173)
    ended = end is not None and run is not None and run.status == "running"
    if ended:
        run.status, run.exit_code, run.ended_at = end["status"], end["exit_code"], end["ended_at"]
    return Completed(added, late, by, ended)
