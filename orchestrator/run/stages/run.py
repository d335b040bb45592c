"""The run stage: the kernel on its GPU, its output scanned for markers as it streams."""

from __future__ import annotations

import posixpath
import re
import shlex
import time

from orchestrator.classify.cuda_errors import MARKER, cuda_error_pattern, where_said
from orchestrator.config.kernel_calls import (
    kernel_call_words,
    kernel_launchers,
    launcher_lines,
    run_names,
    runs_once,
    runs_other_programs,
    runs_unseen_text,
)
from orchestrator.errors import InfraError
from orchestrator.outcomes import Outcome
from orchestrator.run.commands import (
    CANNOT_START_NOTE,
    CHANNEL_MARGIN,
    COPY_GONE_NOTE,
    KILL_GRACE,
    LAUNCHER_WRITABLE_NOTE,
    NOW_NS,
    OTHER_LIMIT,
    OUTPUT_LIMIT,
    STARTED_NOTE,
    STATUS_LIMIT,
    guarded,
    jit_started,
    kernel_files,
    kernel_run,
    kernel_statuses,
    other_output,
    own_tmp,
    unread_failing,
)
from orchestrator.run.driver_check import MODULE_NOW_SH, module_changed
from orchestrator.run.node_limits import fork_failed, forks_note, node_cannot_fork, out_of_processes
from orchestrator.run.preload import preload_started
from orchestrator.run.stage_trip import Trip, last_match
from orchestrator.run.stages.base import CellStages
from orchestrator.run.stages.failure_words import (
    PASS_BLANKS,
    PASS_TEXT,
    as_text,
    as_yaml,
    marker_missing,
    near_miss,
    unshipped_input,
    with_end_blanks,
)
from orchestrator.run.streams import StreamScan
from orchestrator.run.work_folder import farm_folders, modes_sh, note_folders
from orchestrator.transport import CommandResult


def _lost_check(paths: tuple[str, ...]) -> str:
    """Shell saying `@@farm files-lost NAMES` for each of the run's files that is no file once it
    ended (node/files.py files_lost, the python runners' check)."""
    each = " ".join(shlex.quote(path) for path in paths)
    return (
        f'farm_l=; for farm_f in {each}; do [ -f "$farm_f" ] || farm_l="$farm_l ${{farm_f##*/}}"; done; '
        '[ -z "$farm_l" ] || echo "@@farm files-lost$farm_l"; '
    )


def own_bits_sh(paths: tuple[str, ...]) -> str:
    """Shell giving each of PATHS (the cell's own run folder first, then its run files) its owner's read
    and write bits, a folder its search bit, where the login owns it and it is no link: node/farm_folders.py
    own_bits_back, the python runners' (a failing kernel that took them was the node's infra-error, review 272)."""
    each = " ".join(shlex.quote(path) for path in paths)
    return (
        f'for farm_f in {each}; do [ -O "$farm_f" ] && [ ! -L "$farm_f" ] && '
        '{ [ -d "$farm_f" ] || [ -f "$farm_f" ]; } && chmod u+rwX -- "$farm_f" 2>/dev/null; done; '
    )


def run_files_lost(text: str) -> str:
    """The run files the node said were lost (`@@farm files-lost`), read only on the line just before
    the last `@@farm checked` one, which the node prints once the kernel and its leftovers are gone:
    a kernel's earlier forged line makes no failing run the node's trouble."""
    checked = last_match(r"^@@farm checked .*$", text)
    if checked is None:
        return ""
    before = text[: checked.start()].rstrip("\n").rsplit("\n", 1)[-1]
    return before.removeprefix("@@farm files-lost ").strip() if before.startswith("@@farm files-lost ") else ""


def undying_error(node: str, text: str, forgeable: bool = False) -> None:
    """InfraError where the node said a process of the cell outlived its kill and the wait after it
    (`@@farm undying PID CMD`, node/ended.py and transport.base.ended_sh): it may still hold the GPU
    the next cell runs on, and what the cell saw is no verdict on the kernel (a line a kernel forged
    under the shell scripts costs its own cell a verdict, never another's)."""
    said = re.findall(r"^@@farm undying (\d+ .*)$", text, re.M)
    if said:
        error = InfraError(
            f"node {node!r}: a process of the cell would not die: {'; '.join(s.strip()[:200] for s in said[:3])}"
            + (f" (and {len(said) - 3} more)" if len(said) > 3 else "")
            # FORGEABLE: the shell scripts, whose stdout the kernel reaches; its line cannot be told from
            # the node's, and tried again it retired the node, its other kernels' cells skipped (round 271)
            + (" (or the kernel wrote that line into the node's shell script, which it can reach)" if forgeable else "")
        )
        error.retryable = not forgeable
        raise error


