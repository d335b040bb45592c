"""The sanitize stage: compute-sanitizer's tools over a kernel that passed."""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex

from orchestrator.config.kernel_calls import launcher_lines
from orchestrator.errors import InfraError
from orchestrator.run import sanitize
from orchestrator.run.commands import CHANNEL_MARGIN, KILL_GRACE, NOW_NS, guarded, own_tmp
from orchestrator.run.driver_check import MODULE_NOW_SH, module_changed
from orchestrator.run.file_ends import FileEnds
from orchestrator.run.stage_trip import Trip, last_match
from orchestrator.run.stages.base import CellStages, stopped_line
from orchestrator.run.stages.run import undying_error
from orchestrator.run.streams import StreamScan
from orchestrator.run.work_folder import farm_folders, modes_sh, note_folders


class SanitizeStage(CellStages):
    """Runs the variant's compute-sanitizer tools over the binary, once it passed."""

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
        quiet = "> /dev/null 2>&1 < /dev/null 9>&-"  # the tool's command sends its streams to files (captured)
        make_tmp, drop_tmp = own_tmp(self.paths.run_tmp)
        q = shlex.quote
        # a fresh copy of the build before each tool, hashed: see noderunner.sanitize
        made = f"mkdir -p {q(rdir + '/work')} {q(posixpath.dirname(private))}"
        fresh = f"rm -rf {q(private)} && {made} && cp {q(self.paths.binary)} {q(private)}; "
        check = self._binary_check(q(self._built_sha or ""))
        folders = farm_folders(self.snapshot.workdir, rdir)  # set back after each tool's run (work_folder.py)
        modes_before, modes_after = modes_sh(folders, self._cell)
        commands = {
            tool: sanitize.captured(tool, rdir, sanitize.tool_command(tool, rdir, run, private)) for tool in tools
        }
        runs = "; ".join(
            f"{fresh}{check}{modes_before}t0=$({NOW_NS}); "
            f"{guarded(commands[tool], limit, quiet, self.marker)}; "
            # what the tool's run left running, its group's first (guarded's farm_gn), counted as the run's are
            # and said on the tool's own line, after them (red-team 263)
            f"t1=$({NOW_NS}); n=${{farm_gn:-0}}; {self._reap_cell('sanitize-leftover', start='${farm_gn:-0}')}; "
            f'{modes_after}echo "@@farm tool {tool} $rc $t0 $t1 $n"'
            for tool in tools
        )
        script = (
            f"{fresh}{check}"
            f"{sanitize.locate(self.t.node.compute_sanitizer, self.snapshot.nvcc_path, self.snapshot.workdir)}; "
            f"{queue_on_node}cd {shlex.quote(rdir + '/work')} && {{ {pin}{make_tmp}{runs}; {drop_tmp}; "
            # the module the tools ran on, once they and their leftovers are gone (node/sanitizing.py)
            f"{MODULE_NOW_SH}; }}"
        )
        # each log's first and last LOG_LIMIT / 2 bytes and its size (file_ends.py): the summary the
        # tool writes last is read where it is, however long its findings or a kernel made the log
        logs = {tool: FileEnds(sanitize.LOG_LIMIT) for tool in tools}
        # what the program printed under each tool: its stdout scanned whole for the pass marker, as the
        # run's is (streams.py), and its stderr's ends, where the tool says why it failed (review 243)
        marker = {"pass": self.job.spec.pass_marker}
        outs = {tool: StreamScan(marker, 4096, skip=launcher_lines(run)) for tool in tools}
        errs = {tool: FileEnds(sanitize.ERR_LIMIT) for tool in tools}
        streams = [
            (f"{tool}-{name}", sanitize.stream_path(rdir, tool, name), limit, feed)
            for tool in tools
            for name, limit, feed in (("out", 1 << 62, outs[tool].feed), ("err", sanitize.ERR_LIMIT, errs[tool].feed))
        ]
        trip = Trip(
            "sanitize",
            script,
            wait + len(tools) * (limit + KILL_GRACE) + CHANNEL_MARGIN,
            [(tool, sanitize.log_path(rdir, tool), sanitize.LOG_LIMIT, logs[tool].feed) for tool in tools] + streams,
            clean_up=True,
            release=True,
            ends=(*tools, *(f"{tool}-err" for tool in tools)),
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
                "tools": [[tool, commands[tool], sanitize.log_path(rdir, tool)] for tool in tools],
                "configured": self.t.node.compute_sanitizer,
                "nvcc": self.snapshot.nvcc_path,
                "workdir": self.snapshot.workdir,
                "guarded": self.guarded,
                "unreadable": self.unreadable,
                "folders": folders,
            },
        )
        try:
            outcome, text = self._round_trip(trip)
        finally:
            self._release()
        self._check_started(text, gpu, wait, trip)
        # a tool's process that outlived its kill may hold the GPU still
        undying_error(self.t.name, text, not self._by_runner(trip))
        ev = self.result.evidence
        note_folders(ev, "sanitize", text)  # the farm's folders the kernel changed under a tool (work_folder.py)
        # as the lines _check_started reads: the shell script's, its last before its end (red-team 271)
        missing = re.search(r"^@@farm no-sanitizer (.*)$", text if self._by_runner(trip) else stopped_line(text), re.M)
        if missing:
            error = InfraError(
                f"node {self.t.name!r}: no compute-sanitizer (looked at {missing.group(1) or 'PATH'}); "
                "set the node's compute_sanitizer, or drop `sanitize` from the variant"
            )
            error.retryable = False
            raise error
        reports = []
        for tool in tools:
            # each tool's line is printed once, after its run and its leftovers' end (both runners): a
            # second is not the farm's. Under the shell runner a kernel reaches the script's stdout
            # (/proc/PID/fd/1), and under a later tool wrote an earlier one's "exit 0, 0 left", read in
            # place of the real one (the last wins): memcheck's leftover was a clean bill (red-team 268)
            said = re.findall(rf"^@@farm tool {tool}(?: .*)?$", text, re.M)
            if len(said) > 1:
                error = InfraError(
                    f"node {self.t.name!r}: the sanitize script's output carried the status of compute-sanitizer "
                    f"--tool {tool} twice ({len(said)} lines; a program of the node's login wrote into it): "
                    "no evidence from its runs"
                )
                error.retryable = False  # the kernel that wrote it writes it again
                raise error
            ran = last_match(rf"^@@farm tool {tool} (\d+) (\d+) (\d+) (\d+)$", text)
            if ran is None:
                raise InfraError(
                    f"node {self.t.name!r}: the sanitize script printed no status for {tool} "
                    f"({(outcome.stderr or text).strip()[-300:]!r})"
                )
            code, started, ended, left = (int(x) for x in ran.groups())
            timed_out = code in (124, 137) and (ended - started) / 1e9 >= limit * 0.98
            kept = logs[tool].finish()
            out, err = outs[tool].finish(), errs[tool].finish()
            under = sanitize.Under("pass" in out.matches, out.size > 0, out.last_line, sanitize.said_on(err.kept))
            cut = (*kept.cut, kept.size) if kept.cut else None
            found = sanitize.report(tool, code, timed_out, kept.kept, cut, under)
            if left and not isinstance(found, str):  # no clean bill, as no pass of a run that left them
                found = dataclasses.replace(found, leftover=left)
            if isinstance(found, str):  # where its log could not be written, the kernel's chmod may be why
                taken = f"; the farm's folders had their modes changed under it: {ev.farm_folders_changed}"
                error = InfraError(f"node {self.t.name!r}: {found}{taken if ev.farm_folders_changed else ''}")
                error.retryable = False
                raise error
            reports.append(found)
            self._detail.append(
                f"{tool}: "
                + ("timed out" if found.timed_out else f"{found.errors} errors, exit {found.exit_code}")
                + (f", {left} leftover processes killed after it ended" if left else "")
            )
        self._note_confinement(trip, text, "its sanitizer runs ran")
        # the module the tools ran on, read once they were gone (as the run stage reads it): one reloaded
        # since the run makes its pass no verdict on the kernel (classify/blame.driver_unbacked)
        module = last_match(r"^@@farm driver ?(.*)$", text)
        said = module_changed(self.snapshot.driver_evidence, module.group(1) if module else None, "its sanitizer runs")
        if said and not ev.driver_reloaded:  # the run's own read, where it saw one, names the run
            ev.driver_reloaded, ev.driver_reloaded_by = said, "sanitize"
        self.result.evidence.sanitizer = tuple(reports)
        return "ok" if all(r.clean for r in reports) else "failed"
