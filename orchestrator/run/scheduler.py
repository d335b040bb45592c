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
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import secrets
import shlex
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from orchestrator import __version__
from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import Farm, Job
from orchestrator.config.schema import NodeSpec
from orchestrator.errors import (
    EXIT_INTERNAL,
    FarmError,
    InfraError,
    NodeUnusable,
    StoreError,
)
from orchestrator.outcomes import CELL_STAGES, Outcome
from orchestrator.plan import Cell, expect
from orchestrator.revisions import farm_commit
from orchestrator.run import bundle, toolchain, workers
from orchestrator.run.bundle import Placed, Staging
from orchestrator.run.cell import CellPaths, CellResult, StageRecord, cell_paths
from orchestrator.run.health import NodeHealth
from orchestrator.run.node_setup import NodeSetup
from orchestrator.run.probe import Gpu, NodeSnapshot
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.slots import GpuSlots
from orchestrator.run.stages import CellPipeline
from orchestrator.run.stopping import Stopping
from orchestrator.run.summary import Listener, NullListener, RunSummary
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal, journal_folder
from orchestrator.store.location import sqlite_file
from orchestrator.store.records import AttemptRecord, attempt_record, result_metrics, result_record, snapshot_record
from orchestrator.transport import Transport, transport_for
from orchestrator.transport.base import reap

LEFT_BEHIND_TIMEOUT = 30.0  # seconds for killing what an interrupted try left, before its retry


# A cell's PTX is compiled afresh each time it runs (CUDA_CACHE_DISABLE): the node's JIT
# cache would hand the kernel code the farm never saw, written there by any earlier
# process of the login, and a run's seconds would depend on whether that machine had
# compiled it before (a fresh machine's first run: perf-regression against warm ones).
# The run records it (runs.cell_env): a metric's values judge only those measured under the same.
CELL_ENV = "CUDA_CACHE_DISABLE=1 "


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "farm" / "archives"


def declared_snapshot(name: str, farm: Farm) -> NodeSnapshot:
    """What farm.yaml says of a node, for cells whose node could not be probed."""
    node = farm.nodes[name]
    return NodeSnapshot(
        node=name,
        workdir="",
        hostname="",
        os="",
        gpu_name=node.gpu,
        cc=node.declared_cc,
        driver=None,
        memory=None,
        gpu_count=0,
        nvcc_path=node.nvcc,
        nvcc_version=None,
        smi_output="",
        declared_gpu=node.gpu,
        declared_cc=node.declared_cc,
    )


T = TypeVar("T")


def in_background(action: Callable[[], T], name: str) -> Future[T]:
    """`action` run in a thread of its own: its result, or its error, in the Future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(action())
        except BaseException as err:  # handed to whoever waits on it
            future.set_exception(err)

    threading.Thread(target=run, daemon=True, name=name).start()
    return future


@dataclass
class NodeContext:
    """What a node's cells share once it is probed and staged."""

    stage_record: StageRecord  # the node's staging, shown on each cell with what concerned it
    snapshot: NodeSnapshot
    stored: Future[int]  # the node's snapshot row, stored beside its first cells (snapshot_id)
    staging: Staging
    devices: dict[str, list[Gpu]]  # card model -> its GPUs ({"": []} without a GPU)
    slots: dict[str, GpuSlots]  # card model -> its free GPUs
    cuobjdump: str
    health: NodeHealth
    setup: Transport
    lock: threading.Lock = field(default_factory=threading.Lock)
    build_locks: dict[str, threading.Lock] = field(default_factory=dict)  # build folder -> its lock
    built: dict[str, str] = field(default_factory=dict)  # build key -> binary sha256 built in this run
    # build key -> its binary as the store had it at the start, read beside the first cells
    recorded: Future[dict[str, str | None]] = field(default_factory=Future)
    down_since: float | None = None  # monotonic time the node was first found unreachable, while it is
    shared_builds: set[tuple[str, str]] = field(default_factory=set)  # (kernel, variant) of cells of several cards
    unswept: bool = False  # a cell may have left its folder on the node (its pipeline could not remove it)
    resident: ResidentRunner | None = None  # the node's python3 serving all of its cells

    @property
    def snapshot_id(self) -> int:
        """The node's snapshot row, once stored; the store's error, where it failed."""
        return self.stored.result()

    def build_lock(self, build_dir: str) -> threading.Lock:
        with self.lock:
            return self.build_locks.setdefault(build_dir, threading.Lock())


