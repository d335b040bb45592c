"""What certifies, read from the results database: the passes a kernel's certificates
rest on, counted per (kernel, identity, cc) for the ledger, and the days they ran
on for the header claims it checks. The rule of what certifies lives here alone
(_certifying); Store (database.py) holds these reads beside its others.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from sqlalchemy import Date, case, cast, func, or_, select
from sqlalchemy.orm import Session

from orchestrator.outcomes import RAN_AS_EXPECTED, Outcome
from orchestrator.store.tables import ResultRow, Run

# see CertifyingQueries._certifying; a perf-regression passed its numbers: slower, still correct
CERTIFYING_OUTCOMES = (Outcome.PASS.value, Outcome.FIXED.value, Outcome.PERF_REGRESSION.value)


def unconfirmed_rule() -> list[Any]:
    """report.model.unconfirmed in SQL: an as-expected result of a kernel that ran on a card the
    driver did not confirm, or unconfined on the farm's own machine (farm_writable.py), or of
    inputs not all identified (no identity: the rule below never counted it, review 146). One
    condition for the pages' greys (Queries.unconfirmed_results) and history.html's counts
    (unconfirmed_reasons), which had each written it out."""
    return [
        ResultRow.device != "",
        or_(ResultRow.real_gpu.is_(False), ResultRow.farm_writable.is_(True), ResultRow.identity.is_(None)),
        ResultRow.outcome.in_(RAN_AS_EXPECTED),
    ]


class CertifyingGroup(NamedTuple):
    kernel: str
    identity: str
    cc: str
    passes: int
    first_id: int
    last_id: int


class CertifyingDay(NamedTuple):
    kernel: str
    identity: str
    cc: str
    day: str


class CertifyingQueries:
    """The certifying reads; a Store gives them its `_reading()` sessions."""

    def _reading(self) -> AbstractContextManager[Session]:
        raise NotImplementedError

    def _certifying(
        self,
        session: Session,
        outcomes: tuple[str, ...] = CERTIFYING_OUTCOMES,
        farm_writable: bool = False,
        upto: int | None = None,
    ) -> list[Any]:
        """What certifies: a pass, where the contract required one, on a GPU the
        driver confirmed, not run unconfined on the farm's own machine as the farm's
        user (farm_writable.py: it could have written this database, 0016), of a result
        whose every input is identified, in a run that finished (one that did not never
        looks green: 0013). The rule lives here and nowhere else (`outcomes`: some of
        its outcomes only; `farm_writable`: the passes that certify but for that, which
        a kernel page names; `upto`: those of runs up to that one, an older run's report:
        by run id, as ids are not in run order, a dead run's completed from its journal later)."""
        unfinished = list(session.scalars(select(Run.id).where(Run.status != "finished")))
        return [
            ResultRow.outcome.in_([o for o in outcomes if o in CERTIFYING_OUTCOMES]),
            ResultRow.contract_expected == Outcome.PASS.value,
            ResultRow.real_gpu.is_(True),
            ResultRow.farm_writable.is_(farm_writable),
            ResultRow.cc.is_not(None),
            ResultRow.identity.is_not(None),
            *([ResultRow.run_id.not_in(unfinished)] if unfinished else []),
            *([ResultRow.run_id <= upto] if upto is not None else []),  # in ix_results_certifying too
        ]

    def farm_writable_passes(self, current: list[tuple[str, str]], upto: int | None = None) -> list[Any]:
        """Of these (kernel, identity) pairs, the passes that would certify but for having run unconfined
        on the farm's own machine (farm_writable.py): rows (kernel, identity, cc, passes, first_id, last_id),
        from ix_results_certifying, for a kernel page to say why they do not; `upto`: of runs up to that one."""
        if not current:
            return []
        found: list[Any] = []
        with self._reading() as session:
            rule = self._certifying(session, farm_writable=True, upto=upto)
            for kernel, identity in sorted(set(current)):
                group = (ResultRow.kernel, ResultRow.identity, ResultRow.cc)
                query = (
                    select(*group, func.count(), func.min(ResultRow.id), func.max(ResultRow.id))
                    .where(*rule, ResultRow.kernel == kernel, ResultRow.identity == identity)
                    .group_by(*group)
                )
                found += [CertifyingGroup(*row) for row in session.execute(query)]
        return found

    def unconfirmed_reasons(self, run_ids: list[int]) -> dict[int, tuple[int, int, int, int]]:
        """run -> (how many of its results unconfirmed_results would list, of them on a card the driver
        did not confirm, of them run unconfined on the farm's own machine, of them of inputs not all
        identified), counted from ix_results_run_cell: history.html's "as expected" count that holds
        any is never green, and it says each reason, where it had called them all unconfirmed cards
        (review 141). One result may be several."""
        if not run_ids:
            return {}
        query = (
            select(
                ResultRow.run_id,
                func.count(),
                func.sum(case((ResultRow.real_gpu.is_(False), 1), else_=0)),
                func.sum(case((ResultRow.farm_writable.is_(True), 1), else_=0)),
                func.sum(case((ResultRow.identity.is_(None), 1), else_=0)),
            )
            .where(ResultRow.run_id.in_(run_ids), *unconfirmed_rule())
            .group_by(ResultRow.run_id)
        )
        with self._reading() as session:
            rows = session.execute(query)
            return {run_id: (n, int(card), int(writable), int(blind)) for run_id, n, card, writable, blind in rows}

    def certifying_passes(self) -> list[Any]:
        """Every certifying pass (see _certifying): light rows (id, kernel,
        identity, cc, started_at), oldest first."""
        with self._reading() as session:
            query = (
                select(ResultRow.id, ResultRow.kernel, ResultRow.identity, ResultRow.cc, ResultRow.started_at)
                .where(*self._certifying(session))
                .order_by(ResultRow.id)
            )
            return list(session.execute(query))

    def certifying_groups(
        self, dated: list[tuple[str, str]] | None = None, upto: int | None = None
    ) -> tuple[list[Any], list[Any]]:
        """The certifying passes (see _certifying) per (kernel, identity, cc), counted
        in the database from the ix_results_certifying index alone: rows (kernel,
        identity, cc, passes, first_id, last_id); and for the (kernel, identity)
        pairs in `dated`, rows (kernel, identity, cc, day) of the UTC days their
        passes ran on ("YYYY-MM-DD"). `upto`: the passes of runs up to that one alone (an older
        run's report, as of its end: it had counted every later run's, review 200)."""
        group = (ResultRow.kernel, ResultRow.identity, ResultRow.cc)
        groups: dict[tuple[str, str, str], list[int]] = {}
        dates: list[CertifyingDay] = []
        with self._reading() as session:
            # one outcome at a time: each is one range of the index, in (kernel, identity, cc) order,
            # so the database counts it in one pass without sorting
            for outcome in CERTIFYING_OUTCOMES:
                query = (
                    select(*group, func.count(), func.min(ResultRow.id), func.max(ResultRow.id))
                    .where(*self._certifying(session, (outcome,), upto=upto))
                    .group_by(*group)
                )
                for kernel, identity, cc, n, first_id, last_id in session.execute(query):
                    found = groups.setdefault((kernel, identity, cc), [0, first_id, last_id])
                    found[0] += n
                    found[1] = min(found[1], first_id)
                    found[2] = max(found[2], last_id)
            if self.engine.dialect.name == "postgresql":  # a timestamptz's day in UTC, whatever the session's zone
                day: Any = cast(func.timezone("UTC", ResultRow.started_at), Date)
            else:  # SQLite holds UTC times as text without a zone
                day = func.date(ResultRow.started_at)
            for kernel, identity in sorted(set(dated or [])):
                query = (
                    select(ResultRow.cc, day)
                    .where(*self._certifying(session, upto=upto), ResultRow.kernel == kernel)
                    .where(ResultRow.identity == identity)
                    .distinct()
                )
                for cc, on in session.execute(query):
                    dates.append(CertifyingDay(kernel, identity, cc, on if isinstance(on, str) else on.isoformat()))
        return [CertifyingGroup(*key, *found) for key, found in sorted(groups.items())], dates
