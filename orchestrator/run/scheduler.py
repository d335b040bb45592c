"""Running a plan: nodes in parallel, cells stored as they finish.

The execution policy lives here, apart from the stages. Each node gets a
setup thread (probe, then stage the bundles its cells need) and then up to
`build_jobs` worker threads, each with its own transport (connections are
never shared between threads), that build and inspect in parallel while the
node's GPU slots admit one run per GPU at a time. SSH handshakes are bounded
by `max_connections` per sshd (per host and port, or per jump host, which sees
every handshake through it), so 64 nodes behind one sshd do not trip its
MaxStartups, while 64 machines each with its own sshd connect at once.

Progress goes out through a Listener; the terminal display and the plain log
are listeners, the store is written directly so nothing depends on a display.

FarmRun is the run's lifecycle (stored, stopped, summed up); its work per node is
node_work.py's (what the node's cells then share: node_context.py), its work per cell
cell_work.py's, which hands each cell to its pipeline (stages/).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import __version__
from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import Farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import EXIT_INTERNAL, FarmError
from orchestrator.outcomes import Outcome
from orchestrator.plan import Cell, expect
from orchestrator.revisions import farm_commit
from orchestrator.run import bundle, workers
from orchestrator.run.card_claims import CardClaims
from orchestrator.run.cell import CellResult
from orchestrator.run.cell_work import CELL_ENV, CellWork
from orchestrator.run.node_context import declared_snapshot, default_cache_dir
from orchestrator.run.node_setup import NodeSetup
from orchestrator.run.node_work import NodeWork, NotBegun
from orchestrator.run.slots import GpuSlots, MachineQueues
from orchestrator.run.snapshot import Gpu, NodeSnapshot
from orchestrator.run.stopping import Stopping
from orchestrator.run.summary import Listener, NullListener, RunSummary
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal, journal_folder, journal_mode
from orchestrator.transport import Transport, transport_for
from orchestrator.transport.farm_private import keep_private


class FarmRun(NodeWork, CellWork):
    """One `farm verify`: plan in, stored results out."""

    def __init__(
        self,
        farm: Farm,
        store: Store,
        listener: Listener | None = None,
        trigger: str = "manual",
        cache_dir: Path | None = None,
    ) -> None:
        self.farm = farm
        self.store = store
        self.listener = listener or NullListener()
        self.trigger = trigger
        self.cache_dir = cache_dir or default_cache_dir()
        self._summary_lock = threading.Lock()
        self._stored: set[tuple[str, str, str, str]] = set()  # (node, kernel, variant, device) a worker stored
        self._on_cards: dict[str, list[Cell]] = {}  # a node's cells, one per card model, once probed
        self.token = secrets.token_hex(6)  # FARM_RUN=<token> marks every process this run starts on a node
        self._stopping = Stopping(self._transport, self.token)
        self._cell_count = itertools.count(1)
        self.cells_from = ""  # a worker process's own prefix of its cells' numbers: never another's
        # built once per run, shared by the nodes; toolchains are unpacked once per machine
        self._bundles = bundle.Bundles(default_cache_dir().parent)
        self.node_setup = NodeSetup(farm, self._bundles, self.cache_dir)
        self._begun = threading.Event()  # the run is stored: nodes may store theirs
        self._begin_failed = False  # storing the run failed: its nodes store nothing
        self._slots: dict[tuple, dict[str, GpuSlots]] = {}  # machine -> its anonymous slots, shared by its columns
        self._queues: dict[tuple, MachineQueues] = {}  # machine -> its GPUs' queues, shared by its columns
        self.cards = CardClaims()  # a worker's claims are made in its parent's (workers.py)

    # stopping (stopping.py) -----------------------------------------------
    @property
    def stopping(self) -> str | None:
        """Why the run is being stopped (e.g. "SIGTERM"), or None."""
        return self._stopping.why

    def stop(self, reason: str, grace: float = 10.0) -> int:
        """Stop the run: start no more cells, and kill every process it started on
        every node. Cells cut short are recorded not-run. Returns the number of
        processes killed; waits at most `grace` seconds for the nodes."""
        return self._stopping.stop(reason, grace)

    # what a worker process hears from its parent (workers.py) -----------------
    def halt(self, reason: str) -> None:
        """Start no more cells, killing nothing (the parent's stop() kills on the nodes)."""
        self._stopping.halt(reason)

    @property
    def ended(self) -> bool:
        """The run has returned (stored finished or aborted) or raised."""
        return self._stopping.ended.is_set()

    def began(self, run_id: int) -> None:
        """The run is stored: its nodes may store theirs."""
        self.summary.run_id = run_id
        self._begun.set()

    def not_begun(self, reason: str) -> None:
        """The run could not be stored: its nodes end without storing anything."""
        self._begin_failed = True
        self.halt(reason)
        self._begun.set()

    def add_to_summary(self, stage_seconds: dict[str, float], shipped: int, internal: list[str]) -> None:
        """What a worker's nodes add up to beside their results (which come one by one, `counted`)."""
        with self._summary_lock:
            self.summary.stage_seconds.update(Counter(stage_seconds))
            self.summary.bytes_shipped += shipped
            self.summary.internal.extend(internal)

    def _machine_slots(
        self, node: NodeSpec, snapshot: NodeSnapshot, devices: dict[str, list[Gpu]], slots: dict[str, GpuSlots]
    ) -> tuple[dict[str, list[Gpu]], dict[str, GpuSlots]]:
        """One queue per GPU of a machine's work folder, whichever of its columns (toolchains, or
        names in farm.yaml each with `gpus:` of its own) runs there: their runs take turns on each
        GPU here as well as on the node, and each column runs on its own GPUs only. Columns
        once shared one pool per card model, whose GPUs were the first column's: a second name
        of the machine ran its cells on the first's GPU, which its `gpus:` left out (red-team 163)."""
        machine = (node.transport, node.host, node.port, node.jump, snapshot.hostname, snapshot.workdir)
        with self._summary_lock:
            queues = self._queues.setdefault(machine, MachineQueues())
            shared = self._slots.setdefault(machine, {})
            mine = {
                # a transport that picks the GPU itself (Slurm) has anonymous slots: shared by model
                device: slot.on(queues) if slot.gpus else shared.setdefault(device, slot)
                for device, slot in slots.items()
            }
            return devices, mine

    def _transport(self, name: str) -> Transport:
        return transport_for(name, self.farm.nodes[name], self.token)

    def _cell_marker(self) -> str:
        """The environment every process of the cell gets: its marker, and CELL_ENV."""
        return f"FARM_RUN={self.token} FARM_CELL={self.token}.{self.cells_from}{next(self._cell_count)} {CELL_ENV}"

    # ------------------------------------------------------------------------
    def execute(self, cells: list[Cell], selection: str = "--all") -> RunSummary:
        """Run the cells. The nodes start connecting and probing at once; the run is
        written to the store meanwhile, and a node stores nothing before it is."""
        clock = time.monotonic()
        by_node: dict[str, list[Cell]] = {}
        for cell in cells:
            by_node.setdefault(cell.node, []).append(cell)
        self.summary = RunSummary(run_id=0)
        self._stopping.nodes = list(by_node)
        count = workers.worker_count(self.farm, list(by_node))
        pool: workers.Workers | _InProcess = (
            workers.Workers(self, workers.split(self.farm, by_node, count)) if count > 1 else _InProcess(self, by_node)
        )
        if isinstance(pool, workers.Workers):
            self._stopping.tell = functools.partial(pool.tell, "stop")
        try:
            run_id = self._begin(cells, selection)
        except BaseException as err:
            # the nodes store nothing and start no cell; a run stored half-way is marked aborted
            self.not_begun("the run could not be stored")
            pool.not_begun()
            self._stopping.ended.set()
            if self.summary.run_id:
                with contextlib.suppress(FarmError):
                    code = err.exit_code if isinstance(err, FarmError) else EXIT_INTERNAL
                    self.store.finish_run(self.summary.run_id, "aborted", code)
            raise
        status = "aborted"
        exit_code: int | None = None
        try:
            pool.begun(run_id)
            pool.wait()
            if not self._stopping.is_set():
                self._lost(run_id, cells)
            # a stop that came once every planned cell had its verdict cut nothing short (it was
            # stored aborted, yet exited 0: its exports said incomplete): the run finished
            cut_short = self._stopping.is_set() and (
                self.summary.outcomes[Outcome.NOT_RUN.value] > 0 or bool(self.store.unfinished_cells(run_id))
            )
            status = "aborted" if cut_short else "finished"
            self.summary.stopped = self.stopping if cut_short else None
        except FarmError as err:  # the store or a node broke the run itself: the CLI exits with its code
            exit_code = err.exit_code
            raise
        except BaseException:
            exit_code = EXIT_INTERNAL
            raise
        finally:
            self._stopping.ended.set()
            self.summary.wall_seconds = time.monotonic() - clock
            stored = self.summary.exit_code if exit_code is None else exit_code
            ending: list[FarmError] = []  # the database or the journal failing at the run's end
            try:
                self.store.finish_run(run_id, status, stored)
            except FarmError as err:  # where the run failed already, its own error is the one raised
                ending.append(err)
            try:
                self.store.journal.close()
            except FarmError as err:
                ending.append(err)
        if ending:
            # a run whose end could not be stored is no success, whatever its cells said (a full
            # disk under results.db at the run's end exited 0 with the run left "running")
            raise ending[0]
        self.listener.run_finished(self.summary)
        return self.summary

    def _lost(self, run_id: int, cells: list[Cell]) -> None:
        """Planned cells with no result once every node ended: the farm lost them (a bug;
        a red-team helper found one). Each is stored infra-error saying so, on its card
        and against its node's own snapshot of this run (never as the node failing its
        probe or losing its card), and the run exits 70: a cell the farm never judged
        must neither vanish nor leave the run green."""
        missing = self.store.unfinished_cells(run_id)
        if not missing:
            return
        planned = {(c.kernel, c.variant, c.node): c for c in cells}
        snapshots = {row.node: row for row in self.store.snapshots(run_id)}  # each node's latest
        cards: dict[str, set[str]] = {}  # the card models each node's cells were judged on, or are missing on
        for row in self.store.results(run_id):
            cards.setdefault(row.node, set()).add(row.device or "")
        for _, _, node, device in missing:
            cards.setdefault(node, set()).add(device)
        detail = "internal error in the farm: no result was stored for this planned cell; not a verdict: report it"
        for kernel, variant, node, device in missing:
            row = snapshots.get(node)
            basis = declared_snapshot(node, self.farm)
            card = device or (row.gpu_name if row is not None else "") or ""
            if row is not None and row.cc and card == row.gpu_name:
                with contextlib.suppress(ValueError):
                    basis = replace(basis, gpu_name=row.gpu_name, cc=ComputeCapability.parse(row.cc))
            cell = planned.get((kernel, variant, node), Cell(kernel, variant, node))
            cell = cell.on(card, len(cards[node] - {""}) > 1) if card else cell
            job = self.farm.jobs[kernel]
            result = CellResult(cell=cell, expectation=expect(job, job.spec.variants[variant], basis, basis.cc))
            result.evidence = Evidence(infra_stage="internal", infra_detail=detail)
            result.verdict = classify(result.evidence, result.expectation)
            result.ended_at = datetime.now(UTC)
            snapshot_id = row.id if row is not None else self._store_snapshot(node, None, detail, None, None, 0)
            self._finish(cell, job, result, snapshot_id, None)
            with self._summary_lock:
                self.summary.internal.append(f"node {node!r}: {cell.label} had no result stored")

    def _begin(self, cells: list[Cell], selection: str) -> int:
        """Store the run, its plan and its sources; then let the nodes store theirs."""
        folder = journal_folder(self.farm.database_url, self.farm.root, self.farm.spec.journal)
        self.store.journal = Journal(folder, self.token, journal_mode(self.farm.database_url))
        sources: dict[str, tuple[str, str, bytes]] = {}  # sha256 -> the first file of those contents
        for kernel in dict.fromkeys(c.kernel for c in cells):
            job = self.farm.jobs[kernel]
            for listed, path in job.files.items():
                sha = job.file_sha256[listed]
                if sha not in sources and (content := _bytes_of(path, sha)) is not None:
                    sources[sha] = (sha, listed, content)
        run_id = self.store.begin_run(
            planned=[(c.kernel, c.variant, c.node, c.device) for c in cells],
            sources=list(sources.values()),
            token=self.token,
            trigger=self.trigger,
            farm_commit=farm_commit(self.farm.root),
            farm_version=__version__,
            host=socket.gethostname(),
            config_file=str(self.farm.file),
            selection=selection,
            cell_env=CELL_ENV.strip(),
        )
        self.summary.run_id = run_id
        self.listener.run_started(run_id, cells)
        self._begun.set()
        return run_id

    def _when_begun(self) -> None:
        """Wait until the run is stored; a run that could not be stored ends the node."""
        self._begun.wait()
        if self._begin_failed:
            raise NotBegun


class _InProcess:
    """The nodes in threads of the farm's own process (a small fleet: no worker's start to pay)."""

    def __init__(self, run: FarmRun, by_node: dict[str, list[Cell]]) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max(len(by_node), 1), thread_name_prefix="node")
        self.futures = [self.pool.submit(run._node_guarded, n, c) for n, c in by_node.items()]

    def begun(self, run_id: int) -> None:
        pass  # the nodes wait on the run's own event

    def not_begun(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def wait(self) -> None:
        with self.pool:
            for future in self.futures:
                future.result()


def run_cells(farm: Farm, store: Store, cells: Iterable[Cell], **kwargs) -> RunSummary:
    listener = kwargs.pop("listener", None)
    selection = kwargs.pop("selection", "--all")
    cells = list(cells)
    if any(farm.nodes[c.node].transport == "local" for c in cells):
        # this process too, before any worker forks: it holds the database, where a worker may run
        # the local node (farm_private.py: its kernels are this process's user)
        keep_private()
    return FarmRun(farm, store, listener=listener, **kwargs).execute(cells, selection)


def _bytes_of(path: Path, sha: str) -> bytes | None:
    """The file's bytes where they are still those hashed at the load: an edit saved since kept
    other bytes in the database under the certified sha256 (red-team round 156). None otherwise
    (or where it is gone): the node's staging finds the change and the cell says so."""
    try:
        content = path.read_bytes()
    except OSError:
        return None
    return content if hashlib.sha256(content).hexdigest() == sha else None
