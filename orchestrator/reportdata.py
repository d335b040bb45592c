"""Everything the report and the exports show, gathered from the store in a few
queries: a run's cells, what changed against earlier runs, node probe history
and the certification ledger. Pages and exports only format this model.

Only light columns are read for history (never logs), so a database of
64 nodes x 50 variants x 30 runs gathers in well under a second.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import history, ledger
from .config import Farm
from .errors import StoreError
from .outcomes import is_as_expected, is_infra
from .store import Store
from .tables import NodeSnapshotRow, ResultRow, Run

HISTORY_RUNS = 30


def utc_iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC; SQLite hands stored UTC times back without a zone."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def utc_date(moment: datetime) -> str:
    return (utc_iso(moment) or "")[:10]


def category(outcome: str) -> str:
    if is_infra(outcome):
        return "infra"
    return "good" if is_as_expected(outcome) else "bad"


@dataclass
class ReportModel:
    run: Run
    runs: list[Run]  # newest first, at most HISTORY_RUNS, including `run`
    results: list[ResultRow]  # the run's cells, full rows
    snapshots: list[NodeSnapshotRow]  # the run's node snapshots
    changes: dict[history.CellKey, history.Change]
    cell_history: dict[history.CellKey, list[tuple[int, str, int]]]  # (run, outcome, result id), oldest first
    run_counts: dict[int, dict[str, int]]  # run -> good/bad/infra counts
    run_cells: dict[int, dict[history.CellKey, tuple[str, int]]]  # run -> cell -> (outcome, result id)
    node_history: dict[str, list[NodeSnapshotRow]]  # node -> snapshots, oldest first
    ledgers: list[ledger.KernelLedger]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def listed_changes(self) -> list[history.Change]:
        order = {name: i for i, name in enumerate(history.LISTED)}
        picked = [c for c in self.changes.values() if c.change in order]
        return sorted(picked, key=lambda c: (order[c.change], c.label))

    @property
    def ledger_flags(self) -> list[tuple[str, str, str]]:
        return [(entry.kernel, kind, text) for entry in self.ledgers for kind, text in entry.flags]


_CONTRACT_CC = re.compile(r"(\d+\.\d+)")


def _planned_ccs(contracts: set[str]) -> list[str]:
    return sorted({cc for c in contracts for cc in _CONTRACT_CC.findall(c)})


def current_sources(store: Store, farm: Farm | None, results: list[ResultRow]) -> dict[str, tuple[str, str, bytes]]:
    """kernel -> (path, sha256, bytes) of the source as it is now: on disk when the
    farm's configuration is at hand (so an edit shows as a stale certificate at
    once), else as the rendered run recorded it."""
    sources: dict[str, tuple[str, str, bytes]] = {}
    if farm is not None:
        for kernel, job in farm.jobs.items():
            listed = job.spec.sources[0]
            data = Path(job.source_paths[0]).read_bytes()
            sources[kernel] = (listed, hashlib.sha256(data).hexdigest(), data)
    for row in results:
        if row.kernel not in sources:
            stored = store.source(row.source_sha256)
            path = next(iter(row.sources), row.kernel)
            sources[row.kernel] = (path, row.source_sha256, stored.content if stored else b"")
    return sources


def collect(
    store: Store,
    run_id: int | None = None,
    farm: Farm | None = None,
    history_runs: int = HISTORY_RUNS,
) -> ReportModel:
    run = store.run(run_id) if run_id is not None else store.latest_run()
    if run is None:
        which = f"run {run_id}" if run_id is not None else "run"
        raise StoreError(f"no {which} in {store.redacted_url}: run `farm verify` first")
    runs = store.runs(limit=history_runs, upto=run.id)
    run_ids = [r.id for r in runs]
    results = store.results(run.id)
    snapshots = store.snapshots(run.id)

    light = store.result_summaries(run_ids)
    cell_history: dict[history.CellKey, list[tuple[int, str, int]]] = defaultdict(list)
    run_counts: dict[int, dict[str, int]] = {rid: {"good": 0, "bad": 0, "infra": 0} for rid in run_ids}
    run_cells: dict[int, dict[history.CellKey, tuple[str, int]]] = defaultdict(dict)
    for row in light:
        key = (row.kernel, row.variant, row.node)
        cell_history[key].append((row.run_id, row.outcome, row.id))
        run_counts[row.run_id][category(row.outcome)] += 1
        run_cells[row.run_id][key] = (row.outcome, row.id)
    for entries in cell_history.values():
        entries.sort()
    earlier = {
        key: [(rid, outcome) for rid, outcome, _ in entries if rid < run.id] for key, entries in cell_history.items()
    }
    current = [((r.kernel, r.variant, r.node), r.outcome) for r in results]
    changes = history.changes(current, earlier)

    node_history: dict[str, list[NodeSnapshotRow]] = defaultdict(list)
    for snap in store.snapshots_of(run_ids):
        node_history[snap.node].append(snap)

    sources = current_sources(store, farm, results)
    contracts: dict[str, set[str]] = defaultdict(set)
    for row in results:
        contracts[row.kernel].add(row.contract)
    # A ledger shows, per source bytes and CC, the first and the latest certificate
    # with their evidence, and how many there are: light rows for all, full rows
    # (logs included) for those shown only.
    passes = store.certifying_passes()
    groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for row in passes:
        groups[(row.kernel, row.source_sha256, row.cc)].append(row)
    shown_ids = sorted({rows[i].id for rows in groups.values() for i in (0, -1)})
    records = ledger.CertificateRecord(
        counts={key: len(rows) for key, rows in groups.items()},
        dates={key: {utc_date(r.started_at) for r in rows} for key, rows in groups.items()},
    )
    certs: dict[str, list[ledger.Certificate]] = defaultdict(list)
    for result, snap in store.results_with_snapshots(shown_ids):
        certs[result.kernel].append(
            ledger.Certificate(
                result_id=result.id,
                run_id=result.run_id,
                when=result.started_at,
                source_sha256=result.source_sha256,
                variant=result.variant,
                node=result.node,
                gpu=snap.gpu_name or "",
                cc=snap.cc or "",
                driver=snap.driver,
                nvcc=snap.nvcc_version,
                build_command=result.build_command,
                code_path=result.code_path,
                output=(result.stdout or b"").decode("utf-8", "replace"),
            )
        )
    ledgers = [
        ledger.build(kernel, path, sha, data, certs.get(kernel, []), _planned_ccs(contracts[kernel]), records)
        for kernel, (path, sha, data) in sorted(sources.items())
    ]
    counts = {"good": 0, "bad": 0, "infra": 0}
    for row in results:
        counts[category(row.outcome)] += 1
    return ReportModel(
        run=run,
        runs=runs,
        results=results,
        snapshots=snapshots,
        changes=changes,
        cell_history=dict(cell_history),
        run_counts=run_counts,
        run_cells=dict(run_cells),
        node_history=dict(node_history),
        ledgers=ledgers,
        counts=counts,
    )


def result_record(row: ResultRow, snap: NodeSnapshotRow | None) -> dict[str, Any]:
    """One cell as plain data (the JSON export's shape)."""
    return {
        "id": row.id,
        "kernel": row.kernel,
        "variant": row.variant,
        "node": row.node,
        "gpu": snap.gpu_name if snap else None,
        "cc": snap.cc if snap else None,
        "driver": snap.driver if snap else None,
        "nvcc": snap.nvcc_version if snap else None,
        "real_gpu": bool(snap and snap.real_gpu),
        "contract": row.contract,
        "expected": row.expected,
        "outcome": row.outcome,
        "failed_stage": row.failed_stage,
        "reason": row.reason,
        "exit_code": row.exit_code,
        "known_failure_reason": row.known_failure_reason,
        "source_sha256": row.source_sha256,
        "sources": row.sources,
        "binary_sha256": row.binary_sha256,
        "build_command": row.build_command,
        "build_cached": row.build_cached,
        "instruction_counts": row.instruction_counts,
        "required_instructions": row.required_instructions,
        "elf_targets": row.elf_targets,
        "ptx_targets": row.ptx_targets,
        "code_path": row.code_path,
        "stage_seconds": row.stage_seconds,
        "started_at": utc_iso(row.started_at),
        "ended_at": utc_iso(row.ended_at),
    }
