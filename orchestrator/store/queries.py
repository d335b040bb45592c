"""What the report, `farm show` and the history read from the results database:
runs, their results and snapshots, each cell's standing and earlier verdicts (the
certifying passes: certifying.py). Read-only, each query in one snapshot
(`Store._reading`); Store (database.py) holds them beside its writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, cast, func, select, union
from sqlalchemy.orm import Session, aliased

from orchestrator.outcomes import Outcome
from orchestrator.store.certifying import unconfirmed_rule
from orchestrator.store.tables import NodeSnapshotRow, ResultRow, Run, SourceFile

CHUNK = 500  # ids per IN (...) list: well inside every driver's bound-parameter limit
BISECT_TRIGGER = "bisect"  # the trigger of `farm bisect`'s runs
NO_VERDICT = (Outcome.INFRA_ERROR.value, Outcome.NOT_RUN.value)  # the node's fault: no verdict on the kernel


def chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


class Queries:
    """The reads; a Store gives them its `_reading()` sessions."""

    def _reading(self) -> AbstractContextManager[Session]:
        raise NotImplementedError

    def latest_run(self, bisections: bool = True) -> Run | None:
        """The run of the highest id; `bisections=False`: the fleet's, none of `farm bisect`'s
        (they test old commits: its last, of the good end, was reported as the latest run, an
        old commit's green over a red night: a red-team finding)."""
        query = select(Run) if bisections else select(Run).where(Run.trigger != BISECT_TRIGGER)
        with self._reading() as session:
            return session.scalars(query.order_by(Run.id.desc()).limit(1)).first()

    def _holds(self, row_id: int) -> bool:
        """Whether an id can be one this database holds: 64 bits on both backends (past them, an
        overflow in SQLite, "bigint out of range" in PostgreSQL: a database fault where there is no
        such row, a red-team finding); PostgreSQL's were 32 bits until 0018 (red-team 242)."""
        return 1 <= row_id < 2**63

    def run(self, run_id: int) -> Run | None:
        if not self._holds(run_id):
            return None
        with self._reading() as session:
            return session.get(Run, run_id)

    def runs(self, limit: int = 50, upto: int | None = None, bisections: bool = True) -> list[Run]:
        """The newest runs first, optionally none newer than run `upto`; `bisections=False`:
        the fleet's, none of `farm bisect`'s (their old commits' results in the fleet's
        history made a red cell look flaky: a red-team finding)."""
        query = select(Run) if bisections else select(Run).where(Run.trigger != BISECT_TRIGGER)
        if upto is not None:
            query = query.where(Run.id <= upto)
        with self._reading() as session:
            return list(session.scalars(query.order_by(Run.id.desc()).limit(limit)))

    def newer_runs(self, run_id: int) -> tuple[int, int] | None:
        """(how many, the latest id) of the fleet's runs newer than run `run_id`, or None: an older run's
        report is as of its end, and says so (review 200). From the primary key alone."""
        query = select(func.count(), func.max(Run.id)).where(Run.id > run_id, Run.trigger != BISECT_TRIGGER)
        with self._reading() as session:
            count, latest = session.execute(query).one()
        return (count, latest) if count else None

    def bisection_runs(self, limit: int = 50) -> list[Run]:
        """`farm bisect`'s runs, newest first: listed apart from the fleet's (history.html)."""
        query = select(Run).where(Run.trigger == BISECT_TRIGGER).order_by(Run.id.desc()).limit(limit)
        with self._reading() as session:
            return list(session.scalars(query))

    def snapshots(self, run_id: int) -> list[NodeSnapshotRow]:
        with self._reading() as session:
            query = select(NodeSnapshotRow).where(NodeSnapshotRow.run_id == run_id)
            return list(session.scalars(query.order_by(NodeSnapshotRow.id)))

    def results(self, run_id: int) -> list[ResultRow]:
        with self._reading() as session:
            query = select(ResultRow).where(ResultRow.run_id == run_id)
            return list(session.scalars(query.order_by(ResultRow.id)))

    def source(self, sha256: str) -> SourceFile | None:
        with self._reading() as session:
            return session.get(SourceFile, sha256)

    _KEY = (ResultRow.kernel, ResultRow.variant, ResultRow.node, ResultRow.device)
    _STANDING = (
        ResultRow.id,
        ResultRow.run_id,
        *_KEY,
        ResultRow.contract,
        ResultRow.contract_ccs,
        ResultRow.contract_expected,  # the report holds it and the build against the job now (report/rejudged.py)
        ResultRow.build_command,
        ResultRow.expected,
        ResultRow.expected_reason,
        ResultRow.cuda_waived,  # judged with the CUDA-error rule waived (cuda_waiver.was_waived)
        ResultRow.outcome,
        ResultRow.failed_stage,
        ResultRow.reason,
        ResultRow.last_stderr_line,
        ResultRow.cc,
        ResultRow.real_gpu,
        ResultRow.farm_writable,  # ran unconfined on the farm's own machine (report.model.unconfirmed)
        ResultRow.code_path,
        # how a ptx-jit pass counted its SASS `instructions:`, a native one its PTX names (report/rejudged.py)
        case((ResultRow.code_path.in_(("ptx-jit", "native")), ResultRow.stage_details), else_=None).label("jit_stages"),
        # the nvcc it was built by: a known failure's `when` is held against it again (report/rejudged.py)
        select(NodeSnapshotRow.nvcc_version)
        .where(NodeSnapshotRow.id == ResultRow.snapshot_id)
        .scalar_subquery()
        .label("nvcc_version"),
        ResultRow.identity,  # the ledger flags a certificate whose bytes a sanitizer now faults
        ResultRow.started_at,
        ResultRow.ended_at,
    )

    def standing(self, upto: int) -> tuple[dict[tuple, Any], dict[tuple, Any]]:
        """The fleet's standing as of run `upto`: per (kernel, variant, node, device),
        the latest result with a verdict and the latest result of any kind (light rows).

        Both are taken per cell from the ix_results_cell index alone (the table's
        wide rows are read only for the at most two results per cell returned)."""
        # a bisection's runs test old commits: they are not the fleet's standing (bisect/)
        current = ResultRow.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))
        verdicts = (
            select(func.max(ResultRow.id))
            .where(ResultRow.run_id <= upto, current)
            .where(ResultRow.outcome.not_in(NO_VERDICT))
            .group_by(*self._KEY)
        )
        anything = select(func.max(ResultRow.id)).where(ResultRow.run_id <= upto, current).group_by(*self._KEY)
        # a subquery, not a list of ids: a big farm's cells would pass the drivers' bound-parameter limits
        query = select(*self._STANDING).where(ResultRow.id.in_(union(verdicts, anything))).order_by(ResultRow.id)
        with self._reading() as session:
            rows = session.connection().execute(query).all()
        latest_verdict: dict[tuple, Any] = {}
        latest_any: dict[tuple, Any] = {}
        for row in rows:  # in id order: the last one written per cell wins
            key = (row.kernel, row.variant, row.node, row.device)
            latest_any[key] = row
            if row.outcome not in NO_VERDICT:
                latest_verdict[key] = row
        return latest_verdict, latest_any

    def previous_results(
        self, *, run_id: int | None = None, result_ids: list[int] | None = None, per_cell: int = 10
    ) -> dict[int, list[tuple[int, str, int]]]:
        """For each result of run `run_id` (or each of `result_ids`), its cell's last
        `per_cell` results from runs before that result's run, oldest first:
        result id -> [(run id, outcome, result id)]; a result with none is left out.

        Earlier results are the fleet's: a bisection's runs test old commits, and its old
        green read as a flip ("unstable", a regression invented or hidden) in every later
        run's "what changed" (a red-team finding).

        Bounded by `per_cell` per result, whatever the history's length: read from
        the ix_results_cell index alone, from the result's run back. "Last" is in
        run order, then id order; ids grow with runs, so that is the order the
        results were written in."""
        if (run_id is None) == (result_ids is None):
            raise ValueError("previous_results: give run_id or result_ids")
        this = aliased(ResultRow, name="this")
        earlier = aliased(ResultRow, name="earlier")
        fleet = earlier.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))  # see above
        same_cell = [*(getattr(earlier, c.key) == getattr(this, c.key) for c in self._KEY), fleet]
        # the run of the cell's per_cell-th result back: every one of the last per_cell lies in it or
        # after, so the join below reads index entries only, and at most per_cell (more only when a
        # cell has several results in one run, trimmed below)
        oldest = (
            select(earlier.run_id)
            .where(*same_cell, earlier.run_id < this.run_id)
            .order_by(earlier.run_id.desc())
            .offset(per_cell - 1)
            .limit(1)
            .correlate(this)
            .scalar_subquery()
        )
        earlier_rows = (
            select(this.id.label("this_id"), earlier.run_id, earlier.outcome, earlier.id)
            .join(
                earlier,
                and_(*same_cell, earlier.run_id < this.run_id, earlier.run_id >= func.coalesce(oldest, -1)),
            )
            .order_by(this.id, earlier.run_id, earlier.id)
        )
        with self._reading() as session:
            if run_id is not None:
                rows = list(session.execute(earlier_rows.where(this.run_id == run_id)))
            else:
                rows = []
                for chunk in chunks(sorted(set(result_ids or []))):
                    rows += session.execute(earlier_rows.where(this.id.in_(chunk)))
        found: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for this_id, rid, outcome, res in rows:
            found[this_id].append((rid, outcome, res))
        return {this_id: prior[-per_cell:] for this_id, prior in found.items()}

    def run_starts(self, before: int) -> list[tuple[int, datetime]]:
        """(id, start) of every run before run `before`, in id order: the database's order, which a
        start read off a clock that stepped need not follow (report/standing.py ages by it)."""
        query = select(Run.id, Run.started_at).where(Run.id < before).order_by(Run.id)
        with self._reading() as session:
            return [(rid, started) for rid, started in session.execute(query)]

    def run_states(self, run_ids: list[int]) -> dict[int, tuple[datetime, str, str | None, str | None]]:
        """run id -> (when it started, its status, the commit a bisection's run tested, else
        None, the farm's own commit it ran at, else None): what a cell page says of its run,
        and (the first two) its stamp (stamps.cell_stamp)."""
        found: dict[int, tuple[datetime, str, str | None, str | None]] = {}
        query = select(Run.id, Run.started_at, Run.status, Run.trigger, Run.selection, Run.farm_commit)
        with self._reading() as session:
            for chunk in chunks(sorted(set(run_ids))):
                for rid, started, status, trigger, selection, farm in session.execute(query.where(Run.id.in_(chunk))):
                    # bisect/'s selection: "bisect KERNEL:VARIANT --node NODE at SHA"
                    commit = selection.rpartition(" at ")[2] if trigger == BISECT_TRIGGER else None
                    found[rid] = (started, status, commit, farm)
        return found

    def run_outcome_counts(self, run_ids: list[int]) -> dict[int, dict[str, int]]:
        """run -> outcome -> number of results, counted in the database (ix_results_run_cell)."""
        counts: dict[int, dict[str, int]] = {rid: {} for rid in run_ids}
        if not run_ids:
            return counts
        query = (
            select(ResultRow.run_id, ResultRow.outcome, func.count())
            .where(ResultRow.run_id.in_(run_ids))
            .group_by(ResultRow.run_id, ResultRow.outcome)
        )
        with self._reading() as session:
            for rid, outcome, n in session.execute(query):
                counts[rid][outcome] = n
        return counts

    def run_matrix(self, run_ids: list[int]) -> list[Any]:
        """Light rows (id, run_id, kernel, variant, node, device, outcome) of these
        runs' results, read from the ix_results_run_cell index, in id order."""
        if not run_ids:
            return []
        # no ORDER BY: SQLite would then walk ix_results_run_id (already in id order)
        # and fetch each wide row (logs are inline) instead of reading the covering
        # ix_results_run_cell alone; sorting a run's few thousand ids here is cheaper
        query = select(ResultRow.id, ResultRow.run_id, *self._KEY, ResultRow.outcome).where(
            ResultRow.run_id.in_(run_ids)
        )
        with self._reading() as session:
            rows = session.connection().execute(query).all()
        rows.sort(key=lambda row: row[0])
        return rows

    def unfinished_runs(self) -> dict[int, str]:
        """Every run that did not finish (aborted, or still running) -> its status: what
        they stored certifies nothing (_certifying), and no page shows it green."""
        with self._reading() as session:
            query = select(Run.id, Run.status).where(Run.status != "finished")
            return {run_id: status for run_id, status in session.execute(query)}

    def unconfirmed_results(self, run_ids: list[int]) -> set[int]:
        """Ids of these runs' as-expected results on a card the NVIDIA driver did not
        confirm, or run unconfined on the farm's own machine (report.model.unconfirmed):
        no page paints them green."""
        if not run_ids:
            return set()
        found: set[int] = set()
        with self._reading() as session:
            # one run at a time: each is answered from ix_results_run_cell alone (0014), where SQLite
            # took ix_results_outcome for several runs at once and read every pass's wide row
            for run_id in dict.fromkeys(run_ids):
                query = select(ResultRow.id).where(ResultRow.run_id == run_id, *unconfirmed_rule())
                found.update(row[0] for row in session.connection().execute(query))
        return found

    def result_rows(self, result_ids: list[int], json_as_text: bool = False) -> list[Any]:
        """Whole results (logs included) as plain rows, not ORM objects: what a cell
        page shows, read in chunks of ids, in id order. `json_as_text`: the JSON
        columns as their stored text, for a caller that decodes the few distinct
        values once (a run's thousands of rows repeat the same few dozen)."""
        from sqlalchemy import JSON, Text

        columns: list[Any] = [
            cast(column, Text).label(column.key) if json_as_text and isinstance(column.type, JSON) else column
            for column in ResultRow.__table__.columns
        ]
        rows: list[Any] = []
        with self._reading() as session:
            for chunk in chunks(sorted(set(result_ids))):
                query = select(*columns).where(ResultRow.id.in_(chunk)).order_by(ResultRow.id)
                rows += session.connection().execute(query).all()  # Core rows: no ORM pass over each
        return rows

    def snapshot_rows(self, snapshot_ids: list[int]) -> dict[int, Any]:
        """Node snapshots as plain rows, by id."""
        found: dict[int, Any] = {}
        with self._reading() as session:
            for chunk in chunks(sorted(set(snapshot_ids))):
                query = select(*NodeSnapshotRow.__table__.columns).where(NodeSnapshotRow.id.in_(chunk))
                found.update((row.id, row) for row in session.execute(query))
        return found

    def latest_snapshots(self, upto: int) -> list[NodeSnapshotRow]:
        """Each node's latest snapshot up to run `upto` that probed it (else its latest)."""
        probed = (
            select(func.max(NodeSnapshotRow.id))
            .where(NodeSnapshotRow.run_id <= upto, NodeSnapshotRow.probe_error.is_(None))
            .group_by(NodeSnapshotRow.node)
        )
        anything = (
            select(func.max(NodeSnapshotRow.id)).where(NodeSnapshotRow.run_id <= upto).group_by(NodeSnapshotRow.node)
        )
        with self._reading() as session:
            ids = set(session.scalars(probed))
            rows = {s.node: s for s in session.scalars(select(NodeSnapshotRow).where(NodeSnapshotRow.id.in_(ids)))}
            for snap in session.scalars(select(NodeSnapshotRow).where(NodeSnapshotRow.id.in_(anything))):
                rows.setdefault(snap.node, snap)
        return [rows[node] for node in sorted(rows)]

    def latest_identified(self, upto: int, kernels: list[str] | None = None) -> list[ResultRow]:
        """Each kernel's latest result (up to run `upto`) whose inputs are all identified.
        Given the kernels, each is looked up alone, newest first (ix_results_kernel),
        rather than by grouping every result on record. A bisection's runs test old
        commits: their inputs are not the kernel's now (as in standing)."""
        current = ResultRow.run_id.not_in(select(Run.id).where(Run.trigger == BISECT_TRIGGER))
        if kernels is None:
            latest = (
                select(func.max(ResultRow.id))
                .where(ResultRow.run_id <= upto, ResultRow.identity.is_not(None), current)
                .group_by(ResultRow.kernel)
            )
            with self._reading() as session:
                return list(session.scalars(select(ResultRow).where(ResultRow.id.in_(latest)).order_by(ResultRow.id)))
        found: list[ResultRow] = []
        with self._reading() as session:
            for kernel in sorted(set(kernels)):
                query = (
                    select(ResultRow)
                    .where(ResultRow.kernel == kernel, ResultRow.run_id <= upto, ResultRow.identity.is_not(None))
                    .where(current)
                    .order_by(ResultRow.id.desc())
                    .limit(1)
                )
                found += session.scalars(query)
        return sorted(found, key=lambda row: row.id)

    def snapshots_of(self, run_ids: list[int]) -> list[NodeSnapshotRow]:
        if not run_ids:
            return []
        query = select(NodeSnapshotRow).where(NodeSnapshotRow.run_id.in_(run_ids))
        with self._reading() as session:
            return list(session.scalars(query.order_by(NodeSnapshotRow.id)))

    def results_with_snapshots(self, result_ids: list[int]) -> list[Any]:
        """Full rows of these results, each with its node snapshot."""
        if not result_ids:
            return []
        query = (
            select(ResultRow, NodeSnapshotRow)
            .join(NodeSnapshotRow, ResultRow.snapshot_id == NodeSnapshotRow.id)
            .where(ResultRow.id.in_(result_ids))
            .order_by(ResultRow.id)
        )
        with self._reading() as session:
            return list(session.execute(query))

    def result(self, result_id: int) -> ResultRow | None:
        if not self._holds(result_id):
            return None
        with self._reading() as session:
            return session.get(ResultRow, result_id)
