"""Everything the report and the exports show, gathered from the store in a few queries: a run's
cells, what changed against earlier runs, node probe history and the certification ledger.
Pages and exports only format this model.

What is read is bounded by the rendered run, not by the history on record: its own cells,
each cell's last few earlier results, the last GRID_RUNS runs' outcomes (the kernel pages'
grids) and the last HISTORY_RUNS runs' counts. The fleet's standing (each cell's latest
verdict from any run) and the ledger's counts of certifying passes are over all history by
definition, aggregated in the database from indexes (store/queries.py, store/certifying.py).
Logs: the full cells' only.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from orchestrator.config.farm import Farm
from orchestrator.errors import StoreError
from orchestrator.farm_writable import ledger_flags
from orchestrator.outcomes import RAN_AS_EXPECTED, Outcome, is_as_expected, is_infra
from orchestrator.report import fleet, history, ledger
from orchestrator.report.card_heads import gone_cards
from orchestrator.report.certificates import certificates
from orchestrator.report.kernel_inputs import KernelInputs, current_inputs
from orchestrator.report.no_verdict import NoVerdict, no_verdict
from orchestrator.report.rejudged import flag_ledgers, rejudged
from orchestrator.report.standing import Column, StandingCell, category, cc_key, fleet_standing
from orchestrator.report.trends import Series, trend_series
from orchestrator.report.unrun import UnrunNode, unrun_nodes
from orchestrator.store.database import Store
from orchestrator.store.queries import BISECT_TRIGGER
from orchestrator.store.tables import NodeSnapshotRow, Run
from orchestrator.terminal import card_text

HISTORY_RUNS = 30  # runs in history.html, each with its own page
GRID_RUNS = 10  # runs (columns) in a kernel page's history grid


def unconfirmed(r: Any) -> bool:
    """An as-expected verdict on a card the kernel ran on that the NVIDIA driver did not
    confirm (a stand-in nvidia-smi, or one that misreports its card): it certifies
    nothing, so no page shows it green nor an export counts it a plain pass. So too one that
    ran unconfined on the farm's own machine (farm_writable.py says why, certifies_nothing_why), and
    one of inputs the farm did not all identify (no identity: it never certified, review 146)."""
    ran = r.outcome in RAN_AS_EXPECTED  # its SQL form: store.certifying.unconfirmed_rule
    return ran and bool(r.device) and (not r.real_gpu or bool(r.farm_writable) or not r.identity)


def cell_label(key: history.CellKey, several: bool) -> str:
    kernel, variant, node, device = key
    # the card as terminal.card_text shows it, as the column heads do (review 213)
    return f"{kernel}:{variant}@{node}" + (f"[{card_text(device)}]" if several and device else "")


@dataclass
class ReportModel:
    run: Run
    runs: list[Run]  # newest first, at most HISTORY_RUNS, including `run`
    results: list[Any]  # the run's cells: full rows, or light ones (collect(full=False))
    snapshots: list[NodeSnapshotRow]  # the run's node snapshots
    changes: dict[history.CellKey, history.Change]
    # cell -> (run, outcome, result id) in the last GRID_RUNS runs, oldest first
    cell_history: dict[history.CellKey, list[tuple[int, str, int]]]
    run_counts: dict[int, dict[str, int]]  # run -> good/bad/infra counts
    run_cells: dict[int, dict[history.CellKey, tuple[str, int]]]  # the run's cell -> (outcome, result id)
    node_history: dict[str, list[NodeSnapshotRow]]  # node -> snapshots, oldest first
    ledgers: list[ledger.KernelLedger]
    counts: dict[str, int] = field(default_factory=dict)
    columns: list[Column] = field(default_factory=list)  # the fleet's standing: every node and card on record
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (kernel, variant, contract)
    standing: dict[history.CellKey, StandingCell] = field(default_factory=dict)
    stale_after_days: float = 30.0
    unconfirmed_ids: set[int] = field(default_factory=set)  # recent results that certify nothing (unconfirmed)
    waived_ids: set[int] = field(default_factory=set)  # recent passes judged with the CUDA-error rule waived
    unfinished_runs: dict[int, str] = field(default_factory=dict)  # run -> status, every run that did not finish
    # kernel -> its inputs' identity now (current_inputs): a standing cell of other inputs is flagged
    identities: dict[str, str] = field(default_factory=dict)
    # standing cell -> why the jobs now would not judge its verdict so (rejudged.py): never green
    rejudged: dict[history.CellKey, str] = field(default_factory=dict)
    departed: dict[str, str] = field(default_factory=dict)  # node -> why it left the fleet (fleet.py): never green
    # (node, card) -> why the node's latest probe no longer finds that card (card_heads.py): as departed
    gone_cards: dict[tuple[str, str], str] = field(default_factory=dict)
    unrun: list[UnrunNode] = field(default_factory=list)  # the farm file's nodes with no column (unrun.py)
    # result id (of the run's cells) -> its cell's last history.WINDOW earlier results, oldest first
    previous: dict[int, list[tuple[int, str, int]]] = field(default_factory=dict)
    # under "what changed": the run's metrics regressed or without a value, and moved instruction counts
    speed: list[Any] = field(default_factory=list)
    sass_moves: list[history.SassMove] = field(default_factory=list)
    # kernel -> metric -> each cell's values over the report's runs (the kernel pages' trends)
    trends: dict[str, dict[str, list[Series]]] = field(default_factory=dict)
    # result id (of the run's cells) -> its metric values (light rows of metric_values), in name order
    measured: dict[int, list[Any]] = field(default_factory=dict)
    # cells (kernel, variant, node, device) a run planned and has no result for (a run still running,
    # or one whose farm died): not-run in the exports' counts
    unfinished: list[tuple[str, str, str, str]] = field(default_factory=list)
    no_verdict: list[NoVerdict] = field(default_factory=list)  # the run's cells without one, by cause
    # run -> its not-run results (of its "infra"): a run page tells a stop's cells from a broken node's (review 259)
    run_not_run: dict[int, int] = field(default_factory=dict)
    # (how many, the latest) of the fleet's runs newer than `run`: its report is as of its end, and says so
    newer: tuple[int, int] | None = None

    @property
    def grid_run_ids(self) -> set[int]:
        """The runs whose every cell is in cell_history: the last GRID_RUNS."""
        return {r.id for r in self.runs[:GRID_RUNS]}

    @functools.cached_property
    def several(self) -> set[str]:
        """Nodes with several card models: their labels name the card (computed once)."""
        seen: dict[str, set[str]] = defaultdict(set)
        for column in self.columns:
            seen[column.node].add(column.device)
        for r in self.results:
            seen[r.node].add(r.device)
        return {node for node, devices in seen.items() if len(devices) > 1}

    def left(self, node: str, device: str) -> str | None:
        """Why a column is no longer the fleet's: its node left it (fleet.py), or the node's probe
        no longer finds its card (card_heads.gone_cards). A card swapped under the node's name
        stayed green where a node renamed for it was greyed (review 240)."""
        if gone := self.departed.get(node):
            return f"node {node} left the fleet: {gone}"
        if card := self.gone_cards.get((node, device)):
            return f"the node's card is gone: {card}"
        return None

    def label(self, key: history.CellKey) -> str:
        return cell_label(key, key[2] in self.several)

    @property
    def listed_changes(self) -> list[history.Change]:
        order = {name: i for i, name in enumerate(history.LISTED)}
        picked = [c for c in self.changes.values() if c.change in order]
        return sorted(picked, key=lambda c: (order[c.change], self.label(c.key)))

    @property
    def ledger_flags(self) -> list[tuple[str, str, str]]:
        return [(entry.kernel, kind, text) for entry in self.ledgers for kind, text in entry.flags]


_run_then_id = itemgetter(0, 2)  # of (run, outcome, result id)


def collect(
    store: Store,
    run_id: int | None = None,
    farm: Farm | None = None,
    history_runs: int = HISTORY_RUNS,
    full: bool = True,
) -> ReportModel:
    """The model of one run's report (default: the latest run). `full=False`
    gives the run's results as light rows (id, run_id, kernel, variant, node,
    device, outcome): the site reads whole rows only for the pages it writes."""
    run = store.run(run_id) if run_id is not None else store.latest_run(bisections=False)  # the fleet's latest
    if run is None:
        which = f"run {run_id}" if run_id is not None else "run but a bisection's (--run N shows one)"
        raise StoreError(f"no {which} in {store.redacted_url}: run `farm verify` first")
    # the fleet's runs: a bisection's old commits flipped a red cell's grid and "what changed"; its own report
    # (--run N) shows its run before them
    runs = store.runs(limit=history_runs, upto=run.id, bisections=False)
    runs = runs if run.trigger != BISECT_TRIGGER else [run, *runs[: history_runs - 1]]
    # an older run's report (--run N) is as of its end: its ledger counted every later run's passes (review
    # 200). Cut by run id (a dead run completed from its journal later has higher result ids); the latest's
    # is not cut, as a bisection's runs after it are on record now too
    newer = store.newer_runs(run.id) if run_id is not None else None
    upto = run.id if newer else None
    run_ids = [r.id for r in runs]
    # The last runs' outcomes, read once from the index: the run's own cells, the kernel pages' grids
    # (GRID_RUNS runs) and each cell's earlier results (one run more than history.WINDOW: all of them).
    recent = store.run_matrix(run_ids[: max(GRID_RUNS, history.WINDOW + 1)])
    this_run = run.id  # an ORM attribute: read once, not per row
    light = [row for row in recent if row[1] == this_run]  # by position: a Row's attributes cost more
    results: list[Any] = store.results(run.id) if full else light
    snapshots = store.snapshots(run.id)

    # each run's counts: those whose rows were just read, counted here; the others in the database
    read = set(run_ids[: max(GRID_RUNS, history.WINDOW + 1)])
    tallies: dict[int, dict[str, int]] = {rid: defaultdict(int) for rid in read}
    for _id, past, _k, _v, _n, _d, outcome in recent:
        tallies[past][outcome] += 1
    tallies.update(store.run_outcome_counts([rid for rid in run_ids if rid not in read]))
    run_counts: dict[int, dict[str, int]] = {}
    for rid in run_ids:
        run_counts[rid] = {"good": 0, "bad": 0, "infra": 0}
        for outcome, n in tallies[rid].items():
            run_counts[rid][category(outcome)] += n
    run_cells = {run.id: {(k, v, n, d): (outcome, i) for i, _run, k, v, n, d, outcome in light}}
    by_cell: dict[history.CellKey, list[tuple[int, str, int]]] = defaultdict(list)
    in_grid: dict[history.CellKey, list[tuple[int, str, int]]] = defaultdict(list)
    grid_runs = set(run_ids[:GRID_RUNS])
    # in id order: oldest first; unpacked as tuples (a Row's attributes cost more, times 10^4)
    for rid, past, kernel, variant, node, device, outcome in recent:
        key = (kernel, variant, node, device)
        entry = (past, outcome, rid)
        by_cell[key].append(entry)
        if past in grid_runs:
            in_grid[key].append(entry)
    cell_history = dict(in_grid)
    # "what changed" compares each cell with its previous results, whichever runs they came from:
    # the last history.WINDOW before the run, in run order. Every result before the runs read
    # above is older than those read, so a cell with that many among them has them all; the
    # others (new cells, cells left out of some runs) are looked up alone.
    previous: dict[int, list[tuple[int, str, int]]] = {}
    missing = []
    cells = [(rid, (k, v, n, d), outcome) for rid, _run, k, v, n, d, outcome in light]  # tuples, once
    for rid, key, _outcome in cells:
        earlier_results = sorted([e for e in by_cell[key] if e[0] < this_run], key=_run_then_id)
        if len(earlier_results) >= history.WINDOW:
            previous[rid] = earlier_results[-history.WINDOW :]
        else:
            missing.append(rid)
    previous.update(store.previous_results(result_ids=missing, per_cell=history.WINDOW) if missing else {})
    current = [(key, outcome) for _rid, key, outcome in cells]
    earlier = {
        key: [(past, outcome) for past, outcome, _res in previous[rid]]
        for rid, key, _outcome in cells
        if rid in previous
    }
    changes = history.changes(current, earlier)
    before = {rid: found for rid, _k, _o in cells if (found := history.built_before(previous.get(rid, []))) is not None}
    counts = store.sass_counts([rid for rid, _k, _o in cells] + [e[2] for e in before.values()])
    sass = history.sass_moves([(key, rid) for rid, key, _outcome in cells], previous, counts)
    # the kernel pages' trends, over the runs of their history grids
    trend_rows = store.metric_trends(run_ids[:GRID_RUNS])

    node_history: dict[str, list[NodeSnapshotRow]] = defaultdict(list)
    for snap in store.snapshots_of(run_ids):
        node_history[snap.node].append(snap)

    # the fleet's standing: the latest verdict of every cell on record, from any run
    stale_after = farm.spec.stale_after_days if farm is not None else 30.0
    fleet_now = fleet_standing(store, run, stale_after)
    standing, columns, rows, named_by_row = fleet_now.cells, fleet_now.columns, fleet_now.rows, fleet_now.named

    latest_by_kernel = {r.kernel: r for r in store.latest_identified(run.id, sorted({k for k, _v, _n, _d in standing}))}
    now_inputs = current_inputs(store, farm, latest_by_kernel)
    contracts: dict[str, set[str]] = defaultdict(set)  # kernel -> the CCs its contracts name
    for kernel, variant, _contract in rows:
        contracts[kernel].update(named_by_row[(kernel, variant)])
        # on record, but no result identifies its inputs and no configuration is at hand
        now_inputs.setdefault(kernel, KernelInputs(kernel, "", b"", {}, {}))
    # A ledger shows, per identity and CC, the first and the latest certificate with their
    # evidence, and how many there are: counted in the database, full rows for those shown only.
    # the days passes ran on matter only where a header claims VERIFIED on a date (ledger.build)
    claimed = [
        (kernel, found.identity)
        for kernel, found in now_inputs.items()
        if any(claim.status == "VERIFIED" for claim in ledger.header_claims(found.source))
    ]
    groups, days = store.certifying_groups(claimed, upto)
    shown_ids = sorted({i for g in groups for i in (g.first_id, g.last_id)})
    dates: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for kernel, identity, cc, day in days:
        dates[(kernel, identity, cc)].add(day)
    records = ledger.CertificateRecord(
        counts={(g.kernel, g.identity, g.cc): g.passes for g in groups},
        dates=dict(dates),
    )
    certs = certificates(store, shown_ids)  # with their runs' farm commits
    # per kernel, in cell order: the standing cells that fail now on real hardware where they must pass
    # (a sanitizer's errors, wrong numbers, a crash; not the node's infra), with their identity
    faulted: dict[str, list[tuple[str | None, tuple[str, str, str, int, str, str]]]] = defaultdict(list)
    for (k, _v, _n, _d), c in sorted(standing.items()):
        r = c.result
        # a perf-regression passed its numbers: slower, still correct (it certifies)
        bad = not is_as_expected(r.outcome) and not is_infra(r.outcome) and r.outcome != "perf-regression"
        if bad and r.real_gpu and r.expected == "pass":
            faulted[k].append((r.identity, (r.variant, r.node, r.cc or "", r.id, r.reason, r.outcome)))
    ledgers = [
        ledger.build(
            kernel,
            found.path,
            found.identity,
            found.source,
            certs.get(kernel, []),
            sorted(contracts[kernel], key=cc_key),
            records,
            found.files,
            found.dependencies,
            [shown for identity, shown in faulted.get(kernel, []) if identity == found.identity],
        )
        for kernel, found in sorted(now_inputs.items())
    ]
    # the current inputs' passes that ran unconfined on the farm's own machine: why they certify nothing
    identified = [(k, found.identity) for k, found in now_inputs.items() if found.identity]
    unbacked = store.farm_writable_passes(identified, upto)
    for kl in ledgers:
        kl.flags += ledger_flags([p for p in unbacked if p.kernel == kl.kernel])
    run_metrics = store.metric_values(run_id=run.id)
    measured: dict[int, list[Any]] = defaultdict(list)  # read once: "what changed" and the cell pages
    for m in run_metrics:
        measured[m.result_id].append(m)
    counts = {"good": 0, "bad": 0, "infra": 0}
    for row in light:
        counts[category(row.outcome)] += 1
    gone = fleet.departed(store, farm, columns)
    swapped = gone_cards(columns)
    model = ReportModel(
        run=run,
        runs=runs,
        results=results,
        snapshots=snapshots,
        changes=changes,
        cell_history=cell_history,
        unconfirmed_ids=store.unconfirmed_results(run_ids[: max(GRID_RUNS, history.WINDOW + 1)]),
        waived_ids=store.waived_results(run_ids[: max(GRID_RUNS, history.WINDOW + 1)]),
        unfinished_runs=store.unfinished_runs(),
        run_counts=run_counts,
        run_cells=run_cells,
        node_history=dict(node_history),
        ledgers=fleet.flag_departed(flag_ledgers(farm, ledgers, now_inputs), gone, swapped),
        departed=gone,
        gone_cards=swapped,
        unrun=unrun_nodes(farm, columns),
        counts=counts,
        columns=columns,
        rows=rows,
        standing=standing,
        rejudged=rejudged(farm, standing, now_inputs),
        stale_after_days=stale_after,
        identities={kernel: found.identity for kernel, found in now_inputs.items() if found.identity},
        previous=previous,
        speed=[m for m in run_metrics if m.regressed or m.value is None],
        measured=measured,
        sass_moves=sass,
        # a finished run too: a planned cell with no result leaves it incomplete (exports, summary)
        unfinished=store.unfinished_cells(run.id),
        no_verdict=no_verdict(store, light),
        run_not_run={rid: tallies[rid].get(Outcome.NOT_RUN.value, 0) for rid in run_ids},
        newer=newer,
    )
    model.trends = trend_series(trend_rows, model.several)
    return model
