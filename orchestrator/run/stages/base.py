"""A cell's shared state on its way through the stages: what each stage reads and writes."""

from __future__ import annotations

import contextlib
import re
import shlex
import threading
from collections.abc import Callable, Mapping
from datetime import datetime

from orchestrator.config.job_spec import VariantSpec
from orchestrator.config.jobs import Job
from orchestrator.errors import InfraError
from orchestrator.run import canary, denied_files, driver_check, gpu_state, own_fill, probe, snapshot, work_folder
from orchestrator.run.bundle import Placed
from orchestrator.run.cell import CellPaths, CellResult
from orchestrator.run.commands import KILL_GRACE, NOW_NS
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.slots import GpuSlots
from orchestrator.run.snapshot import Gpu, NodeSnapshot
from orchestrator.run.stage_trip import Fetched, Trip, last_match
from orchestrator.run.trips import CellTrips
from orchestrator.transport import Transport
from orchestrator.transport.base import reap

# the stage's control lines, compiled once (issue 11: a cell reads a dozen)
_BINARY_ALTERED = re.compile(r"^@@farm binary-altered (\S+)", re.M)
_GPU_WAIT_FAILED = re.compile(r"^@@farm gpu-wait-failed", re.M)


def stopped_line(text: str) -> str:
    """The last line a stage's shell script printed before its shell's last `@@farm end` (trips._wrap):
    where a line that stops the script (`echo ...; exit 0`) is the farm's own, not one written mid-run."""
    end = last_match(r"^@@farm end \d+$", text)
    return (text[: end.start()] if end else text).rstrip("\n").rsplit("\n", 1)[-1]


QUEUE_SLACK = 10  # seconds a run may wait on its GPU's lock beyond the limits of the runs queued before it
LOOKED = "@@farm-looked"  # the last line of the look at the node after a failed stage


