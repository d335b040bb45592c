"""A run's work on one cell: its pipeline, its retries, its result stored."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace
from datetime import UTC, datetime

from orchestrator.classify import classify
from orchestrator.config.jobs import Job
from orchestrator.errors import InfraError
from orchestrator.outcomes import CELL_STAGES, Outcome
from orchestrator.output_secrets import Masker, farm_masker, key_file_secrets, masked_note
from orchestrator.plan import Cell, expect
from orchestrator.run.cell import CellResult, StageRecord
from orchestrator.run.farm_secrets import farm_secrets, key_files
from orchestrator.run.node_context import NodeContext
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.run.stages import CellPipeline
from orchestrator.store.records import (
    AttemptRecord,
    attempt_record,
    card_confirmed,
    result_metrics,
    result_record,
    snapshot_record,
)
from orchestrator.transport import Transport
from orchestrator.transport.base import reap

# A cell's PTX is compiled afresh each time it runs (CUDA_CACHE_DISABLE): the node's JIT
# cache would hand the kernel code the farm never saw, written there by any earlier
# process of the login, and a run's seconds would depend on whether that machine had
# compiled it before (a fresh machine's first run: perf-regression against warm ones).
# The run records it (runs.cell_env): a metric's values judge only those measured under the same.
CELL_ENV = "CUDA_CACHE_DISABLE=1 "
LEFT_BEHIND_TIMEOUT = 30.0  # seconds for killing what an interrupted try left, before its retry


class CellWork:
    """FarmRun's part per cell (scheduler.py): its pipeline, retried while the node's trouble
    fails it, and its result and attempts stored as it ends."""

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
            # it came back as another (host key, driver), or its module was reloaded: the probe is void
            if ctx.refused and ctx.down_why:
                tries.append((cell.node, cell, attempt, "skipped", None, ctx.down_why))
                self._infra(result, "skipped", f"{ctx.down_why}; not run")
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
                    # values in the unit the job says now (an edited `unit:` starts the baseline anew),
                    # measured on the card this try ran on (where a transport picked it, the same kind of card,
                    # confirmed or not)
                    metric_baseline=lambda names, result=result: self.store.metric_baseline(
                        cell.kernel,
                        cell.variant,
                        cell.node,
                        cell.device,
                        names,
                        CELL_ENV.strip(),
                        units={name: job.spec.metrics[name].unit for name in names},
                        real_gpu=card_confirmed(result.gpu, gpus),
                        gpu_uuid=result.gpu.uuid if result.gpu is not None else None,  # that card's own
                    ),
                    run_ahead=(cell.kernel, cell.variant) not in ctx.shared_builds,
                    python=ctx.snapshot.runner_python(transport.node),
                    resident=ctx.resident,
                    guarded=self._farm_files,
                    unreadable=self._farm_secrets if self.farm.nodes[cell.node].transport == "local" else (),
                )
                pipeline.execute()
                _overlap_retried(result)
                ctx.unswept = ctx.unswept or not pipeline.cleaned
                if reloaded := result.evidence.driver_reloaded:
                    # the probe is void for the node's other cells too: none is run on it (each was its own
                    # infra-error, after its build and run, on a driver nobody probed); those in flight end
                    # as they do, each judged by its own read of the module
                    with ctx.lock:
                        if not ctx.refused:
                            ctx.down_why = f"node {cell.node!r}: {reloaded} (found by {cell.label})"
                            ctx.refused = True
            if result.evidence.stopped:
                ctx.unswept = True
                break
            infra = result.evidence.infra_stage
            # a module reloaded under the cell: the node's (blame.driver_unbacked), its try too (review 161)
            reloaded = "" if infra else result.evidence.driver_reloaded
            tries.append(
                (
                    cell.node,
                    cell,
                    attempt,
                    "infra" if infra or reloaded else "ok",
                    infra or ((result.evidence.driver_reloaded_by or "run") if reloaded else None),
                    result.evidence.infra_detail or reloaded or None,
                )
            )
            if infra is None:
                if reloaded:
                    ctx.health.failed(reloaded)
                elif fault := _node_fault(result):
                    ctx.health.failed(fault)  # no retry (it stays), but `unhealthy_after` in a row retire the node
                else:
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
                # what the reconnections met: a changed host key had been hidden behind "unreachable"
                result.evidence.infra_detail += (
                    f"; when it answered again: {ctx.down_why}"
                    if ctx.refused or ctx.answered
                    else f"; unreachable for the whole reconnect window ({self.farm.spec.reconnect_window:g} s)"
                    + (f": {ctx.down_why}" if ctx.down_why else "")
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
        return self._masker().record(attempt_record(self.summary.run_id, node, cell, attempt, status, stage, error))

    def _masker(self) -> Masker:
        """What every record a run stores passes through first (output_secrets.py): the secrets a
        kernel, a build or a node's commands printed never reach the store, its journal or a page."""
        return self._run_masker.fresh()

    @functools.cached_property
    def _run_masker(self) -> Masker:
        """The run's masker, built once: each record gets a fresh count of it (Masker.fresh)."""
        return farm_masker(self.farm.spec, self.farm.database_url, self._key_texts)

    @functools.cached_property
    def _key_texts(self) -> tuple[str, ...]:
        """The nodes' key files' text, read once a run: masked like any secret (output_secrets.py)."""
        return tuple(key_file_secrets(key_files(self.farm)))

    @functools.cached_property
    def _farm_secrets(self) -> tuple[str, ...]:
        """The farm's secret files, no stage on its own machine may read (farm_secrets.py)."""
        return farm_secrets(self.farm)

    # storing -------------------------------------------------------------------
    def _store_snapshot(
        self,
        name: str,
        snapshot: NodeSnapshot | None,
        error: str | None,
        probe_seconds: float | None,
        stage_seconds: float | None,
        shipped: int,
        attempt: AttemptRecord | None = None,
    ) -> int:
        """The node's snapshot; with the attempt that reached it, where there is one, in one write."""
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
        record = self._masker().record(record)
        if attempt is not None:
            return self.store.add_node_records(attempt, record)
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
            self.farm.nodes[cell.node].transport,
        )
        # masked here, once the verdict and metrics were judged on what the kernel really printed
        masker = self._masker()
        record = masker.record(record)
        metrics = [{**m, "note": masker.value(m["note"])} for m in result_metrics(result)]
        if masker.count:  # a reviewer reads that the page shows less than the kernel printed
            record = replace(
                record, stage_details={**record.stage_details, "masked": masked_note(masker.count, record.output_cuts)}
            )
        result_id = self.store.add_result(record, attempts or (), metrics)
        if result.verdict is not None and record.reason != result.verdict.reason:
            # the run's own lines (a CI log) quote the reason too: they get the stored one
            result.verdict = replace(result.verdict, reason=record.reason)
        result.farm_writable = record.farm_writable  # the listeners' lines say it, as the pages do
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


