"""A run's work on one node: its setup, its cells in parallel, and what ends it early."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shlex
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.classify import Evidence, classify
from orchestrator.errors import (
    FarmError,
    HostKeyError,
    InfraError,
    KnownHostsUnreadable,
    NodeUnusable,
    SshdDropped,
    StoreError,
)
from orchestrator.plan import Cell, expect
from orchestrator.run import toolchain
from orchestrator.run.bundle import Placed
from orchestrator.run.card_claims import CardClaims, RemoteCardClaims, claimant, refusal
from orchestrator.run.cell import CellPaths, CellResult, StageRecord, cell_paths
from orchestrator.run.driver_check import DRIVER_NOW_SH, driver_changed
from orchestrator.run.health import NodeHealth
from orchestrator.run.node_context import NodeContext, declared_snapshot, in_background_each, node_devices
from orchestrator.run.removal import remove_sh
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.run.staging import Staging, ensure
from orchestrator.store.journal import journal_folder
from orchestrator.store.location import sqlite_file
from orchestrator.transport import Transport


class NotBegun(Exception):
    """The run could not be stored: its nodes end without storing anything."""


class NodeWork:
    """FarmRun's part per node (scheduler.py): connect, probe and stage it, retrying what the
    node's trouble failed, then give its cells to their pipelines (CellWork); a bug on one
    node stays with that node."""

    cards: CardClaims | RemoteCardClaims  # which node of the run has each GPU (card_claims.py)

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
        except NotBegun:
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
        # an exception's message may quote a node's command or output: the terminal is a CI log too
        print(self._masker().text("".join(traceback.format_exception(err))), file=sys.stderr, end="")
        with self._summary_lock:
            self.summary.internal.append(self._masker().text(f"node {name!r}: {type(err).__name__}: {err}"))
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
            devices, slots = node_devices(setup, snapshot)
            if setup.pins_gpus and snapshot.gpus:  # Slurm places its jobs: no card is known ahead
                taken = self.cards.claim(claimant(name, node), [g.uuid for g in snapshot.gpus])
                kept = tuple(g for g in snapshot.gpus if g.uuid not in taken)
                if not kept:  # every card is another node's: none of this name's cells runs
                    why = "; ".join(refusal(g, taken[g.uuid]) for g in snapshot.gpus)
                    self._node_failed(name, cells, snapshot, "probe", why, records)
                    return
                if taken:  # the node's other cards run its cells
                    devices, slots = node_devices(setup, dataclasses.replace(snapshot, gpus=kept))
            probe_seconds = records[0].seconds
            stage_seconds = records[1].seconds

            def store_node() -> int:
                attempted = self._attempt_record(name, None, attempt, "ok", None, None)
                return self._store_snapshot(
                    name, snapshot, None, probe_seconds, stage_seconds, staging.shipped, attempted
                )

            # what the node's cached builds must hash to (read for all of its cells at once, the keys
            # alike on every card), then its records, written beside its first cells, not before them:
            # on a big fleet every node's writes queue at the one process that writes the database.
            # One thread for both: the first cells wait on the read, not on the records
            keys = sorted({self._cell_paths(c, snapshot, staging).build_key for c in cells})
            recorded, stored = in_background_each(
                [lambda: self.store.recorded_binaries(name, keys), store_node], f"{name}-store"
            )
            self.listener.node_ready(name, snapshot, None)
            devices, slots = self._machine_slots(node, snapshot, devices, slots)
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
                recorded=recorded,
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
                f"{remove_sh(shlex.quote(run_dir + '/' + name))}; rmdir {shlex.quote(run_dir)} 2>/dev/null; true",
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
        # the error quotes what the node said (an nvcc wrapper's complaint with its license token):
        # the run's lines (terminal, --log, --quiet's causes) print it, as the stored copies keep it, masked
        error = self._masker().text(error)
        snapshot_id = self._store_snapshot(name, snapshot, error, None, None, 0)
        self.listener.node_ready(name, snapshot, error)
        basis = snapshot if snapshot is not None and snapshot.workdir else declared_snapshot(name, self.farm)
        for cell in cells:
            job = self.farm.jobs[cell.kernel]
            if not cell.device:  # a cell of one card, after the probe, keeps its card
                cell = cell.on(basis.gpu_name or "", False)
            result = CellResult(cell=cell, expectation=expect(job, job.spec.variants[cell.variant], basis, basis.cc))
            result.stages = list(records)
            if self.stopping:  # judged once the stop came (a dial it cut short?): the node's error is in its
                self._not_run(result)  # snapshot; the run stored finished, its cells infra-error (red-team 203)
            else:
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

        def next_cell() -> Cell | None:
            with lock:
                return pending.pop(0) if pending else None

        def worker(transport: Transport) -> None:
            try:
                while (cell := next_cell()) is not None:
                    self._cell(transport, cell, ctx)
            except StoreError:  # at once: each other worker ran a cell more, each node went on (red-team 218)
                threading.Thread(target=self.stop, args=("the results database failed",), daemon=True).start()
                raise
            finally:
                transport.close()

        workers = min(node.build_jobs, len(cells))
        # the workers share the setup's connection where the transport can (one handshake per node)
        transports = [ctx.setup] + [ctx.setup.sibling() for _ in range(workers - 1)]
        # the node's own thread is its first worker (it only waited on the others: a thread less per
        # node); its error, where it raised, still comes once the others have ended (the pool's exit)
        with ThreadPoolExecutor(max_workers=max(workers - 1, 1), thread_name_prefix=f"{name}-cell") as pool:
            others = [pool.submit(worker, t) for t in transports[1:]]
            worker(transports[0])
            for future in others:
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
        unusable = 0  # tries in a row that reached the node, up, and could not start a command there
        while not self.stopping and not ctx.refused:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._stopping.wait(min(delay, left)):  # a stop ends it (it slept on a back-off: red-team 212)
                break
            delay = min(delay * 2, 30.0)
            probe_transport = self._transport(name)
            opened = False
            try:
                self._open(probe_transport)
                opened = True
                answer = probe_transport.run(DRIVER_NOW_SH, timeout=30)
                if answer.ok and (changed := driver_changed(ctx.snapshot.driver_evidence, answer.stdout)):
                    with ctx.lock:  # rebooted into another driver: no cell of it is judged on the old probe
                        ctx.down_why, ctx.refused = f"node {name!r}: {changed}", True
                    return False
                if answer.ok:
                    with ctx.lock:  # back: a later outage says its own error, not this one's
                        ctx.down_since, ctx.down_why, ctx.answered = None, "", False
                    return True
                ctx.down_why = f"node {name!r}: it answered, but its driver's check exited {answer.exit_code}"
                unusable += 1  # up, its command failing (it could not fork one): as below
                if unusable >= 2:
                    with ctx.lock:
                        ctx.down_since, ctx.answered = None, True
                    return False
            except KnownHostsUnreadable as err:  # no key refused: a read that failed for a moment
                ctx.down_why, ctx.answered = str(err), False
                continue
            except HostKeyError as err:
                # back with another host key (reinstalled, or another machine on its address):
                # refused every time, and a possible man-in-the-middle: no more waiting
                with ctx.lock:
                    ctx.down_why, ctx.refused = str(err), True
                return False
            except InfraError as err:
                # up, and no command starts (its sshd dropping the connection, or a session that cannot
                # fork: out of processes): no reboot to wait for, and each try met it for the whole window
                # (fix 166); twice in a row, as a reboot's last moments may drop one; the cell says it
                unusable = unusable + 1 if opened or isinstance(err, SshdDropped) else 0
                if unusable >= 2:
                    with ctx.lock:
                        ctx.down_why, ctx.down_since, ctx.answered = str(err), None, True
                    return False
                ctx.down_why, ctx.answered = str(err), False
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
            shipped, note = ensure(transport, ctx.snapshot.workdir, shipped_bundle, self.cache_dir)
        with self._summary_lock:
            self.summary.bytes_shipped += shipped
        return note

    def _paths(self, cell: Cell, ctx: NodeContext) -> CellPaths:
        return self._cell_paths(cell, ctx.snapshot, ctx.staging)

    def _cell_paths(self, cell: Cell, snapshot: NodeSnapshot, staging: Staging) -> CellPaths:
        job = self.farm.jobs[cell.kernel]
        deps = {d: staging.dependencies[d] for d in job.spec.dependencies}
        run = f"{self.summary.run_id}-{self.token}"
        variant = job.spec.variants[cell.variant]
        sources = staging.sources[cell.kernel]
        env = self.farm.nodes[cell.node].env
        return cell_paths(snapshot, variant, cell, run, sources, deps, staging.toolchain, job.spec.sources, env)

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
