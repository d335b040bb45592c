"""The fleet's standing, which the matrix shows: every cell's latest verdict from any run up to the rendered one
(StandingCell), its node's and card's column (Column, in CC order: cc_key), and each verdict's colour (category).
Read from the store's indexes over all history, by definition (model.py gathers the rest)."""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.outcomes import is_as_expected, is_infra
from orchestrator.report import history
from orchestrator.store.database import Store
from orchestrator.store.tables import NodeSnapshotRow, Run
from orchestrator.utc import as_utc


@functools.cache
def category(outcome: str) -> str:
    """good, bad or infra: the colour of an outcome (cached: a report asks ~10^5 times)."""
    if is_infra(outcome):
        return "infra"
    return "good" if is_as_expected(outcome) else "bad"


def cc_key(cc: str | None) -> tuple[int, int, int]:
    """Sort key of a CC written "major.minor": as numbers (7.5 < 10.0), None last."""
    if not cc:
        return (1, 0, 0)
    major, _, minor = cc.partition(".")
    try:
        return (0, int(major), int(minor or 0))
    except ValueError:
        return (1, 0, 0)


@dataclass(frozen=True)
class Column:
    """One column of the matrix: a node, and on a node with several card models, one card."""

    node: str
    device: str
    several: bool  # the node holds several card models: name the card
    cc: str | None
    snapshot: NodeSnapshotRow | None  # the node's latest probe up to the rendered run
    real_gpu: bool  # the card confirmed by the driver (latest result's)

    @property
    def key(self) -> tuple[str, str]:
        return (self.node, self.device)


@dataclass(frozen=True)
class StandingCell:
    """What the matrix shows for a cell: its latest verdict from any run, and
    the latest attempt when that was infra (the node could not be used)."""

    result: Any  # light row: id, run_id, outcome, expected, reason, last_stderr_line, times, code_path
    age_days: float  # before the rendered run's start
    stale: bool
    infra_since: Any | None  # a later infra result, if any

    @property
    def category(self) -> str:
        return category(self.result.outcome)


def _days(later: datetime, earlier: datetime | None) -> float:
    if earlier is None:
        return 0.0
    a = later if later.tzinfo else later.replace(tzinfo=UTC)
    b = earlier if earlier.tzinfo else earlier.replace(tzinfo=UTC)
    days = (a - b).total_seconds() / 86400
    # an earlier run's verdict a day or more after this run's start: one of the farm host's clocks was
    # off; it stood 0 days old, never stale, until that date (a red-team finding): its age is unknown
    return math.inf if days < -1 else max(days, 0.0)


def _earliest_after(starts: list[tuple[int, datetime]]) -> dict[int, datetime]:
    """run id -> the earliest start of the runs after it (of `starts`, (id, start) in id order; the
    last run has none). A run starts after every run before it, whatever the clocks read: a verdict
    whose run's clock was ahead is at least as old as any later run's start says (red-team 246)."""
    earliest: dict[int, datetime] = {}
    least: datetime | None = None
    for rid, started in reversed(starts):
        if least is not None:
            earliest[rid] = least
        moment = as_utc(started)
        least = moment if least is None else min(least, moment)
    return earliest


def _age(run: Run, row: Any, earliest: dict[int, datetime]) -> float:
    """Days between the verdict `row` and the rendered `run` (its own run's: none): from its own
    start, or where a later run started before it (its clock was ahead), from that start."""
    if row.run_id == run.id:
        return 0.0
    own = _days(run.started_at, row.started_at)
    later = earliest.get(row.run_id)
    return own if later is None else max(own, _days(run.started_at, later))


@dataclass(frozen=True)
class FleetStanding:
    """The standing of every cell on record, and the matrix's columns and rows it makes."""

    cells: dict[history.CellKey, StandingCell]
    columns: list[Column]  # every node and card on record, in CC order
    rows: list[tuple[str, str, str]]  # (kernel, variant, contract)
    named: dict[tuple[str, str], list[str]]  # (kernel, variant) -> the CCs its latest contract names


def fleet_standing(store: Store, run: Run, stale_after: float) -> FleetStanding:
    """Each cell's latest verdict up to `run` (stale past `stale_after` days), the latest attempt
    where that was infra, and the matrix's columns and rows."""
    standing: dict[history.CellKey, StandingCell] = {}
    latest_verdicts, latest_any = store.standing(run.id)
    earliest = _earliest_after(store.run_starts(run.id))
    for key, row in latest_verdicts.items():
        later = latest_any.get(key)
        infra = later if later is not None and later.id != row.id else None
        age = _age(run, row, earliest)
        standing[key] = StandingCell(row, age, age > stale_after, infra)
    for key, row in latest_any.items():
        if key not in standing:  # never a verdict: show what there is
            age = _age(run, row, earliest)
            standing[key] = StandingCell(row, age, age > stale_after, None)
    latest_snaps = {s.node: s for s in store.latest_snapshots(run.id)}
    by_column: dict[tuple[str, str], list[StandingCell]] = defaultdict(list)
    for (_k, _v, node, device), cell in standing.items():
        by_column[(node, device)].append(cell)
    devices = Counter(node for node, _device in by_column)
    columns = []
    for (node, device), cells in by_column.items():
        newest = max(cells, key=lambda c: c.result.id).result
        columns.append(
            Column(node, device, devices[node] > 1, newest.cc, latest_snaps.get(node), bool(newest.real_gpu))
        )
    columns.sort(key=lambda c: (cc_key(c.cc), c.node, c.device))
    contracts_by_row: dict[tuple[str, str], str] = {}
    named_by_row: dict[tuple[str, str], list[str]] = {}
    for (kernel, variant, _n, _d), cell in sorted(standing.items(), key=lambda item: item[1].result.id):
        contracts_by_row[(kernel, variant)] = cell.result.contract or contracts_by_row.get((kernel, variant), "")
        named_by_row[(kernel, variant)] = cell.result.contract_ccs or named_by_row.get((kernel, variant), [])
    rows = [(k, v, contracts_by_row[(k, v)]) for k, v in sorted(contracts_by_row)]
    return FleetStanding(standing, columns, rows, named_by_row)