class RunStage(CellStages):
    """Runs the cell's own copy of the binary, pinned to its GPU, and reads what it printed."""

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
        folders = farm_folders(self.snapshot.workdir, rdir)
        work = f"{rdir}/work"
        copy = self.paths.private_binary
        files = kernel_files(rdir)
        own_bits = own_bits_sh((rdir, f"{rdir}/stdout", f"{rdir}/stderr", *files))  # once the kernel is gone
        served = runs_other_programs(self.variant.run)  # the runner starts each kernel command itself
        command = f"ulimit -f {OUTPUT_LIMIT // 512}; " + kernel_run(self.variant.run, copy, served=served)
        gpu = self.result.gpu
        wait, queue_on_node = self._queue_on_node(gpu)

        def script() -> str:  # the shell's (stage_trip.Trip.shell): the python runner reads the spec
            # farm_kw: whether the copy's reads show (farm_w below), for each kernel command's (commands.UNREAD_NOTE)
            shell_command = f"farm_rd=${{farm_kw-}}; unset farm_kw; ulimit -f {OUTPUT_LIMIT // 512}; " + kernel_run(
                self.variant.run, copy, files
            )
            # pinned by UUID: CUDA's device order need not be nvidia-smi's
            pin = f"export CUDA_VISIBLE_DEVICES={shlex.quote(gpu.uuid)}; " if gpu is not None else ""
            q = shlex.quote
            make_tmp, drop_tmp = own_tmp(self.paths.run_tmp)
            marker = self.marker + "farm_kw=$farm_w "  # the run's shell is told whether reads show (farm_rd)
            word = '"$farm_sha"' if expected is None else q(expected)
            fresh = ""
            if self._fresh_copy:  # noderunner.take_copy, as the shell says it
                made = f"mkdir -p {q(work)} {q(posixpath.dirname(copy))}"
                fresh = f"rm -rf {q(rdir)} && {made} && cp {q(self.paths.binary)} {q(copy)}; "
            modes_before, modes_after = modes_sh(folders, self._cell)  # the farm's folders, set back after it
            return (
                # hashed once the GPU's lock is held: the run before, and what it left, are gone by then
                f"{queue_on_node}{fresh}{self._binary_check(word)}cd {q(work)} && {{ {pin}{make_tmp}"
                # whether its copy is read (noderunner.watch): its access time 0, where a read of its folder sets it
                f"{modes_before}"
                'farm_w=; touch -a -d @0 . && ls . > /dev/null && [ "$(stat -c %X .)" != 0 ] && '
                f"touch -a -d @0 {q(copy)} && farm_w=1; t0=$({NOW_NS}); "
                f"{guarded(shell_command, limit, '> ../stdout 2> ../stderr < /dev/null 9>&-', marker)}; "
                # the clock is read before the leftovers are killed, and printed after: none can follow it
                f"t1=$({NOW_NS}); {self._reap_cell(start='${farm_gn:-0}')}; {modes_after}{own_bits}{drop_tmp}; "
                f"{MODULE_NOW_SH}; "
                'echo "@@farm ns ${q0:-$t0} $t0 $t1"; '
                f'[ -n "$farm_w" ] && [ "$(stat -c %X {q(copy)})" = 0 ] && echo "@@farm kernel-unread"; '
                f"{_lost_check((f'{rdir}/stdout', f'{rdir}/stderr', *files))}"
                'echo "@@farm checked $got"; echo "@@farm $rc"; }'
            )

        spec = self.job.spec
        cuda = {MARKER: cuda_error_pattern()}  # CUDA's words for GPU work that did not happen, on either stream
        # CUDA's words count on a line of any length (a marker never does: streams.py)
        # the refusal marker on stdout is never a refusal; it is matched there to say so (gate_order.py)
        scan = {"pass": spec.pass_marker, "refusal": spec.refusal_marker, **cuda}
        if (text := as_text(spec.pass_marker)) is not None:  # said where the regex misses (failure_words.py)
            scan[PASS_TEXT] = text
        if (blanks := with_end_blanks(spec.pass_marker)) is not None:  # `PASS$` on "PASS\r": said so
            scan[PASS_BLANKS] = blanks
        own = launcher_lines(self.variant.run)  # a launcher's own lines are read for no marker
        stdout = StreamScan(scan, self.output_cap, frozenset(cuda), own)
        stderr = StreamScan({"refusal": spec.refusal_marker, **cuda}, self.output_cap, frozenset(cuda), own)
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
                "each_read": not runs_once(self.variant.run),  # each kernel command's read checked
                "calls": kernel_call_words(self.variant.run) if served else [],
                "names": run_names(self.variant.run) if served else [],
                "tmp": self.paths.run_tmp,
                "limit": limit,
                "gpu": gpu.uuid if gpu is not None else None,
                "guarded": self.guarded,
                "unreadable": self.unreadable,
                "folders": folders,
            },
        )

    def _ran(self, trip: Trip, outcome: CommandResult, text: str) -> str:
        stdout, stderr, statuses, other, gpu, wait, limit, clock = trip.state
        elapsed = self._clock[1] if self._clock else time.monotonic() - clock
        self._check_started(text, gpu, wait, trip)
        undying_error(self.t.name, text, not self._by_runner(trip))
        # the last of each status line: a kernel of the same user could have written a
        # forged one into the shell's own stdout (/proc/PPID/fd/1) before it ended,
        # but never after the farm's own, which come once it and its leftovers are gone
        match = last_match(r"^@@farm (\d+)$", text)
        if not match:
            raise InfraError(
                f"node {self.t.name!r}: the run wrapper printed no status ({(outcome.stderr or text).strip()[-300:]!r})"
            )
        lost = run_files_lost(text)
        if lost and not self._ran_confined(trip, text):  # the run could have removed them: classify/lost_files.py
            self.result.evidence.run_files_lost = lost[:200]
        elif lost:
            raise InfraError(
                f"node {self.t.name!r}: the cell's run files on the node ({lost}) were gone when its run "
                f"ended, or could not be made: its folder {self.paths.run_dir} was removed under it, or its "
                "disk went read-only or full (a cleaner of old files, an operator's rm -rf, a remount): what "
                "the kernel printed and its exit statuses are lost, so this is no verdict on the kernel"
            )
        # what the node checked its copy against before it ran, said once the kernel is gone
        checked = last_match(r"^@@farm checked (\S*)$", text)
        if checked is None or checked.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the binary the node ran is not the one the farm inspected "
                f"(checked {checked.group(1)[:12] if checked else 'nothing'}, built {str(self._built_sha)[:12]})"
            )
        ev = self.result.evidence
        # the module the node had loaded once the kernel had run, said after it and its leftovers were gone,
        # against the probe's: compared here, where both are at hand; the verdict it makes is classify's
        # (blame.driver_unbacked), for a pass too, which no look after the run asks of its card
        module = last_match(r"^@@farm driver ?(.*)$", text)
        ev.driver_reloaded = module_changed(self.snapshot.driver_evidence, module.group(1) if module else None)
        ev.driver_reloaded_by = "run" if ev.driver_reloaded else ""
        kernel = kernel_statuses(bytes(statuses))
        ev.kernel_started = bool(kernel)
        notes = bytes(statuses).split()
        ev.kernel_cannot_start = CANNOT_START_NOTE.encode() in notes
        ev.kernel_launcher_writable = LAUNCHER_WRITABLE_NOTE.encode() in notes
        ev.kernel_copy_gone = COPY_GONE_NOTE.encode() in notes
        # the runner saw the kernel's copy never read: no kernel command reached it (node/files.py watch)
        # or a kernel command that failed never read it, whatever another one did (commands.UNREAD_NOTE)
        ev.kernel_unread = last_match(r"^@@farm kernel-unread$", text) is not None or unread_failing(notes)
        # statuses past what the farm reads back: not known, a failing one may be among them
        ev.kernel_statuses_cut = len(statuses) >= STATUS_LIMIT
        # a kernel command started with no status after it: still running when the run's shell ended
        # (sent to the background), killed by the farm unnoted
        ev.kernel_unfinished = max(notes.count(STARTED_NOTE.encode()) - len(kernel), 0)
        # the driver's variables each kernel command started with (node/kernel_commands.py jit_notes):
        # where `instructions:` were counted, code the card ran may not be it (classify: no pass)
        exp = self.result.expectation
        if (started_with := jit_started(notes)) and self.variant.instructions and exp.outcome is Outcome.PASS:
            ev.runtime_code += "; " * bool(ev.runtime_code) + started_with
            self._detail.append(f"{started_with}: code the run may execute was not inspected")
        # code other than the kernel's in its process (the loader's: preload.py), or in the shell that
        # noted its statuses: under the shell scripts (where base._note_confinement says the runner did
        # not run it) a run that sources or evals text (kernel_calls.runs_unseen_text). No green then
        injected, shown = preload_started(notes)
        by_runner = self.python is not None and trip.spec is not None and self.t.streams_output
        if not by_runner and runs_unseen_text(self.variant.run):
            injected += "; " * bool(injected) + (
                "the run sourced or eval'd text in the node's shell, which held the kernel's status and output "
                "files and defined the farm's function that notes them"
            )
        ev.injected = injected
        self._detail += [said for said in (injected, shown) if said]
        ev.kernel_exit = next((code for code in kernel if code), 0) if kernel else None
        # one that exited 0 ran the kernel: on a card it must refuse, another's failure is no refusal
        ev.kernel_exited_0 = 0 in kernel
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
        ev.run_leftover = self.result.leftover  # no pass, no refusal then (classify/left_running.py)
        if self.result.leftover:
            self._detail.append(f"{self.result.leftover} leftover processes killed after the kernel ended")
        self._note_confinement(trip, text, "the kernel ran")
        forged = last_match(r"^@@farm forged (\d+)$", text)  # noderunner.KernelFiles
        ev.kernel_requests_forged = int(forged.group(1)) if forged else 0
        loads = last_match(r"^@@farm loads-writable (.*)$", text)  # node/loads.py
        ev.kernel_loads_writable = loads.group(1)[:200] if loads else ""
        note_folders(ev, "run", text)  # the farm's own folders' modes (work_folder.py)
        if said := other_output(bytes(other)):
            self._detail.append(f"the run's other commands printed (not read for a marker): {said}")
        ev.other_last_line = other_output(bytes(other).rstrip().rsplit(b"\n", 1)[-1], 200)
        if len(kernel) > 1:
            self._detail.append(f"the run started the kernel {len(kernel)} times (exits {', '.join(map(str, kernel))})")
        self.result.stdout = stdout.finish()
        self.result.stderr = stderr.finish()
        ev.pass_line = self.result.stdout.matches.get("pass")
        ev.refusal_line = self.result.stderr.matches.get("refusal")
        ev.refusal_on_stdout = self.result.stdout.matches.get("refusal")
        ev.stderr_last_line = self.result.stderr.last_line
        if ev.refusal_line is None and (ev.run_exit or self.result.expectation.outcome is not Outcome.PASS):
            # a gate's text its marker misses by a `\r` or a normal form: looked for after the run, not in its scan
            refusal = self.job.spec.refusal_marker
            ev.refusal_near = near_miss(refusal, self.result.stderr, "stderr", f"its refusal marker {as_yaml(refusal)}")
        if ev.pass_line is None:
            out = self.result.stdout
            printed = out.matches.get(PASS_TEXT)
            as_printed = None if printed is None else (printed, out.texts.get(PASS_TEXT, ""))
            ended = out.matches.get(PASS_BLANKS)
            but_blanks = None if ended is None else (ended, out.texts.get(PASS_BLANKS, ""))
            marker = self.job.spec.pass_marker
            near = near_miss(marker, out, "stdout", "it", blanks=False)  # its `$` is the scan's (PASS_BLANKS)
            ev.no_pass = marker_missing(marker, out.last_line, as_printed, out.long_lines, but_blanks, near)
            shipped = [rel for rel in self.job.files if rel not in self.job.spec.sources]
            ev.no_pass += unshipped_input(f"{ev.stderr_last_line}\n{out.last_line}", shipped)
        streams = (("stderr", self.result.stderr), ("stdout", self.result.stdout))
        # a stream the size limit cut (`ulimit -f`): what the kernel wrote past it is unknown (output_limit.py)
        ev.output_at_limit = " and ".join(name for name, got in reversed(streams) if got.size >= OUTPUT_LIMIT)
        said = [where_said(name, got.matches.get(MARKER), got.texts.get(MARKER, "")) for name, got in streams]
        ev.cuda_error = next(filter(None, said), "")
        # no kernel command started, and the run's shell said it could not start one: the node is out of
        # processes (node_limits.py) where it cannot start one when asked either; the run's own commands
        # (`echo "sh: 1: Cannot fork" >&2; exit 1; {binary}`) can print the words, not fork for it
        forkless = fork_failed(bytes(other)) or fork_failed(self.result.stderr.kept)
        if ev.run_exit != 0 and ev.kernel_started is False and forkless:
            if node_cannot_fork(self.t):
                raise InfraError(out_of_processes(self.t.name, "run", forkless))
            self._detail.append(forks_note(forkless).removeprefix("[farm] "))
        return "ok" if ev.run_exit == 0 else "failed"
