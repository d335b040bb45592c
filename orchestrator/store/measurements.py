"""The figures measured on record, read back: a cell's baseline for judging a new
value, a run's or some results' values (what changed, the cell pages), the kernel
grids' window of values (the trends) and instruction counts. Store (database.py)
holds these reads beside its others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.metrics import BASELINE
from orchestrator.store.queries import BISECT_TRIGGER, chunks
from orchestrator.store.tables import MetricValue, ResultRow, Run, SassCount


class MeasurementQueries:
    """The reads of metric values and instruction counts; a Store gives them its `_reading()` sessions."""

    def _reading(self) -> AbstractContextManager[Session]:
        raise NotImplementedError

    def metric_baseline(
        self,
        kernel: str,
        variant: str,
        node: str,
        device: str,
        names: Sequence[str],
        cell_env: str,
        count: int = BASELINE,
        units: Mapping[str, str] | None = None,
        real_gpu: bool = True,
        gpu_uuid: str | None = None,
    ) -> dict[str, list[float]]:
        """The cell's last `count` values of each metric on record (results that had
        one), oldest first: what a new value is judged against (metrics.py). Only
        values of runs whose cells ran with the same `cell_env` count (before 0012, with
        the JIT cache on, a run's seconds were measured differently); nor those of a
        bisection's old commits; nor, where `units` names the metric's unit now, values
        stored in another (a job moved from GFLOP/s to TFLOP/s had 0.1 judged "100 %
        worse" than a median of 100: a red-team finding). Only values of finished runs (one
        aborted, or left "running" by a killed farm, certifies nothing, and its odd figures
        judged the next night), and only those measured on the same kind of card as the new
        value: `real_gpu`, confirmed by the driver or not (a stand-in's or an unconfirmed
        card's figures are no yardstick for a real card's, nor the other way: red-team 77).
        Where the new value's card is known (`gpu_uuid`), only values measured on that card: a
        node's card swapped (or a lent machine's, each lease another) is no slowdown of the
        kernel's, and the other card's values judged it (review 132: a fresh H200 lease's
        cutlass_gemm "53 % worse" than earlier machines' median, a nightly run red).
        Read from ix_metric_values_cell, newest first."""
        found: dict[str, list[float]] = {}
        comparable = select(Run.id).where(
            Run.cell_env == cell_env, Run.trigger != BISECT_TRIGGER, Run.status == "finished"
        )
        # the result's own row says which card it ran on (records.card_confirmed): by its primary key
        same_card = select(ResultRow.id).where(
            ResultRow.id == MetricValue.result_id,
            ResultRow.real_gpu.is_(real_gpu),
            *([ResultRow.gpu_uuid == gpu_uuid] if gpu_uuid else []),
        )
        with self._reading() as session:
            for name in names:
                query = (
                    select(MetricValue.value)
                    .where(
                        MetricValue.kernel == kernel,
                        MetricValue.variant == variant,
                        MetricValue.node == node,
                        MetricValue.device == device,
                        MetricValue.name == name,
                        MetricValue.value.is_not(None),
                    )
                    .where(MetricValue.run_id.in_(comparable), same_card.exists())
                    .where(*([MetricValue.unit == units[name]] if units and name in units else []))
                    .order_by(MetricValue.result_id.desc())
                    .limit(count)
                )
                found[name] = list(reversed(session.scalars(query).all()))
        return found

    _METRIC = (
        MetricValue.result_id,
        MetricValue.run_id,
        MetricValue.kernel,
        MetricValue.variant,
        MetricValue.node,
        MetricValue.device,
        MetricValue.name,
        MetricValue.value,
        MetricValue.unit,
        MetricValue.better,
        MetricValue.tolerance,
        MetricValue.note,
        MetricValue.baseline,
        MetricValue.regressed,
    )
    # what a trend draws, in this order (the report unpacks them as tuples: 10^5 rows)
    TREND = (
        MetricValue.result_id,
        MetricValue.run_id,
        MetricValue.kernel,
        MetricValue.variant,
        MetricValue.node,
        MetricValue.device,
        MetricValue.name,
        MetricValue.value,
        MetricValue.unit,
        MetricValue.better,
        MetricValue.baseline,
        MetricValue.regressed,
    )

    def metric_values(self, *, run_id: int | None = None, result_ids: Sequence[int] = ()) -> list[Any]:
        """Every column of the metric values (light rows, in result and name order)
        of one run's results, or of these results."""
        rows: list[Any] = []
        with self._reading() as session:
            rows_of = session.connection().execute  # Core rows: no ORM pass over each
            if run_id is not None:
                rows += rows_of(select(*self._METRIC).where(MetricValue.run_id == run_id)).all()
            for chunk in chunks(sorted(set(result_ids))):
                rows += rows_of(select(*self._METRIC).where(MetricValue.result_id.in_(chunk))).all()
        return sorted(rows, key=lambda row: (row.result_id, row.name))

    def metric_trends(self, run_ids: Sequence[int]) -> list[Any]:
        """The values of these runs' results, as rows of Store.TREND (no value: left
        out), from ix_metric_values_run; in no particular order."""
        if not run_ids:
            return []
        query = select(*self.TREND).where(MetricValue.run_id.in_(sorted(set(run_ids))), MetricValue.value.is_not(None))
        with self._reading() as session:
            return session.connection().execute(query).all()

    def sass_counts(self, result_ids: Sequence[int]) -> dict[int, tuple[str | None, dict[str, int]]]:
        """result id -> (its inputs' identity, instruction -> count), for those inspected."""
        found: dict[int, tuple[str | None, dict[str, int]]] = {}
        with self._reading() as session:
            for chunk in chunks(sorted(set(result_ids))):
                query = select(SassCount.result_id, SassCount.identity, SassCount.instruction, SassCount.count).where(
                    SassCount.result_id.in_(chunk)
                )
                for result_id, identity, instruction, count in session.connection().execute(query).all():
                    found.setdefault(result_id, (identity, {}))[1][instruction] = count
        return found
