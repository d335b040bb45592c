"""One cell's stages in order, each stamped by one wrapper; classify judges what they found."""

from __future__ import annotations

import time
from collections.abc import Callable
from copy import copy as shallow
from datetime import UTC, datetime

from orchestrator import metrics
from orchestrator.classify import classify
from orchestrator.classify.blame import driver_shortfall
from orchestrator.errors import InfraError
from orchestrator.outcomes import Outcome
from orchestrator.run.cell import CellResult, StageRecord
from orchestrator.run.commands import KILL_GRACE
from orchestrator.run.stages.build import BuildStage
from orchestrator.run.stages.inspect import InspectStage
from orchestrator.run.stages.run import RunStage
from orchestrator.run.stages.sanitize import SanitizeStage
from orchestrator.run.work_folder import unasked


class CellPipeline(BuildStage, InspectStage, RunStage, SanitizeStage):
    """Runs build, inspect and run for one cell on an open transport.

    Where the transport streams, the cell's stages go out in one round trip:
    the node runs each next stage only when the one before it succeeded by its
    own reading (build and copy made; inspect exited 0 with the instructions
    the variant needs), and sends back each stage's status lines and files as
    frames before the next stage starts, so nothing the kernel does can reach
    its build log or disassembly. The command's last line, from the shell's own
    variables after the cell's processes are reaped, names the stages that ran:
    what a build or kernel forged for a stage that never ran is no evidence.
    The farm then judges each stage from what came back, exactly as if it had
    come alone; a stage the node went on to that the farm would not have run is
    no evidence, and a stage the node held back that the farm would run gets a
    round trip of its own."""

    # one wrapper for every stage -----------------------------------------
    def _stage(self, name: str, action: Callable[[], str]) -> bool:
        started = datetime.now(UTC)
        clock = time.monotonic()
        status = "ok"
        self._detail: list[str] = []
        self._clock = None
        if self._stopped(name):
            return False
        try:
            status = action()
        except InfraError as err:
            # a shared trip's stop is told at the stage the node was at: a kernel hung in its run
            # had read "not-run at build", its build's seconds the kernel's (review 127)
            at = getattr(err, "stage", None) or name
            if self._stopped(at):  # the stop killed its command: not the node's fault
                self.result.stages.append(StageRecord(at, "stopped", started, time.monotonic() - clock, str(err)))
                return False
            status = "infra"
            name = getattr(err, "stage", None) or name  # a shared trip's error, told at the stage the node was at
            self._detail.append(str(err))
            job = getattr(err, "job", None)  # a Slurm job that Slurm ended or never started
            if job is not None:
                self.result.slurm_job_id, self.result.compute_node = job.job_id, job.compute_node
            self.result.evidence.infra_stage = name
            self.result.evidence.infra_detail = str(err)
            self.result.evidence.infra_retryable = err.retryable
            self.result.evidence.infra_unreachable = err.unreachable
        detail = "; ".join(self._detail)
        if self._stopped(name):  # its command may have been killed by the stop: no verdict from it
            status = "stopped"
        seconds = time.monotonic() - clock
        if self._clock is not None:  # its part of a trip shared with other stages: the node's own clock
            started, seconds = self._clock
        self.result.stages.append(StageRecord(name, status, started, seconds, detail))
        return status in ("ok", "cached")

    def _stopped(self, stage: str) -> bool:
        why = self.stopping()
        if why is None:
            return False
        ev = self.result.evidence
        if ev.stopped is None:
            ev.stopped, ev.stopped_stage = why, stage
        return True

    def execute(self) -> CellResult:
        ev = self.result.evidence
        self.result.build_key = self.paths.build_key
        runs = self.result.expectation.outcome.value != "compile-only"
        # each stage runs only if the one before it succeeded; a node without a
        # GPU stops after inspect (compile-only)
        with self.build_lock:
            if self.t.streams_output:
                if runs and self.run_ahead and self.gpu_slots.on_node:
                    # queued on the node's GPU lock from the start: the build is not held up by it
                    self._hold_gpu()
                    self._plan_ahead = lambda: [self._inspect_trip(), self._run_trip(None)]
                else:  # a GPU the farm has to wait for is not held through a build
                    self._plan_ahead = lambda: [self._inspect_trip()]
            built = self._stage("build", self._build) and ev.build_exit == 0
        inspected = built and self._stage("inspect", self._inspect) and self._inspect_passed()
        if inspected and runs:
            # wait for the GPU outside the stage, so the run's seconds are the kernel's
            if not self._slot and "run" not in self._fetched:
                self._hold_gpu()
            try:
                self._stage("run", self._run)
            finally:
                self._release()
            self._confirm_regression()
            if self._sanitizing and ev.run_exit == 0 and ev.pass_line is not None:
                # only a pass is worth checking again; the tools run the same build on the card the pass
                # was on: another of its model (the least queued) had its verdict certify a card the run
                # never saw, maybe one the driver did not confirm (red-team 163's leftover)
                limit = len(self.variant.sanitize) * float(self.job.spec.sanitize_timeout + KILL_GRACE)
                self._sanitize_gpu, self._ahead = self.gpu_slots.acquire(limit, self.result.gpu)
                self._slot = [(self._sanitize_gpu, limit)]
                try:
                    self._stage("sanitize", self._sanitize)
                finally:
                    self._release()
        self._release()  # held for a run the node or the farm did not go on to
        self._fetched.clear()
        self._clean_up()
        if (
            ev.infra_stage is None
            and not ev.stopped
            and (
                any(code not in (None, 0) for code in (ev.build_exit, ev.inspect_exit, ev.run_exit))
                or any(not report.clean for report in ev.sanitizer)  # a pass run again, failing: its card too
                or self._run_unpassed()  # CUDA's own error, or no pass marker, after exit 0: a card lost mid-run
            )
        ):
            try:
                ev.folder_trouble, ev.gpu_lost, ev.gpu_unfit = self._node_trouble()
            except InfraError as err:  # the node could not be asked: its failure cannot be told the kernel's
                unasked(self.result, self.t.name, err)
        # a binary of CUDA code (cuobjdump found cubins or PTX in it) that the node's driver is too old to load
        cuda = bool(self.result.elf_targets or self.result.ptx_targets)
        jit = self.result.code_path == "ptx-jit"
        ev.driver_short = driver_shortfall(self.snapshot.driver, self.snapshot.nvcc_version, cuda, jit)
        if cuda and self.result.code_path == "no-code":
            elf, ptx = (", ".join(found) or "none" for found in (self.result.elf_targets, self.result.ptx_targets))
            ev.no_code = f"cubins {elf}; PTX {ptx}"
        if self.job.spec.metrics and ev.run_exit is not None and ev.infra_stage is None and ev.stopped is None:
            ev.metrics = self._measure()
        self.result.verdict = classify(ev, self.result.expectation)
        self.result.ended_at = datetime.now(UTC)
        return self.result

    def _measure(self) -> tuple[metrics.Measured, ...]:
        out, card = self.result.stdout, self.result.gpu
        scope = " on this card" if card is not None and card.uuid else ""  # cell_work's baseline: its values
        return metrics.measure(
            self.job.spec.metrics, out.kept, out.cut, out.size, self.result.run_seconds, self.metric_baseline, scope
        )

    @property
    def _may_confirm(self) -> bool:
        """A passing run of this cell could be judged on speed: its copy is kept for a second run."""
        return bool(self.job.spec.metrics) and self.result.expectation.outcome.value == "pass"

    def _confirm_regression(self) -> None:
        """A run the cell would be judged perf-regression on runs once more, at once, and the
        cell is judged on that second run. One run is one sample: the first run on a GPU machine
        just started (its driver and files cold) was 51 % over the median of warm runs, and a
        nightly run went red for it, its numbers passing. The second run gets a fresh copy of
        the build in a fresh folder (what the first left there, a kernel's cache or a run's
        `mkdir out`, would make it another run); where it cannot start (the first run's kernel
        removed what it needs, the node went), the first run stands. A regression the second
        run shows too is one; the first run's figures are kept in the run's detail."""
        ev = self.result.evidence
        if not self._may_confirm or ev.run_exit is None or ev.infra_stage or ev.stopped:
            return
        ev.metrics = self._measure()
        if classify(ev, self.result.expectation).outcome is not Outcome.PERF_REGRESSION:
            return  # only a run that would pass but for its speed: a failing one is judged as it is
        first = "; ".join(m.words() for m in ev.metrics if m.regressed)
        kept_ev, kept = shallow(ev), shallow(self.result)
        kept.stages = list(self.result.stages)
        self._fetched.clear()  # a run of its own, after the one that went ahead with the build
        self._fresh_copy = True
        self._hold_gpu()
        try:
            self._stage("run", self._run)
        finally:
            self._release()
            self._fresh_copy = False
        second = self.result.stages[-1]
        if ev.infra_stage is not None and not ev.stopped:
            why = f"a second run could not start ({ev.infra_detail[:300]}): the first run's figures stand"
            vars(ev).update(vars(kept_ev))
            vars(self.result).update({k: v for k, v in vars(kept).items() if k != "evidence"})
            record = self.result.stages[-1]
            record.detail = f"{record.detail}; {why}" if record.detail else why
            return
        again = f"a second run, since the first was slower than the cell's median: {first}"
        second.detail = f"{again}; {second.detail}" if second.detail else again
        ev.metrics = self._measure()
        if classify(ev, self.result.expectation).outcome is Outcome.PERF_REGRESSION:
            ev.gpu_slowed = self._gpu_slowed()  # confirmed: is the card itself held down?