class CellStages(CellTrips):
    """What every stage of a cell shares: its node, job, paths and result, the GPU it
    holds, and the trips it sends (trips.CellTrips). The stages themselves are
    build.BuildStage, inspect.InspectStage, run.RunStage and sanitize.SanitizeStage;
    pipeline.CellPipeline runs them in order."""

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
        unreadable: tuple[str, ...] = (),
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
        # the farm's secret files, where the node is its own machine: no stage's command may read them
        self.unreadable = list(unreadable)
        self._built_sha: str | None = None
        self.cleaned = False  # the cell's folder on the node is gone
        self._slot: list[tuple[Gpu | None, float]] = []  # the GPU held (or queued on), with its run's limit
        self._ahead = 0.0  # seconds of runs queued on the node before this cell's
        self._sanitize_gpu: Gpu | None = None  # the GPU the sanitizer runs hold
        self._plan_ahead: Callable[[], list[Trip]] | None = None  # stages to send with the build
        self._fetched: dict[str, Fetched | InfraError] = {}  # later stages read ahead, or why they broke
        self._clock: tuple[datetime, float] | None = None  # a fetched stage's own start and seconds
        self._fresh_copy = False  # the run takes a fresh copy of the build in a fresh folder first
        self._build_room: list[str] = []  # the build's folders' room at its lowest while it ran (room.py)

    def _node_trouble(self) -> tuple[str, str, str]:
        """After a failed stage, once the cell's own files are gone: (why the node's work or
        temporary folder is short of room, or its work folder can no longer be written, why the
        cell's GPU no longer answers, why no program of the farm could have it: gpu_state.py),
        each "" where not. The probe's checks are of the run's start: a disk another tenant fills
        mid-run made build-fail, inspect-fail or fail, and so did a card lost mid-run, and a work
        folder turned read-only (work_folder.py). One round trip, on failures only; "" where the
        node cannot say."""
        q = shlex.quote
        inodes = probe.free_inodes_sh('"$d"')  # its free inodes too: one out of them fails as one out of room
        ev = self.result.evidence
        failed_build = ev.build_exit not in (None, 0)
        # and a failed build's folder's size on each, before the canary writes: its own files (own_fill.py)
        own = own_fill.own_size_sh(q(self.paths.build_dir)) if failed_build else ("", "")
        command = (
            f'{own[0]}for d in {q(self.snapshot.workdir)} "${{TMPDIR:-/tmp}}"; do '
            f'echo "$(df -Pk "$d" 2>/dev/null | awk \'NR==2 {{print $4}}\') $({inodes}){own[1]}"; done; '
            + work_folder.unwritable_sh(q(self.snapshot.workdir))
        )
        if failed_build:  # the files its log says were refused: of the node's own? (round 244)
            own = (self.paths.build_dir, self.paths.run_dir)
            dirs = denied_files.tool_dirs(self.snapshot.compilers, self.snapshot.nvcc_path)
            asked = denied_files.candidates(self.result.build_log, self.paths.build_dir, own, dirs)
            command += f"; {denied_files.denied_sh(asked)}" if asked else ""
            # the farm's own program built by the build's compilers: the log's words are the kernel's (round 260)
            # with the host compiler the build chose, however it spelled it (round 273)
            compilers, ccbin = canary.plan(self.result.build_command or "", self.snapshot.nvcc_path)
            command += f"; {canary.canary_sh(compilers, self.snapshot.workdir, ccbin)}" if compilers else ""
        # the card of the failing stage: the run's, else the sanitizer runs' (a card lost while the
        # tool ran a pass again had the kernel judged sanitizer-error: a red-team finding)
        # (or a run that exited 0 after CUDA's own error: cuda_errors.py, or without its pass marker)
        gpu = self.result.gpu if self._run_unpassed() else None
        if gpu is None and any(not report.clean for report in ev.sanitizer):
            gpu = self._sanitize_gpu
        if gpu is not None:
            command += (
                f"; echo @@farm-gpu; said=$({probe.TOOL} nvidia-smi --query-gpu={driver_check.GPU_QUERY} "
                f"--format=csv,noheader -i {q(gpu.uuid)} 2>&1); rc=$?; "
                'printf "%s\\n" "$said" | head -c 2000; echo; echo "rc=$rc"'
                + gpu_state.state_sh(gpu.uuid, probe.TOOL, self.snapshot.workdir)
            )
        # the df and, for a card, every nvidia-smi it may ask, each to its own bound: a look cut off
        # by its own timeout says nothing, and a lost card (whose nvidia-smi hangs) failed the kernel
        calls = 1 + gpu_state.STATE_CALLS if gpu is not None else 0
        built = canary.SECONDS + 10 if ev.build_exit not in (None, 0) else 0  # each canary build's own bound
        # its last line says the look ran to its end: a session cut mid-look (a node going down with
        # its card) answers with part of it or nothing, which had read as a sound node (InfraError)
        command += f"; echo {LOOKED}"
        ran = self.t.run(command, timeout=60 + built * 2 + calls * (probe.TOOL_SECONDS + probe.TOOL_GRACE))
        said, looked, _ = ran.stdout.partition(f"{LOOKED}\n")
        if not looked and not ran.stdout.endswith(LOOKED):  # a transport's own lines may follow it
            raise InfraError(f"the look ended unfinished (exit {ran.exit_code}: {(ran.stderr or said)[-200:]!r})")
        said = said.removesuffix(LOOKED)
        room, _, answer = said.partition("@@farm-gpu\n")
        answer, state, apps = gpu_state.split_answer(answer)
        lost = self._gpu_gone(gpu, answer)
        unfit = gpu_state.gpu_unfit(gpu.uuid, self.snapshot.workdir, state, apps, gpu.ecc) if gpu and not lost else ""
        if gpu and not lost and not unfit:
            unfit = driver_check.row_driver_changed(self.snapshot.driver, gpu.uuid, answer)
        room_lines = room.splitlines()
        short = self._short_of_room(room_lines)
        # a failed build whose own files took the room, still there or gone since: its own build-fail,
        # not the node's (own_fill.py, red-team round 273); a canary built without that room says nothing
        filled = failed_build and short and own_fill.own_fill(own_fill.at_look(room_lines, self._build_room))
        if filled:
            short, ev.build_filled = "", filled
        # or short while the build ran, the farm's own samples: a disk filled and freed since failed
        # nvcc with "No space left on device", stored as the kernel's build-fail (red-team round 262)
        if not short and failed_build and (low := self._short_of_room(self._build_room)):
            ev.build_filled = ev.build_filled or own_fill.own_fill(self._build_room)
            short = "" if ev.build_filled else f"while its build ran, {low.removeprefix('its ')}"
        ev.build_unreadable = denied_files.denied(room_lines) or ("" if filled else canary.broken(room_lines))
        ev.build_denied = ev.build_denied and not ev.build_unreadable  # a read refused, not a write
        folders = f"the node ran out of room during the cell ({short})" if short else ""
        return folders or work_folder.unwritable(room_lines, self.snapshot.workdir), lost, unfit

    def _run_unpassed(self) -> bool:
        """The run ended without passing: a non-zero exit, CUDA's own error words, or an exit 0 without
        the pass marker. The last is a kernel that never checked its CUDA calls on a card gone off the bus
        (its launches did nothing, its result check printed and returned 0): not asked after, its card's
        loss was never read, and the kernel was judged `fail` (red-team round 147)."""
        ev = self.result.evidence
        unbacked = bool(ev.cuda_error) or bool(ev.output_at_limit)  # no pass either (classify)
        return ev.run_exit is not None and (ev.run_exit != 0 or unbacked or ev.pass_line is None)

    def _gpu_slowed(self) -> str:
        """Why the cell's card ran slowed by its own trouble (a fan, a power brake), as nvidia-smi
        says after a run confirmed slower than the cell's median, else "": a card held down made
        every kernel on it perf-regression, a regression no kernel made (a red-team finding)."""
        gpu = self.result.gpu
        if gpu is None:
            return ""
        try:
            said = self.t.run(gpu_state.slowed_sh(gpu.uuid, probe.TOOL), timeout=60).stdout
        except InfraError:
            return ""
        slowed = gpu_state.gpu_slowed(said)
        return f"nvidia-smi says {gpu.label} is held down by its own {slowed}" if slowed else ""

    @staticmethod
    def _short_of_room(lines: list[str]) -> str:
        need = snapshot.MIN_FREE >> 10
        for where, line in zip(("work folder", "temporary folder"), lines, strict=False):
            free, files = ([*line.split(), "", ""])[:2]
            if free.isdigit() and int(free) < need:
                return f"its {where} had {int(free) >> 10} MiB free, the farm needs {need >> 10} MiB there"
            if files.isdigit() and int(files) < snapshot.MIN_FREE_INODES:
                need_files = snapshot.MIN_FREE_INODES
                return f"its {where} had {files} inodes free (files it can make), the farm needs {need_files}"
        return ""

    @staticmethod
    def _gpu_gone(gpu: Gpu | None, answer: str) -> str:
        """Why nvidia-smi's answer for the cell's GPU says it is gone, else "" (also where the
        node said nothing of it: the check is for a card lost, not a node that cannot tell)."""
        if gpu is None or not answer.strip():
            return ""
        lines = [line.strip() for line in answer.strip().splitlines()]
        row = [line for line in lines if gpu.uuid in line]
        # listed, but its fields the driver's error words (an Xid, a card that needs a reset): gone
        # bad, though nvidia-smi exits 0 (it failed the kernel: a red-team finding)
        unreadable: list[str] = []  # its CC no longer reads ("[N/A]"): the probe leaves such a card out
        driver_check.smi_gpus(row, unreadable)
        if lines[-1] == "rc=0" and row and not unreadable and not any(gpu_state.BAD_FIELD.search(x) for x in row):
            return ""
        said = " / ".join(line for line in lines[:-1] if line)[:200] or "nothing"
        if lines[-1] in ("rc=124", "rc=137"):  # its `timeout` ended it: said as "no longer lists ... (rc=124)"
            hung = f"nvidia-smi did not answer about {gpu.label} within {probe.TOOL_SECONDS} s, killed"
            return f"{hung} (a hung driver or card: look for an Xid in the node's dmesg)"
        if lines[-1] == "rc=0" and row:
            return f"nvidia-smi lists {gpu.label} with the driver's error words ({said})"
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

    def _ran_confined(self, trip: Trip, text: str) -> bool:
        """Whether the node's runner said the stage's kernel ran confined: its last word on it, said once
        the kernel and its leftovers were gone (an unconfined kernel could print an earlier one)."""
        by_runner = self.python is not None and trip.spec is not None and self.t.streams_output
        said = last_match(r"^@@farm (un)?confined\b.*$", text) if by_runner else None
        return said is not None and said.group(1) is None

    def _note_confinement(self, trip: Trip, text: str, what: str) -> None:
        """A detail where the stage's kernel ran unconfined. Only the python runner
        confines, and says so in its own stream: under the shell scripts a kernel
        could print the line into the farm's shell (/proc/PPID/fd/1)."""
        # the runner ran it where _round_trip (or _send_together, on a streaming transport) sent it there
        by_runner = self.python is not None and trip.spec is not None and self.t.streams_output
        if by_runner and (agents := last_match(r"^@@farm agent-open (.+)$", text)):  # review 191
            self._detail.append(
                f"{what} confined, but with the farm's SSH agent in reach ({agents.group(1).strip()[:200]}): "
                "it could log into nodes with the agent's keys; run a farm with a local node as a user of its own"
            )
        if not by_runner or last_match(r"^@@farm confined (\d+)$", text) is None:
            self.result.ran_unconfined = True
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

    def _by_runner(self, trip: Trip) -> bool:
        """Whether the node's python3 ran the stage (_round_trip, _send_together): its stream is its own,
        where the shell scripts' stdout is reachable by the kernel (/proc/PID/fd/1)."""
        return self.python is not None and trip.spec is not None and self.t.streams_output

    def _check_started(self, text: str, gpu: Gpu | None, wait: int, trip: Trip) -> None:
        # the shell scripts print either line and end (`exit 0`): a real one is the script's last before
        # its shell's end line. A kernel wrote one into the script's stdout mid-run, and its node was
        # infra-error, tried again and retired, its other kernels' cells skipped (red-team round 271)
        said = text if self._by_runner(trip) else stopped_line(text)
        altered = _BINARY_ALTERED.search(said)
        if altered:
            raise InfraError(
                f"node {self.t.name!r}: the cell's copy of the binary changed on the node after inspection "
                f"(sha256 {altered.group(1)[:12]}, built {str(self._built_sha)[:12]}); not run"
            )
        if _GPU_WAIT_FAILED.search(said):
            raise InfraError(
                f"node {self.t.name!r}: {gpu.label if gpu else 'the GPU'} stayed locked for {wait} s "
                "(another farm run on this node, or a stuck kernel): not run"
            )

    @property
    def _cell(self) -> str:
        """The cell's FARM_CELL marker: whose set-backs the node's log says (work_folder.modes_sh)."""
        return self.marker_env.get("FARM_CELL", "-")

    def _reap_cell(self, tag: str = "leftover", start: str = "0") -> str:
        """Kill what the kernel left running, found by the cell's marker (or nothing without one)."""
        cell = self.marker_env.get("FARM_CELL")
        return reap("FARM_CELL", cell, tag, start) if cell else "true"
