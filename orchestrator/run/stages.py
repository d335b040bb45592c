"""The per-cell stages, build -> inspect -> run, each stamped by one wrapper.

(probe and stage run once per node, in scheduler.py; their records are shared
by the node's cells.) The wrapper records each stage's name, start, duration
and status, and turns an InfraError into "this stage failed for infra reasons":
later stages are then not run. A kernel failing is not an exception: it is
evidence, handed to classify.py, which alone decides the outcome.

Nothing on the node is reused on trust. A kernel runs as the same user as the
farm's own files, so it could rewrite another cell's cached binary or the
staged sources. Therefore:

- build: the staged sources and dependencies are verified against their
  digests right before nvcc and again after it (altered before: shipped again;
  altered during: infra-error); the binary's sha256 is taken at once.
- a cached build is reused only when its binary's sha256 is the one the store
  recorded for that build key; otherwise it is rebuilt, and the cell says so.
- inspect checks the binary is still the one built; run copies it into the
  cell's own scratch folder, checks the copy, and runs the copy there, pinned
  to its GPU with CUDA_VISIBLE_DEVICES (by UUID).
- stdout and stderr are read whole and scanned as they stream (streams.py):
  markers are matched over everything printed, the copy kept is bounded.

A cell is one round trip where the transport streams (trips.py: how the stages
travel and come back); here is what each stage's script holds, and what the farm
reads from what came back.

Every command the node runs is built here from quoted parts. Each runs under a
remote `timeout -k`, so a kernel that never ends is killed on the node itself
(with its whole process group), not only its SSH channel.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from copy import copy as shallow
from datetime import UTC, datetime

from orchestrator import metrics
from orchestrator.classify import classify
from orchestrator.config.farm import Job
from orchestrator.config.inputs import FOLDER_DIGEST_SH
from orchestrator.config.run_command import kernel_call_words, kernel_launchers, runs_other_programs
from orchestrator.config.schema import VariantSpec
from orchestrator.errors import InfraError
from orchestrator.outcomes import Outcome
from orchestrator.run import probe, sanitize
from orchestrator.run.bundle import Placed
from orchestrator.run.cell import CellPaths, CellResult, StageRecord
from orchestrator.run.commands import (
    CANNOT_START_NOTE,
    CHANNEL_MARGIN,
    COPY_GONE_NOTE,
    KILL_GRACE,
    LAUNCHER_WRITABLE_NOTE,
    NOW_NS,
    OTHER_LIMIT,
    OUTPUT_LIMIT,
    STATUS_LIMIT,
    guarded,
    input_checks,
    kernel_files,
    kernel_run,
    kernel_statuses,
    other_output,
    own_tmp,
    render_build,
    verify_inputs_script,
)
from orchestrator.run.machine_code import ELF_TARGETS, PTX_TARGETS, code_path_for, count_instructions
from orchestrator.run.probe import Gpu, NodeSnapshot
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.slots import GpuSlots
from orchestrator.run.streams import StreamScan
from orchestrator.run.trips import CellTrips, Fetched, Trip, last_match
from orchestrator.transport import CommandResult, Transport
from orchestrator.transport.base import reap

INSPECT_TIMEOUT = 300.0
# each of cuobjdump's lists after the dump (ELF and PTX targets), within the farm's wait for the
# stage: with the dump's budget each, a hung cuobjdump kept the node past it, and the cell's trip
# went out again and again (found by a red-team helper; the runner's is noderunner.LIST_TIMEOUT)
LIST_TIMEOUT = 30
VERIFY_TIMEOUT = 300.0  # hashing the inputs on the node, around a build
SASS_LIMIT = 256 << 20  # bytes of disassembly read back for counting
QUEUE_SLACK = 10  # seconds a run may wait on its GPU's lock beyond the limits of the runs queued before it


class CellPipeline(CellTrips):
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

    def __init__(
        self,
        transport: Transport,
        job: Job,
        variant: VariantSpec,
        snapshot: NodeSnapshot,
        paths: CellPaths,
        result: CellResult,
        gpu_slots: GpuSlots,
        output_cap: int,
        cuobjdump: str,
        recorded_binary: Callable[[str], str | None] = lambda _key: None,
        remember_binary: Callable[[str, str], None] = lambda _key, _sha: None,
        restage: Callable[[Placed], str] | None = None,
        build_lock: threading.Lock | None = None,
        marker: str = "",
        stopping: Callable[[], str | None] = lambda: None,
        metric_baseline: Callable[[list[str]], Mapping[str, list[float]]] = lambda _names: {},
        run_ahead: bool = True,
        python: str | None = None,
        resident: ResidentRunner | None = None,
        guarded: tuple[str, ...] = (),
    ) -> None:
        self.t = transport
        self.job = job
        self.variant = variant
        self.snapshot = snapshot
        self.paths = paths
        self.result = result
        self.gpu_slots = gpu_slots
        self.output_cap = output_cap
        self.cuobjdump = cuobjdump
        self.recorded_binary = recorded_binary  # build key -> the binary sha256 recorded for it
        self.remember_binary = remember_binary  # a fresh build's sha256, for the run's later cells
        self.restage = restage  # ships an altered bundle again; returns a note
        self.build_lock = build_lock or threading.Lock()  # one build per build folder at a time
        self.marker = marker  # "FARM_RUN=<run> FARM_CELL=<cell> " + CELL_ENV: the cell's processes carry it
        self.marker_env = dict(part.split("=", 1) for part in marker.split())  # the same, as variables
        self.stopping = stopping  # why the run is being stopped (a signal), or None
        self.metric_baseline = metric_baseline  # metric names -> the cell's earlier values (metrics.py)
        # the run may go out with the build (one round trip per cell); not where another cell
        # shares the build folder, since the folder's lock is held for the whole trip
        self.run_ahead = run_ahead
        # the node's python3: a streamed trip goes to it as noderunner.py's plan, not as shell
        self.python = python if transport.streams_output else None
        self.resident = resident if self.python is not None else None  # the node's python3 serving all its cells
        # the farm's own files (its folder, database, journal, reports): a confined kernel's temporary
        # folder is opened to it only where none of them is in it (a local node, a farm under /tmp)
        self.guarded = list(guarded)
        self._built_sha: str | None = None
        self.cleaned = False  # the cell's folder on the node is gone
        self._slot: list[tuple[Gpu | None, float]] = []  # the GPU held (or queued on), with its run's limit
        self._ahead = 0.0  # seconds of runs queued on the node before this cell's
        self._sanitize_gpu: Gpu | None = None  # the GPU the sanitizer runs hold
        self._plan_ahead: Callable[[], list[Trip]] | None = None  # stages to send with the build
        self._fetched: dict[str, Fetched | InfraError] = {}  # later stages read ahead, or why they broke
        self._clock: tuple[datetime, float] | None = None  # a fetched stage's own start and seconds
        self._fresh_copy = False  # the run takes a fresh copy of the build in a fresh folder first

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
            if self._stopped(name):  # the stop killed its command: not the node's fault
                self.result.stages.append(StageRecord(name, "stopped", started, time.monotonic() - clock, str(err)))
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
                # only a pass is worth checking again; the tools run the same build, on a GPU of its kind
                limit = len(self.variant.sanitize) * float(self.job.spec.sanitize_timeout + KILL_GRACE)
                self._sanitize_gpu, self._ahead = self.gpu_slots.acquire(limit)
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
            and any(code not in (None, 0) for code in (ev.build_exit, ev.inspect_exit, ev.run_exit))
        ):
            ev.room_short, ev.gpu_lost = self._node_trouble()
        if self.job.spec.metrics and ev.run_exit is not None and ev.infra_stage is None and ev.stopped is None:
            ev.metrics = self._measure()
        self.result.verdict = classify(ev, self.result.expectation)
        self.result.ended_at = datetime.now(UTC)
        return self.result

    def _measure(self) -> tuple[metrics.Measured, ...]:
        out = self.result.stdout
        return metrics.measure(
            self.job.spec.metrics, out.kept, out.cut, out.size, self.result.run_seconds, self.metric_baseline
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

    def _node_trouble(self) -> tuple[str, str]:
        """After a failed stage, once the cell's own files are gone: (why the node's work or
        temporary folder is short of room, why the cell's GPU no longer answers), each ""
        where not. The probe's checks are of the run's start: a disk another tenant fills
        mid-run made build-fail, inspect-fail or fail, and so did a card lost mid-run. One
        round trip, on failures only; "" where the node cannot say."""
        q = shlex.quote
        inodes = probe.free_inodes_sh('"$d"')  # its free inodes too: one out of them fails as one out of room
        command = (
            f'for d in {q(self.snapshot.workdir)} "${{TMPDIR:-/tmp}}"; do '
            f'echo "$(df -Pk "$d" 2>/dev/null | awk \'NR==2 {{print $4}}\') $({inodes})"; done'
        )
        gpu = self.result.gpu if self.result.evidence.run_exit not in (None, 0) else None
        if gpu is not None:
            command += (
                f"; echo @@farm-gpu; said=$({probe.TOOL} nvidia-smi --query-gpu={probe.GPU_QUERY} "
                f"--format=csv,noheader -i {q(gpu.uuid)} 2>&1); rc=$?; "
                'printf "%s\\n" "$said" | head -c 2000; echo; echo "rc=$rc"'
            )
        try:
            said = self.t.run(command, timeout=60).stdout
        except InfraError:
            return "", ""
        room, _, answer = said.partition("@@farm-gpu\n")
        return self._short_of_room(room.splitlines()), self._gpu_gone(gpu, answer)

    @staticmethod
    def _short_of_room(lines: list[str]) -> str:
        need = probe.MIN_FREE >> 10
        for where, line in zip(("work folder", "temporary folder"), lines, strict=False):
            free, files = ([*line.split(), "", ""])[:2]
            if free.isdigit() and int(free) < need:
                return f"its {where} had {int(free) >> 10} MiB free, the farm needs {need >> 10} MiB there"
            if files.isdigit() and int(files) < probe.MIN_FREE_INODES:
                need_files = probe.MIN_FREE_INODES
                return f"its {where} had {files} inodes free (files it can make), the farm needs {need_files}"
        return ""

    @staticmethod
    def _gpu_gone(gpu: Gpu | None, answer: str) -> str:
        """Why nvidia-smi's answer for the cell's GPU says it is gone, else "" (also where the
        node said nothing of it: the check is for a card lost, not a node that cannot tell)."""
        if gpu is None or not answer.strip():
            return ""
        lines = [line.strip() for line in answer.strip().splitlines()]
        if lines[-1] == "rc=0" and any(gpu.uuid in line for line in lines):
            return ""
        said = " / ".join(line for line in lines[:-1] if line)[:200] or "nothing"
        return f"nvidia-smi no longer lists {gpu.label} ({lines[-1]}: {said})"

    def _hold_gpu(self) -> None:
        limit = float(self.variant.timeout or self.job.spec.timeout) + KILL_GRACE
        gpu, self._ahead = self.gpu_slots.acquire(limit)
        self.result.gpu = gpu
        self._slot = [(gpu, limit)]

    def _clean_up(self) -> None:
        if self.cleaned or self.result.evidence.infra_stage is not None or self.result.evidence.stopped:
            return  # done already, or the session may be gone (the scheduler sweeps the node's folders at its end)
        with contextlib.suppress(InfraError):  # where it fails, the scheduler sweeps the node's folders at its end
            self.cleaned = self.t.run(self.paths.remove_run_dir(), timeout=60).ok

    def _release(self) -> None:
        if self._slot:
            self.gpu_slots.release(*self._slot.pop())

    def _note_job(self) -> None:
        """The batch job and compute node of the command just run (where the transport has them)."""
        if self.t.last_job_id is not None:
            self.result.slurm_job_id = self.t.last_job_id
            self.result.compute_node = self.t.last_compute_node

    def _inspect_passed(self) -> bool:
        ev = self.result.evidence
        return ev.inspect_exit == 0 and not ev.missing_instructions

    # build ----------------------------------------------------------------
    def _build_script(self, command: str, reuse: bool, recorded: str | None) -> str:
        """Reuse a cached build whose copy (into the cell's own folder) hashes to
        the binary the store recorded for it, or verify the inputs, build, verify
        them again, hash the binary, mark the build reusable and take the copy."""
        q = shlex.quote
        bdir, binary = q(self.paths.build_dir), q(self.paths.binary)
        rdir, private = q(self.paths.run_dir), q(self.paths.private_binary)
        limit = int(self.job.spec.build_timeout)
        make_tmp, drop_tmp = own_tmp(self.paths.build_tmp)
        # made again where another cell's clean-up (remove_run_dir) took an empty parent meanwhile
        work, held = f"{rdir}/work", q(posixpath.dirname(self.paths.private_binary))
        made = f"{{ mkdir -p {work} 2>/dev/null || mkdir -p {work} 2>/dev/null || mkdir -p {work}; }}"
        copy = f"rm -rf {rdir} && {made} && mkdir -p {held} && cp {binary} {private}"
        # one that does not hash to the record is said, and rebuilt in the same trip
        cached = (
            f"if [ -f {bdir}/.farm-built ] && [ -f {binary} ]; then {copy} && "
            f"got=$(sha256sum < {private} | cut -c1-64); "
            f'if [ "$got" = {q(recorded or "none")} ]; then echo "@@farm cached $got"; exit 0; fi; '
            f'echo "@@farm cache-mismatch ${{got:-none}}"; fi; '
            if reuse
            else ""
        )
        return (
            f"{cached}"
            f'{verify_inputs_script(self.paths, "altered")}; [ -z "$bad" ] || exit 0; '
            f"rm -rf {bdir} && mkdir -p {bdir} && cd {bdir} && "
            f"{{ {make_tmp}{guarded(command, limit, '> build.log 2>&1 < /dev/null', self.marker)}; {drop_tmp}; "
            f"{verify_inputs_script(self.paths, 'altered-during')}; "
            f'if [ $rc -eq 0 ]; then echo "@@farm built $(sha256sum < {binary} | cut -c1-64)"; '
            # only a build whose inputs stayed intact is marked reusable
            f'if [ -z "$bad" ]; then touch .farm-built && {copy} && '
            f'echo "@@farm copy $(sha256sum < {private} | cut -c1-64)"; fi; else rm -rf {rdir}; fi; '
            f'echo "@@farm rc=$rc"; }}'
        )

    def _build_trip(self, command: str, reuse: bool, recorded: str | None) -> Trip:
        limit = int(self.job.spec.build_timeout)
        log = bytearray()
        return Trip(
            "build",
            self._build_script(command, reuse, recorded),
            limit + KILL_GRACE + CHANNEL_MARGIN + VERIFY_TIMEOUT,
            [("log", f"{self.paths.build_dir}/build.log", self.output_cap, log.extend)],
            state=log,
            spec={
                "reuse": reuse,
                "recorded": recorded or "none",
                "build_dir": self.paths.build_dir,
                "binary": self.paths.binary,
                "run_dir": self.paths.run_dir,
                "private": self.paths.private_binary,
                "command": command,
                "limit": limit,
                "tmp": self.paths.build_tmp,
                "inputs": [[name, placed.folder, placed.digest] for name, placed in input_checks(self.paths)],
            },
        )

    def _build(self) -> str:
        command = render_build(self.job, self.variant, self.snapshot, self.paths)
        self.result.build_command = command
        limit = int(self.job.spec.build_timeout)
        reuse, restaged = True, False
        while True:
            recorded = self.recorded_binary(self.paths.build_key)
            trip, outcome, text = self._go("build", lambda: self._build_trip(command, reuse, recorded))  # noqa: B023
            log = trip.state
            unrecorded = (
                "cached build altered on the node (its binary is not the one recorded): rebuilt"
                if recorded
                else "a cached build with no record of its binary in the results database: rebuilt"
            )
            if re.search(r"^@@farm cache-mismatch ", text, re.M):
                self._detail.append(unrecorded)
            cached = re.search(r"^@@farm cached ([0-9a-f]{64})$", text, re.M)
            if cached:
                if recorded == cached.group(1):
                    self.result.build_cached = True
                    self._built_sha = recorded
                    self.result.binary_sha256 = recorded
                    self.result.evidence.build_exit = 0
                    self.result.build_log = bytes(log)
                    return "cached"
                self._detail.append(unrecorded)
                reuse = False
                continue
            altered = re.findall(r"^@@farm altered (\S+) (\S+)$", text, re.M)
            if altered:
                names = ", ".join(name for name, _ in altered)
                if restaged or self.restage is None:
                    raise InfraError(f"node {self.t.name!r}: staged inputs altered on the node ({names}) again")
                for name, _ in altered:
                    if name == "sources":
                        placed = self.paths.sources
                    elif name == "toolchain" and self.paths.toolchain is not None:
                        placed = self.paths.toolchain
                    else:
                        placed = self.paths.dependencies[name.split(":", 1)[1]]
                    self._detail.append(self.restage(placed) or f"{name} altered on the node: shipped again")
                restaged = True
                continue
            break
        during = re.findall(r"^@@farm altered-during (\S+) (\S+)$", text, re.M)
        if during:
            names = ", ".join(name for name, _ in during)
            raise InfraError(
                f"node {self.t.name!r}: inputs changed on the node while nvcc ran ({names}); "
                "the binary cannot be trusted"
            )
        if re.search(r"^@@farm build-lock-failed$", text, re.M):
            raise InfraError(
                f"node {self.t.name!r}: the lock of the build folder {self.paths.build_dir} was held past the "
                f"build's limit ({limit} s), or could not be taken: another farm building the same cell in this "
                "node's workdir?"
            )
        rc = re.search(r"^@@farm rc=(\d+)$", text, re.M)
        if rc is None:
            raise InfraError(
                f"node {self.t.name!r}: the build wrapper printed no status "
                f"({(outcome.stderr or text).strip()[-300:]!r})"
            )
        exit_code = int(rc.group(1))
        built = re.search(r"^@@farm built ([0-9a-f]{64})$", text, re.M)
        self._built_sha = built.group(1) if built else None
        self.result.binary_sha256 = self._built_sha
        self.result.evidence.build_exit = exit_code
        self.result.build_log = bytes(log)
        if exit_code in (124, 137):
            self.result.build_log += f"\n[farm] build killed at its {limit} s timeout\n".encode()
        if exit_code != 0:
            self.cleaned = True  # the script removed the cell's folder: nothing runs from it
            return "failed"
        if self._built_sha is None:  # nothing at {binary} to hash: a job whose build writes no binary there
            self.result.evidence.build_no_binary = True
            said = f"\n[farm] the build exited 0 but wrote no binary at {self.paths.binary}\n"
            self.result.build_log += said.encode()
            return "failed"
        copy = re.search(r"^@@farm copy ([0-9a-f]{64})$", text, re.M)
        if copy is None or copy.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the binary changed while it was copied into the cell's folder "
                f"(built {str(self._built_sha)[:12]}, copy {copy.group(1)[:12] if copy else 'missing'})"
            )
        if self._built_sha:
            self.remember_binary(self.paths.build_key, self._built_sha)
        return "ok"

    # inspect --------------------------------------------------------------
    def _inspect(self) -> str:
        trip, _, text = self._go("inspect", self._inspect_trip)
        return self._inspected(text, trip.state)

    def _inspect_trip(self) -> Trip:
        binary = shlex.quote(self.paths.private_binary)
        command = self.variant.inspect.format(cuobjdump=shlex.quote(self.cuobjdump), binary=binary)
        bdir = shlex.quote(self.paths.run_dir)
        cuda = "{cuobjdump}" in self.variant.inspect
        tool = f"timeout -k {KILL_GRACE} {LIST_TIMEOUT} {shlex.quote(self.cuobjdump)}"
        lists = (
            f"echo '@@farm elf'; {tool} --list-elf {binary} 2>&1; echo '@@farm ptx'; {tool} --list-ptx {binary} 2>&1; "
            if cuda
            else ""
        )
        kit = self.paths.toolchain
        # the disassembler of a shipped toolkit is the farm user's, writable by any kernel: checked
        # right before it speaks for the binary (as the compiler is around each build)
        kit_check = kit is not None and self.cuobjdump.startswith(kit.folder + "/")
        kit_shell = (
            f"d=$(cd {shlex.quote(kit.folder)} 2>/dev/null && {FOLDER_DIGEST_SH}); "
            f'[ "$d" = {kit.digest} ] || {{ echo "@@farm toolkit-altered ${{d:-missing}}"; exit 0; }}; '
            if kit_check and kit is not None
            else ""
        )
        script = (
            f"{kit_shell}cd {bdir} && "
            f"{guarded(command, int(INSPECT_TIMEOUT), '> inspect.txt 2> inspect.err < /dev/null', self.marker)}; "
            f'echo "@@farm rc=$rc"; '
            f"echo '@@farm sha'; sha256sum < {binary} | cut -c1-64; {lists}exit 0"
        )
        dump = bytearray()
        return Trip(
            "inspect",
            script,
            INSPECT_TIMEOUT + 2 * (LIST_TIMEOUT + KILL_GRACE) + CHANNEL_MARGIN,
            [("dump", f"{self.paths.run_dir}/inspect.txt", SASS_LIMIT, dump.extend)],
            state=dump,
            # a compile-only cell ends here: its folder goes in the same round trip
            clean_up=self.result.expectation.outcome.value == "compile-only",
            spec={
                "kit": [kit.folder, kit.digest] if kit_check else None,
                "run_dir": self.paths.run_dir,
                "private": self.paths.private_binary,
                "command": command,
                "limit": int(INSPECT_TIMEOUT),
                "list_limit": LIST_TIMEOUT,
                "cuobjdump": self.cuobjdump if cuda else None,
                "instructions": dict(self.variant.instructions),
                "sass_limit": SASS_LIMIT,
            },
        )

    def _inspected(self, text: str, dump: bytearray) -> str:
        ev = self.result.evidence
        kit = self.paths.toolchain
        cuda = "{cuobjdump}" in self.variant.inspect
        altered = re.search(r"^@@farm toolkit-altered (\S+)$", text, re.M)
        if altered:
            raise InfraError(
                f"node {self.t.name!r}: the shipped toolkit changed on the node before inspection "
                f"(digest {altered.group(1)[:12]}, expected {kit.digest[:12] if kit else '?'}); not inspected"
            )
        rc = re.search(r"@@farm rc=(\d+)", text)
        ev.inspect_exit = int(rc.group(1)) if rc else 255
        sha = re.search(r"@@farm sha\n([0-9a-f]{64})", text)
        if sha is None or sha.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the cell's copy of the binary changed on the node before inspection "
                f"(sha256 {sha.group(1)[:12] if sha else 'unreadable'}, built {str(self._built_sha)[:12]})"
            )
        if cuda:
            elf_part = text.split("@@farm elf", 1)[-1].split("@@farm ptx", 1)[0]
            ptx_part = text.split("@@farm ptx", 1)[-1]
            self.result.elf_targets = sorted({f"sm_{a}{s}" for a, s in ELF_TARGETS.findall(elf_part)})
            self.result.ptx_targets = sorted({f"sm_{a}{s}" for a, s in PTX_TARGETS.findall(ptx_part)})
            cc = self.result.expectation.cc
            self.result.code_path = code_path_for(cc, self.result.elf_targets, self.result.ptx_targets)
        if ev.inspect_exit != 0:
            return "failed"
        counts = count_instructions(dump.decode("utf-8", "replace"), list(self.variant.instructions))
        self.result.instruction_counts = counts
        ev.missing_instructions = {
            name: (counts[name], needed) for name, needed in self.variant.instructions.items() if counts[name] < needed
        }
        return "failed" if ev.missing_instructions else "ok"

    # run ------------------------------------------------------------------
    def _run(self) -> str:
        try:
            trip, outcome, text = self._go("run", lambda: self._run_trip(self._built_sha or ""))
        finally:
            self._release()
        return self._ran(trip, outcome, text)

    def _run_trip(self, expected: str | None) -> Trip:
        """The run's trip; `expected` is the sha256 the cell's copy must hash to
        (None: the one the node's build gate took, in a trip with the build)."""
        limit = int(self.variant.timeout or self.job.spec.timeout)
        rdir = self.paths.run_dir
        work = f"{rdir}/work"
        copy = self.paths.private_binary
        files = kernel_files(rdir)
        served = runs_other_programs(self.variant.run)  # the runner starts each kernel command itself
        command = f"ulimit -f {OUTPUT_LIMIT // 512}; " + kernel_run(self.variant.run, copy, served=served)
        shell_command = f"ulimit -f {OUTPUT_LIMIT // 512}; " + kernel_run(self.variant.run, copy, files)
        gpu = self.result.gpu
        # pinned by UUID: CUDA's device order need not be nvidia-smi's
        pin = f"export CUDA_VISIBLE_DEVICES={shlex.quote(gpu.uuid)}; " if gpu is not None else ""
        q = shlex.quote
        wait, queue_on_node = self._queue_on_node(gpu)
        make_tmp, drop_tmp = own_tmp(self.paths.run_tmp)
        word = '"$farm_sha"' if expected is None else q(expected)
        fresh = ""
        if self._fresh_copy:  # noderunner.take_copy, as the shell says it
            made = f"mkdir -p {q(work)} {q(posixpath.dirname(copy))}"
            fresh = f"rm -rf {q(rdir)} && {made} && cp {q(self.paths.binary)} {q(copy)}; "
        script = (
            # hashed once the GPU's lock is held: the run before, and what it left, are gone by then
            f"{queue_on_node}{fresh}{self._binary_check(word)}cd {q(work)} && {{ {pin}{make_tmp}t0=$({NOW_NS}); "
            f"{guarded(shell_command, limit, '> ../stdout 2> ../stderr < /dev/null 9>&-', self.marker)}; "
            # the clock is read before the leftovers are killed, and printed after: none can follow it
            f't1=$({NOW_NS}); {self._reap_cell()}; {drop_tmp}; echo "@@farm ns ${{q0:-$t0}} $t0 $t1"; '
            'echo "@@farm checked $got"; echo "@@farm $rc"; }'
        )
        spec = self.job.spec
        stdout = StreamScan({"pass": spec.pass_marker}, self.output_cap)
        stderr = StreamScan({"refusal": spec.refusal_marker}, self.output_cap)
        statuses = bytearray()  # each kernel command's exit status (kernel_run)
        other = bytearray()  # what the run's other commands printed (kernel_run): shown, never matched
        whole = 1 << 62  # markers are matched over all of it; StreamScan keeps a bounded copy
        return Trip(
            "run",
            script,
            wait + limit + KILL_GRACE + CHANNEL_MARGIN,
            [
                ("stdout", f"{rdir}/stdout", whole, stdout.feed),
                ("stderr", f"{rdir}/stderr", whole, stderr.feed),
                ("status", files[0], STATUS_LIMIT, statuses.extend),
                ("other", files[1], OTHER_LIMIT, other.extend),
            ],
            state=(stdout, stderr, statuses, other, gpu, wait, limit, time.monotonic()),
            clean_up=not (self._sanitizing or self._may_confirm),  # a sanitize stage, a second run: the copy again
            release=True,  # the GPU is free once the kernel is gone; its output needs none
            spec={
                "private": copy,
                "copy_from": self.paths.binary if self._fresh_copy else None,
                "expected": expected,
                "lock": self._gpu_lock(gpu) if queue_on_node else None,
                "wait": wait,
                "run_dir": rdir,
                "command": command,
                "kernel_files": files,
                "served": served,
                "calls": kernel_call_words(self.variant.run) if served else [],
                "tmp": self.paths.run_tmp,
                "limit": limit,
                "gpu": gpu.uuid if gpu is not None else None,
                "guarded": self.guarded,
            },
        )

    def _ran(self, trip: Trip, outcome: CommandResult, text: str) -> str:
        stdout, stderr, statuses, other, gpu, wait, limit, clock = trip.state
        elapsed = self._clock[1] if self._clock else time.monotonic() - clock
        self._check_started(text, gpu, wait)
        # the last of each status line: a kernel of the same user could have written a
        # forged one into the shell's own stdout (/proc/PPID/fd/1) before it ended,
        # but never after the farm's own, which come once it and its leftovers are gone
        match = last_match(r"^@@farm (\d+)$", text)
        if not match:
            raise InfraError(
                f"node {self.t.name!r}: the run wrapper printed no status ({(outcome.stderr or text).strip()[-300:]!r})"
            )
        # what the node checked its copy against before it ran, said once the kernel is gone
        checked = last_match(r"^@@farm checked (\S*)$", text)
        if checked is None or checked.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the binary the node ran is not the one the farm inspected "
                f"(checked {checked.group(1)[:12] if checked else 'nothing'}, built {str(self._built_sha)[:12]})"
            )
        ev = self.result.evidence
        kernel = kernel_statuses(bytes(statuses))
        ev.kernel_started = bool(kernel)
        notes = bytes(statuses).split()
        ev.kernel_cannot_start = CANNOT_START_NOTE.encode() in notes
        ev.kernel_launcher_writable = LAUNCHER_WRITABLE_NOTE.encode() in notes
        ev.kernel_copy_gone = COPY_GONE_NOTE.encode() in notes
        ev.kernel_exit = next((code for code in kernel if code), 0) if kernel else None
        ev.run_exit = ev.kernel_exit or int(match.group(1))  # the kernel's failure, else the run's own status
        clocks = last_match(r"^@@farm ns (\d+) (\d+) (\d+)$", text)
        if clocks:  # the kernel's own time on the node, without the round trip and its output's transfer
            queued, started, ended = (int(c) for c in clocks.groups())
            elapsed = (ended - started) / 1e9
            if started - queued > 1e9:
                self._detail.append(f"waited {(started - queued) / 1e9:.1f} s on the node for the GPU")
        ev.run_timed_out = ev.run_exit in (124, 137) and elapsed >= limit * 0.98
        ev.launcher_timed_out = ev.kernel_exit == 124 and "timeout" in kernel_launchers(self.variant.run)
        self.result.run_seconds = elapsed
        leftover = last_match(r"^@@farm leftover (\d+)$", text)
        self.result.leftover = int(leftover.group(1)) if leftover else 0
        if self.result.leftover:
            self._detail.append(f"{self.result.leftover} leftover processes killed after the kernel ended")
        self._note_confinement(trip, text, "the kernel ran")
        forged = last_match(r"^@@farm forged (\d+)$", text)  # noderunner.KernelFiles
        ev.kernel_requests_forged = int(forged.group(1)) if forged else 0
        if said := other_output(bytes(other)):
            self._detail.append(f"the run's other commands printed (not read for a marker): {said}")
        ev.other_last_line = other_output(bytes(other).rstrip().rsplit(b"\n", 1)[-1], 200)
        if len(kernel) > 1:
            self._detail.append(f"the run started the kernel {len(kernel)} times (exits {', '.join(map(str, kernel))})")
        self.result.stdout = stdout.finish()
        self.result.stderr = stderr.finish()
        ev.pass_line = self.result.stdout.matches.get("pass")
        ev.refusal_line = self.result.stderr.matches.get("refusal")
        ev.stderr_last_line = self.result.stderr.last_line
        return "ok" if ev.run_exit == 0 else "failed"

    def _note_confinement(self, trip: Trip, text: str, what: str) -> None:
        """A detail where the stage's kernel ran unconfined. Only the python runner
        confines, and says so in its own stream: under the shell scripts a kernel
        could print the line into the farm's shell (/proc/PPID/fd/1)."""
        # the runner ran it where _round_trip (or _send_together, on a streaming transport) sent it there
        by_runner = self.python is not None and trip.spec is not None and self.t.streams_output
        if not by_runner or last_match(r"^@@farm confined (\d+)$", text) is None:
            why = last_match(r"^@@farm unconfined (.+)$", text) if by_runner else None
            self._detail.append(
                f"{what} unconfined ("
                + (why.group(1).strip()[:200] if why else "it went through the node's shell, which cannot confine it")
                + "): it could have written other cells' files"
                # the shell scripts hold the kernel's files open where every program of the run inherits them
                + ("" if by_runner or what != "the kernel ran" else ", and the run's programs its output and status")
            )

    def _binary_check(self, expected: str) -> str:
        copy = shlex.quote(self.paths.private_binary)
        return (
            f'got=$(sha256sum < {copy} 2>/dev/null | cut -c1-64); if [ "$got" != {expected} ]; then '
            f'echo "@@farm binary-altered ${{got:-missing}}"; exit 0; fi; '
        )

    def _queue_on_node(self, gpu: Gpu | None) -> tuple[int, str]:
        """(seconds it may wait, shell) to take the GPU's lock on the node, or (0, "")."""
        if not (self.gpu_slots.on_node and gpu is not None):
            return 0, ""
        # the GPU's lock, held by this subshell until the kernel and its leftovers are gone;
        # the wait carries the run's marker, so a stop kills a queued run before it starts
        # the runs ahead are bounded by their own limits; a lock held past them is another
        # farm's or a stuck kernel's, and waiting longer would only stretch a dead node's timeout
        wait = int(self._ahead) + QUEUE_SLACK
        lock = shlex.quote(self._gpu_lock(gpu))
        return wait, (
            f"q0=$({NOW_NS}); exec 9>>{lock} && {self.marker}flock -w {wait} 9 || "
            f'{{ echo "@@farm gpu-wait-failed $q0 $({NOW_NS})"; exit 0; }}; '
        )

    def _gpu_lock(self, gpu: Gpu) -> str:
        return f"{self.snapshot.workdir}/gpu-{gpu.uuid}.lock"

    def _check_started(self, text: str, gpu: Gpu | None, wait: int) -> None:
        altered = re.search(r"^@@farm binary-altered (\S+)", text, re.M)
        if altered:
            raise InfraError(
                f"node {self.t.name!r}: the cell's copy of the binary changed on the node after inspection "
                f"(sha256 {altered.group(1)[:12]}, built {str(self._built_sha)[:12]}); not run"
            )
        if re.search(r"^@@farm gpu-wait-failed", text, re.M):
            raise InfraError(
                f"node {self.t.name!r}: {gpu.label if gpu else 'the GPU'} stayed locked for {wait} s "
                "(another farm run on this node, or a stuck kernel): not run"
            )

    # sanitize -------------------------------------------------------------
    @property
    def _sanitizing(self) -> bool:
        """The variant asks for sanitizer runs and this cell runs on a GPU."""
        return bool(self.variant.sanitize) and self.result.expectation.outcome.value == "pass"

    def _sanitize(self) -> str:
        """The cell's binary again under each of the variant's compute-sanitizer tools."""
        tools = list(self.variant.sanitize)
        limit = int(self.job.spec.sanitize_timeout)
        rdir = self.paths.run_dir
        run, private = self.variant.run, self.paths.private_binary
        gpu = self._sanitize_gpu
        pin = f"export CUDA_VISIBLE_DEVICES={shlex.quote(gpu.uuid)}; " if gpu is not None else ""
        wait, queue_on_node = self._queue_on_node(gpu)
        if gpu is not None and gpu != self.result.gpu:
            self._detail.append(f"on {gpu.label}")
        quiet = "> /dev/null 2>&1 < /dev/null 9>&-"  # its numbers were judged by the run stage
        make_tmp, drop_tmp = own_tmp(self.paths.run_tmp)
        q = shlex.quote
        # a fresh copy of the build before each tool, hashed: see noderunner.sanitize
        made = f"mkdir -p {q(rdir + '/work')} {q(posixpath.dirname(private))}"
        fresh = f"rm -rf {q(private)} && {made} && cp {q(self.paths.binary)} {q(private)}; "
        check = self._binary_check(q(self._built_sha or ""))
        runs = "; ".join(
            f"{fresh}{check}t0=$({NOW_NS}); "
            f"{guarded(sanitize.tool_command(tool, rdir, run, private), limit, quiet, self.marker)}; "
            f't1=$({NOW_NS}); {self._reap_cell()}; echo "@@farm tool {tool} $rc $t0 $t1"'
            for tool in tools
        )
        script = (
            f"{fresh}{check}"
            f"{sanitize.locate(self.t.node.compute_sanitizer, self.snapshot.nvcc_path, self.snapshot.workdir)}; "
            f"{queue_on_node}cd {shlex.quote(rdir + '/work')} && {{ {pin}{make_tmp}{runs}; {drop_tmp}; }}"
        )
        logs = {tool: bytearray() for tool in tools}
        trip = Trip(
            "sanitize",
            script,
            wait + len(tools) * (limit + KILL_GRACE) + CHANNEL_MARGIN,
            [(tool, sanitize.log_path(rdir, tool), sanitize.LOG_LIMIT, logs[tool].extend) for tool in tools],
            clean_up=True,
            release=True,
            spec={
                "private": self.paths.private_binary,
                "copy_from": self.paths.binary,
                "expected": self._built_sha,
                "lock": self._gpu_lock(gpu) if queue_on_node and gpu is not None else None,
                "wait": wait,
                "run_dir": rdir,
                "limit": limit,
                "tmp": self.paths.run_tmp,
                "gpu": gpu.uuid if gpu is not None else None,
                "tools": [
                    [tool, sanitize.tool_command(tool, rdir, run, private), sanitize.log_path(rdir, tool)]
                    for tool in tools
                ],
                "configured": self.t.node.compute_sanitizer,
                "nvcc": self.snapshot.nvcc_path,
                "workdir": self.snapshot.workdir,
                "guarded": self.guarded,
            },
        )
        try:
            outcome, text = self._round_trip(trip)
        finally:
            self._release()
        self._check_started(text, gpu, wait)
        missing = re.search(r"^@@farm no-sanitizer (.*)$", text, re.M)
        if missing:
            error = InfraError(
                f"node {self.t.name!r}: no compute-sanitizer (looked at {missing.group(1) or 'PATH'}); "
                "set the node's compute_sanitizer, or drop `sanitize` from the variant"
            )
            error.retryable = False
            raise error
        reports = []
        for tool in tools:
            ran = last_match(rf"^@@farm tool {tool} (\d+) (\d+) (\d+)$", text)
            if ran is None:
                raise InfraError(
                    f"node {self.t.name!r}: the sanitize script printed no status for {tool} "
                    f"({(outcome.stderr or text).strip()[-300:]!r})"
                )
            code, started, ended = (int(x) for x in ran.groups())
            timed_out = code in (124, 137) and (ended - started) / 1e9 >= limit * 0.98
            found = sanitize.report(tool, code, timed_out, bytes(logs[tool]))
            if isinstance(found, str):
                error = InfraError(f"node {self.t.name!r}: {found}")
                error.retryable = False
                raise error
            reports.append(found)
            self._detail.append(
                f"{tool}: " + ("timed out" if found.timed_out else f"{found.errors} errors, exit {found.exit_code}")
            )
        self._note_confinement(trip, text, "its sanitizer runs ran")
        self.result.evidence.sanitizer = tuple(reports)
        return "ok" if all(r.clean for r in reports) else "failed"

    def _reap_cell(self, tag: str = "leftover") -> str:
        """Kill what the kernel left running, found by the cell's marker (or nothing without one)."""
        cell = self.marker_env.get("FARM_CELL")
        return reap("FARM_CELL", cell, tag) if cell else "true"