def node_devices(transport: Transport, snapshot: NodeSnapshot) -> tuple[dict[str, list[Gpu]], dict[str, GpuSlots]]:
    """The node's card models and a slot pool for each. A transport that does not
    let the farm pin a GPU (Slurm places its jobs) gets anonymous slots."""
    if not snapshot.has_gpu:
        return {"": []}, {"": GpuSlots(anonymous=1)}
    if not transport.pins_gpus:
        name = snapshot.gpu_name or ""
        return {name: list(snapshot.gpus)}, {name: GpuSlots(anonymous=max(snapshot.gpu_count, 1))}
    devices = snapshot.devices()
    return devices, {name: GpuSlots(gpus, on_node=snapshot.flock) for name, gpus in devices.items()}


class FarmRun:
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
        self._slots: dict[tuple, dict[str, GpuSlots]] = {}  # machine -> its GPUs' queues, shared by its columns

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
        """One queue per GPU of a machine, whichever of its columns (toolchains) runs
        there: their runs take turns on each GPU here as well as on the node."""
        machine = (node.transport, node.host, node.port, node.jump, snapshot.hostname, snapshot.workdir)
        with self._summary_lock:
            shared = self._slots.setdefault(machine, {})
            for device, queue in slots.items():  # a card one column's probe saw and another's did not
                shared.setdefault(device, queue)
            return devices, shared

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
        self.store.journal = Journal(folder, self.token)
        sources: dict[str, tuple[str, str, bytes]] = {}  # sha256 -> the first file of those contents
        for kernel in dict.fromkeys(c.kernel for c in cells):
            job = self.farm.jobs[kernel]
            for listed, path in job.files.items():
                sha = job.file_sha256[listed]
                if sha not in sources:
                    sources[sha] = (sha, listed, path.read_bytes())
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
            raise _NotBegun

    # per node ------------------------------------------------------------------
    def run_nodes(self, by_node: dict[str, list[Cell]]) -> None:
        """Every node in a thread of its own (a worker process's whole job)."""
        self._stopping.nodes = list(by_node)  # what a stop kills on
        with ThreadPoolExecutor(max_workers=max(len(by_node), 1), thread_name_prefix="node") as pool:
            for future in [pool.submit(self._node_guarded, n, c) for n, c in by_node.items()]:
                future.result()

    def _node_guarded(self, name: str, cells: list[Cell]) -> None:
        try:
            self._node(name, cells)
        except _NotBegun:
            return
        except StoreError:
            # nothing more can be stored: stop the other nodes too, at once
            threading.Thread(target=self.stop, args=("the results database failed",), daemon=True).start()
            raise
        except Exception as err:  # a bug in the farm: it stays with this node, the others go on
            self.node_broke(name, cells, err)

    def node_broke(self, name: str, cells: list[Cell], err: Exception) -> None:
        """A node's thread raised what no stage expects: print the traceback (it is
        the farm's bug, to be reported), record the node's unfinished cells as
        infra-error with the cause, and make the run exit 70."""
        detail = f"internal error in the farm ({type(err).__name__}: {err}); not a verdict: please report it"
        print(f"farm: internal error on node {name!r}:", file=sys.stderr)
        traceback.print_exception(err, file=sys.stderr)
        with self._summary_lock:
            self.summary.internal.append(f"node {name!r}: {type(err).__name__}: {err}")
            # whole cells: a column of a machine (its card, `device`) is a cell of its own (a node's
            # T4 cell stored took its H100 cell of the same variant with it: a red-team finding)
            done = {(c.kernel, c.variant, c.device) for c, _, _ in self.summary.results if c.node == name}
            done |= {(kernel, variant, device) for node, kernel, variant, device in self._stored if node == name}
            cells = self._on_cards.get(name, cells)  # the node's cells per card, once its probe said its cards
        # a cell planned before the probe (no card yet) is done where any card's was (a worker's node)
        done_variants = {(kernel, variant) for kernel, variant, _ in done}
        left = [
            c
            for c in cells
            if (c.kernel, c.variant, c.device) not in done and (c.device or (c.kernel, c.variant) not in done_variants)
        ]
        if left:
            self._node_failed(name, left, None, "internal", detail, [])

    def _open(self, transport: Transport) -> None:
        self.node_setup.open(transport)

    def _node(self, name: str, cells: list[Cell]) -> None:
        """Probe and stage (retrying infra failures), then run the node's cells."""
        node = self.farm.nodes[name]
        spec = self.farm.spec
        health = NodeHealth(spec.retries, spec.retry_backoff, spec.unhealthy_after)
        attempt = 0
        while True:
            attempt += 1
            if self.stopping:
                self._node_stopped(name, cells)
                return
            setup = self._transport(name)
            records: list[StageRecord] = []
            partial: list[NodeSnapshot] = []
            resident: list[ResidentRunner] = []  # the runner that answered the probe, serving the cells next
            try:
                staging = self.node_setup.setup(setup, cells, records, partial, resident)
            except BaseException as err:
                for runner in resident:  # its channel would keep the node's connection open
                    runner.close()
                setup.close()
                if not isinstance(err, InfraError):
                    raise
                stage = records[-1].name if records else "probe"
                self._attempt(name, None, attempt, "infra", stage, str(err))
                health.failed(str(err))
                if err.retryable and attempt <= health.retries and not health.unhealthy:
                    health.pause(attempt + 1)
                    continue
                self._node_failed(name, cells, partial[0] if partial else None, stage, str(err), records)
                return
            break
        snapshot = partial[0]
        try:
            self._when_begun()  # no cell starts before the run is stored
            health.succeeded()
            probe_seconds = records[0].seconds
            stage_seconds = records[1].seconds

            def store_node() -> int:
                self._attempt(name, None, attempt, "ok", None, None)
                return self._store_snapshot(name, snapshot, None, probe_seconds, stage_seconds, staging.shipped)

            # the node's records are written beside its first cells, not before them: on a big
            # fleet every node's writes queue at the one process that writes the database
            stored = in_background(store_node, f"{name}-records")
            self.listener.node_ready(name, snapshot, None)
            devices, slots = self._machine_slots(node, snapshot, *node_devices(setup, snapshot))
            context = NodeContext(
                stage_record=records[1],
                snapshot=snapshot,
                stored=stored,
                staging=staging,
                devices=devices,
                slots=slots,
                cuobjdump=node.cuobjdump
                or (toolchain.cuobjdump_in(staging.toolchain.folder) if staging.toolchain else "cuobjdump"),
                health=health,
                setup=setup,
                resident=resident[0] if resident else None,
            )
            several = len(devices) > 1
            on_cards = [cell.on(device, several) for cell in cells for device in devices]
            if several:
                self.store.add_planned(self.summary.run_id, [(c.kernel, c.variant, c.node, c.device) for c in on_cards])
            with self._summary_lock:
                self._on_cards[name] = on_cards
            self._cells(name, on_cards, context)
            for runner in resident:
                runner.close()
            stored.result()  # its store's error, where no cell's result met it
            if context.unswept:
                self._sweep(setup, snapshot, name)
        finally:
            for runner in resident:
                runner.close()
            setup.close()

    def _sweep(self, setup: Transport, snapshot: NodeSnapshot, name: str) -> None:
        """Remove what the node's cells left of their folders (a cell that ended in an
        infra error or a stop could not remove its own), once they are all done."""
        run_dir = f"{snapshot.workdir}/cells/{self.summary.run_id}-{self.token}"
        with contextlib.suppress(FarmError):
            setup.open()
            setup.run(
                f"rm -rf {shlex.quote(run_dir + '/' + name)}; rmdir {shlex.quote(run_dir)} 2>/dev/null; true",
                timeout=60,
            )

    def _node_stopped(self, name: str, cells: list[Cell]) -> None:
        basis = declared_snapshot(name, self.farm)
        snapshot_id = self._store_snapshot(name, None, f"the run was stopped ({self.stopping})", None, None, 0)
        for cell in cells:
            job = self.farm.jobs[cell.kernel]
            if not cell.device:  # a cell of one card, after the probe, keeps its card
                cell = cell.on(basis.gpu_name or "", False)
            result = CellResult(cell=cell, expectation=expect(job, job.spec.variants[cell.variant], basis, basis.cc))
            self._not_run(result)
            self._finish(cell, job, result, snapshot_id, None)

    def _not_run(self, result: CellResult, stage: str | None = None) -> None:
        result.evidence = Evidence(stopped=self.stopping, stopped_stage=stage)
        result.verdict = classify(result.evidence, result.expectation)
        result.ended_at = datetime.now(UTC)

    def _node_failed(
        self,
        name: str,
        cells: list[Cell],
        snapshot: NodeSnapshot | None,
        stage: str,
        error: str,
        records: list[StageRecord],
    ) -> None:
        snapshot_id = self._store_snapshot(name, snapshot, error, None, None, 0)
        self.listener.node_ready(name, snapshot, error)
        basis = snapshot if snapshot is not None and snapshot.workdir else declared_snapshot(name, self.farm)
        for cell in cells:
            job = self.farm.jobs[cell.kernel]
            if not cell.device:  # a cell of one card, after the probe, keeps its card
                cell = cell.on(basis.gpu_name or "", False)
            result = CellResult(cell=cell, expectation=expect(job, job.spec.variants[cell.variant], basis, basis.cc))
            result.stages = list(records)
            result.evidence = Evidence(infra_stage=stage, infra_detail=error)
            result.verdict = classify(result.evidence, result.expectation)
            result.ended_at = datetime.now(UTC)
            self._finish(cell, job, result, snapshot_id, None)

    def _cells(self, name: str, cells: list[Cell], ctx: NodeContext) -> None:
        node = self.farm.nodes[name]
        pending = list(cells)
        lock = threading.Lock()
        counts = Counter((c.kernel, c.variant) for c in cells)
        ctx.shared_builds = {pair for pair, n in counts.items() if n > 1}
        keys = sorted({self._paths(c, ctx).build_key for c in cells})
        ctx.recorded = in_background(lambda: self.store.recorded_binaries(name, keys), f"{name}-recorded")

        def next_cell() -> Cell | None:
            with lock:
                return pending.pop(0) if pending else None

        def worker(transport: Transport) -> None:
            try:
                while (cell := next_cell()) is not None:
                    self._cell(transport, cell, ctx)
            finally:
                transport.close()

        workers = min(node.build_jobs, len(cells))
        # the workers share the setup's connection where the transport can (one handshake per node)
        transports = [ctx.setup] + [ctx.setup.sibling() for _ in range(workers - 1)]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-cell") as pool:
            for future in [pool.submit(worker, t) for t in transports]:
                future.result()

    def _recorded_binary(self, ctx: NodeContext, node: str, build_key: str) -> str | None:
        """What a cached build must hash to: built earlier in this run, else as the store
        recorded it (read for all of the node's cells at its start: one run at a time
        writes a database, so it cannot have changed since but by this run)."""
        with ctx.lock:
            if build_key in ctx.built:
                return ctx.built[build_key]
        recorded = ctx.recorded.result()
        if build_key in recorded:
            return recorded[build_key]
        return self.store.recorded_binary(node, build_key)

    @staticmethod
    def _remember_binary(ctx: NodeContext, build_key: str, sha: str) -> None:
        with ctx.lock:
            ctx.built[build_key] = sha

    def _await_node(self, ctx: NodeContext, name: str) -> bool:
        """Wait (backing off from 1 s to 30 s) until the node answers again, within
        reconnect_window of when it was first found unreachable. True when it is back."""
        window = self.farm.spec.reconnect_window
        with ctx.lock:
            if ctx.down_since is None:
                ctx.down_since = time.monotonic()
            deadline = ctx.down_since + window
        delay = 1.0
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(delay, left))
            delay = min(delay * 2, 30.0)
            probe_transport = self._transport(name)
            try:
                self._open(probe_transport)
                if probe_transport.run("true", timeout=30).ok:
                    with ctx.lock:
                        ctx.down_since = None
                    return True
            except InfraError:
                continue
            finally:
                probe_transport.close()
        return False

    def _restage(self, ctx: NodeContext, transport: Transport, placed: Placed) -> str:
        """Ship an altered bundle again (a kernel of an earlier cell changed it)."""
        shipped_bundle = ctx.staging.bundles.get(placed.digest)
        if shipped_bundle is None:  # the node's own dependency copy: nothing to ship
            raise NodeUnusable(f"node {transport.name!r}: its own folder {placed.folder} changed during the run")
        with ctx.lock:
            shipped, note = bundle.ensure(transport, ctx.snapshot.workdir, shipped_bundle, self.cache_dir)
        with self._summary_lock:
            self.summary.bytes_shipped += shipped
        return note

    def _paths(self, cell: Cell, ctx: NodeContext) -> CellPaths:
        job = self.farm.jobs[cell.kernel]
        staging = ctx.staging
        deps = {d: staging.dependencies[d] for d in job.spec.dependencies}
        run = f"{self.summary.run_id}-{self.token}"
        variant = job.spec.variants[cell.variant]
        return cell_paths(ctx.snapshot, variant, cell, run, staging.sources[cell.kernel], deps, staging.toolchain)

    @functools.cached_property
    def _farm_files(self) -> tuple[str, ...]:
        """The farm's own files, which no kernel may write: its folder, the SQLite database,
        the journal and the reports (a node on this machine would otherwise open a temporary
        folder holding them to its kernels: noderunner.scratch)."""
        farm = self.farm
        files = [farm.root, farm.reports_dir, journal_folder(farm.database_url, farm.root, farm.spec.journal)]
        if (database := sqlite_file(farm.database_url)) is not None:
            files.append(database)
        return tuple(sorted({str(Path(f).absolute()) for f in files}))

    def _cell(self, transport: Transport, cell: Cell, ctx: NodeContext) -> None:
        """One cell, retried while it fails for infra reasons and the node is healthy."""
        job = self.farm.jobs[cell.kernel]
        variant = job.spec.variants[cell.variant]
        self.listener.cell_started(cell)
        staging = ctx.staging
        deps = {d: staging.dependencies[d] for d in job.spec.dependencies}
        paths = self._paths(cell, ctx)
        gpus = ctx.devices.get(cell.device, [])
        card_cc = gpus[0].cc if gpus else (ctx.snapshot.cc if cell.device else None)
        # the node's staging is shown on a cell only when it concerned it: an input found altered there
        digests = [paths.sources.digest, *(d.digest for d in deps.values())]
        if staging.toolchain is not None:
            digests.append(staging.toolchain.digest)
        notes = "; ".join(staging.notes[d] for d in digests if d in staging.notes)
        node_stage = ctx.stage_record
        staged = (
            [StageRecord("stage", node_stage.status, node_stage.started_at, node_stage.seconds, notes)] if notes else []
        )
        attempt = reconnects = 0
        left_behind: str | None = None  # the FARM_CELL of a try that ended infra
        tries: list[tuple] = []  # stored after the result: if the database fails, the result is journaled
        while True:
            attempt += 1
            result = CellResult(cell=cell, expectation=expect(job, variant, ctx.snapshot, card_cc), stages=list(staged))
            if self.stopping:
                self._not_run(result)
                break
            if ctx.health.unhealthy:
                reason = f"node {cell.node!r} marked unhealthy for this run ({ctx.health.reason})"
                tries.append((cell.node, cell, attempt, "skipped", None, reason))
                self._infra(result, "skipped", reason)
                break
            marker = self._cell_marker()
            try:
                self._open(transport)
                if left_behind is not None and transport.streams_output:
                    # what the try before left running (its session cut mid-stage, so its own kill
                    # never came: the python3 of a cell's own) goes before the retry starts beside it
                    # (Slurm's cells are its jobs: the transport ends those itself)
                    with contextlib.suppress(InfraError):
                        transport.run(reap("FARM_CELL", left_behind, "reaped"), timeout=LEFT_BEHIND_TIMEOUT)
            except InfraError as err:
                self._infra(result, "connect", str(err))
                result.evidence.infra_retryable = err.retryable
                result.evidence.infra_unreachable = err.unreachable
            else:
                pipeline = CellPipeline(
                    transport,
                    job,
                    variant,
                    ctx.snapshot,
                    # each retry in a folder of its own: what is left of the try before it (a cut session
                    # whose processes could not be killed) removed its folder under the retry's kernel
                    paths if attempt == 1 else replace(paths, run_dir=f"{paths.run_dir}@{attempt}"),
                    result,
                    ctx.slots[cell.device],
                    self.farm.spec.output_cap,
                    ctx.cuobjdump,
                    recorded_binary=lambda key: self._recorded_binary(ctx, cell.node, key),
                    remember_binary=lambda key, sha: self._remember_binary(ctx, key, sha),
                    restage=lambda placed: self._restage(ctx, transport, placed),
                    build_lock=ctx.build_lock(paths.build_dir),
                    marker=marker,
                    stopping=lambda: self.stopping,
                    metric_baseline=lambda names: self.store.metric_baseline(
                        cell.kernel, cell.variant, cell.node, cell.device, names, CELL_ENV.strip()
                    ),
                    run_ahead=(cell.kernel, cell.variant) not in ctx.shared_builds,
                    python=ctx.snapshot.runner_python(transport.node),
                    resident=ctx.resident,
                    guarded=self._farm_files,
                )
                pipeline.execute()
                ctx.unswept = ctx.unswept or not pipeline.cleaned
            if result.evidence.stopped:
                ctx.unswept = True
                break
            infra = result.evidence.infra_stage
            tries.append(
                (cell.node, cell, attempt, "infra" if infra else "ok", infra, result.evidence.infra_detail or None)
            )
            if infra is None:
                ctx.health.succeeded()
                break
            left_behind = marker.split("FARM_CELL=", 1)[1].split()[0]
            transport.close()  # a broken session is reopened for the next try
            if result.evidence.infra_unreachable and self.farm.spec.reconnect_window > 0 and reconnects < 5:
                # a node that was reached this run and now is not: rebooting? wait for it, within the window
                reconnects += 1
                if self._await_node(ctx, cell.node):
                    continue
                if self.stopping:  # stopped while waiting for the node: no verdict either way
                    self._not_run(result)
                    break
                result.evidence.infra_detail += (
                    f"; unreachable for the whole reconnect window ({self.farm.spec.reconnect_window:g} s)"
                )
                result.verdict = classify(result.evidence, result.expectation)
                ctx.health.failed(result.evidence.infra_detail)
                break
            ctx.health.failed(result.evidence.infra_detail)
            if attempt > ctx.health.retries or ctx.health.unhealthy or not result.evidence.infra_retryable:
                break
            ctx.health.pause(attempt + 1)
        self._finish(cell, job, result, ctx.snapshot_id, ctx, [self._attempt_record(*one) for one in tries])

    def _infra(self, result: CellResult, stage: str, reason: str) -> None:
        result.stages.append(StageRecord(stage, "infra", datetime.now(UTC), 0.0, reason))
        result.evidence.infra_stage = stage
        result.evidence.infra_detail = reason
        result.verdict = classify(result.evidence, result.expectation)
        result.ended_at = datetime.now(UTC)

    def _attempt(
        self, node: str, cell: Cell | None, attempt: int, status: str, stage: str | None, error: str | None
    ) -> None:
        self._when_begun()
        self.store.add_attempt(self._attempt_record(node, cell, attempt, status, stage, error))

    def _attempt_record(
        self, node: str, cell: Cell | None, attempt: int, status: str, stage: str | None, error: str | None
    ) -> AttemptRecord:
        return attempt_record(self.summary.run_id, node, cell, attempt, status, stage, error)

    # storing -------------------------------------------------------------------
    def _store_snapshot(
        self,
        name: str,
        snapshot: NodeSnapshot | None,
        error: str | None,
        probe_seconds: float | None,
        stage_seconds: float | None,
        shipped: int,
    ) -> int:
        self._when_begun()
        with self._summary_lock:
            self.summary.bytes_shipped += shipped
            if probe_seconds:
                self.summary.stage_seconds["probe"] += probe_seconds
            if stage_seconds:
                self.summary.stage_seconds["stage"] += stage_seconds
        node = self.farm.nodes[name]
        record = snapshot_record(
            self.summary.run_id, name, node, snapshot, error, probe_seconds, stage_seconds, shipped
        )
        return self.store.add_snapshot(record)

    def _finish(
        self,
        cell: Cell,
        job: Job,
        result: CellResult,
        snapshot_id: int,
        ctx: NodeContext | None,
        attempts: list[AttemptRecord] | None = None,
    ) -> None:
        record = result_record(
            self.summary.run_id,
            snapshot_id,
            cell,
            job,
            result,
            ctx.staging if ctx else None,
            ctx.devices.get(cell.device, []) if ctx else [],
        )
        result_id = self.store.add_result(record, attempts or (), result_metrics(result))
        self.counted(cell, result, result_id)
        self.listener.cell_finished(cell, result, result_id)

    def stored_result(self, node: str, kernel: str, variant: str, device: str) -> None:
        """A worker's result, stored by the parent: a worker that dies before its event
        about it arrives does not leave the cell to be stored a second time (node_broke)."""
        with self._summary_lock:
            self._stored.add((node, kernel, variant, device))

    def counted(self, cell: Cell, result: CellResult, result_id: int) -> None:
        """A stored result, in the run's summary (the parent's, for a worker's cells)."""
        assert result.verdict is not None
        with self._summary_lock:
            self.summary.outcomes[result.verdict.outcome.value] += 1
            self.summary.results.append((cell, result, result_id))
            for record in result.stages:
                if record.name in CELL_STAGES:
                    self.summary.stage_seconds[record.name] += record.seconds


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


class _NotBegun(Exception):
    """The run could not be stored: its nodes end without storing anything."""


def run_cells(farm: Farm, store: Store, cells: Iterable[Cell], **kwargs) -> RunSummary:
    listener = kwargs.pop("listener", None)
    selection = kwargs.pop("selection", "--all")
    return FarmRun(farm, store, listener=listener, **kwargs).execute(list(cells), selection)
