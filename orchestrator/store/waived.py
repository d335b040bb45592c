"""Which of a run's passes were judged with the CUDA-error rule waived (cuda_waiver.py), by id.

The run pages' matrices and the kernel pages' history grids are made from light rows (id, cell,
outcome) that hold no expected_reason, where the waiver is stamped: a waived pass there read as a
plain green one while the index matrix, the exports and the ledger flagged it (red-team round 106).
The flag is results.cuda_waived (0015), not NOTE found in expected_reason (review 111).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from orchestrator.cuda_waiver import PASSED
from orchestrator.store.tables import ResultRow

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session


class WaivedQueries:
    """Store's lookup of waived passes (database.py)."""

    def _reading(self) -> AbstractContextManager[Session]:
        raise NotImplementedError  # database.Store's

    def waived_results(self, run_ids: list[int]) -> set[int]:
        """Ids of these runs' passes judged with the CUDA-error rule waived (cuda_waiver.was_waived)."""
        found: set[int] = set()
        with self._reading() as session:
            # one run at a time, as unconfirmed_results: ix_results_run_cell narrows each to its passes
            for run_id in dict.fromkeys(run_ids):
                query = select(ResultRow.id).where(
                    ResultRow.run_id == run_id, ResultRow.outcome.in_(PASSED), ResultRow.cuda_waived.is_(True)
                )
                found.update(session.connection().execute(query).scalars())
        return found