def _node_fault(result: CellResult) -> str:
    """Why a cell the stages ran is infra-error for its node's own trouble, found by the look after its
    failed stage (its work folder, a toolkit file of the login's, its card), else "": counted against the
    node's health as an InfraError is. Each later cell had built once and failed the same way, one by one,
    the node never marked unhealthy (red-team round 247); one such cell between sound ones retires nothing."""
    ev, verdict = result.evidence, result.verdict
    if verdict is None or verdict.outcome is not Outcome.INFRA_ERROR:
        return ""
    return verdict.reason if ev.folder_trouble or ev.build_unreadable or ev.gpu_lost else ""


def _overlap_retried(result: CellResult) -> None:
    """A cell denied its verdict only because another cell's stage set the farm's folders back during one of
    its own (classify._folders_taken: red-team 251) is tried again, as a cell its node broke: one of the
    overlapping cells broke them, and the innocent's try alone passes, the breaker's own check blames it."""
    ev, verdict = result.evidence, result.verdict
    denied = verdict is not None and verdict.outcome is Outcome.INFRA_ERROR and ev.infra_stage is None
    if denied and ev.farm_folders_overlap and not ev.farm_folders_changed and verdict is not None:
        ev.infra_stage, ev.infra_detail, ev.infra_retryable = verdict.failed_stage or "run", verdict.reason, True
