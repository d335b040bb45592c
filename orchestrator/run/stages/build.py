"""The build stage: nvcc on the node, its inputs checked around it, a cached binary reused only by its hash."""

from __future__ import annotations

import functools
import posixpath
import re
import shlex

from orchestrator.classify import CONFINED_BUILD
from orchestrator.classify.blame import unsupported_arch
from orchestrator.errors import InfraError
from orchestrator.run.commands import (
    CHANNEL_MARGIN,
    KILL_GRACE,
    guarded,
    input_checks,
    own_tmp,
    render_build,
    verify_inputs_script,
)
from orchestrator.run.file_ends import FileEnds
from orchestrator.run.node_limits import fork_failed, forkless, forks_note, node_cannot_fork, out_of_processes
from orchestrator.run.removal import remove_sh
from orchestrator.run.stage_trip import Trip
from orchestrator.run.stages.base import CellStages
from orchestrator.run.stages.build_links import library_search, linked_sh
from orchestrator.run.stages.build_reads import NO_LIST, READ_LIST, named_files, reads_env, stale_check, write_list
from orchestrator.run.stages.build_tools import toolchain_checks, toolchain_script
from orchestrator.run.stages.failure_words import first_error
from orchestrator.run.stages.room import ROOM_NEED, lowest_room, watch_sh
from orchestrator.run.work_folder import COPY_BLOCKED_SH, copy_blocked, farm_folders, modes_sh, note_folders
from orchestrator.transport import CommandResult

# the stage's control lines, compiled once (issue 11: a cell reads a dozen)
_CACHE_STALE = re.compile(r"^@@farm cache-stale (.*)$", re.M)
_CACHE_MISMATCH = re.compile(r"^@@farm cache-mismatch ", re.M)
_CACHED = re.compile(r"^@@farm cached ([0-9a-f]{64})$", re.M)
_ALTERED = re.compile(r"^@@farm altered (\S+) (\S+)$", re.M)
_TOOLCHAIN_CHANGED = re.compile(r"^@@farm toolchain-changed (\S+)$", re.M)
_ALTERED_DURING = re.compile(r"^@@farm altered-during ", re.M)
_ALTERED_DURING_FILE = re.compile(r"^@@farm altered-during (\S+) (\S+)$", re.M)
_BUILD_LOCK_FAILED = re.compile(r"^@@farm build-lock-failed (.+)$", re.M)
_BUILD_LOCK_UNSAID = re.compile(r"^@@farm build-lock-failed$", re.M)
_RC = re.compile(r"^@@farm rc=(\d+)$", re.M)
_BUILT = re.compile(r"^@@farm built ([0-9a-f]{64})$", re.M)
_BUILD_CONFINED = re.compile(r"^@@farm build-confined$", re.M)
_COPY = re.compile(r"^@@farm copy ([0-9a-f]{64})$", re.M)

# what a tool says when Landlock refuses it a write (EACCES; EPERM and EROFS from some tools)
_REFUSED = re.compile(rb"Permission denied|Operation not permitted|Read-only file system")

VERIFY_TIMEOUT = 300.0  # hashing the inputs on the node, around a build


class BuildStage(CellStages):
    """Builds the cell's binary, or reuses the cached one the store vouches for."""

    def _build_script(self, command: str, reuse: bool, recorded: str | None) -> str:
        """Reuse a cached build whose copy (into the cell's own folder) hashes to
        the binary the store recorded for it, or verify the inputs, build, verify
        them again, hash the binary, mark the build reusable and take the copy."""
        q = shlex.quote
        bdir, binary = q(self.paths.build_dir), q(self.paths.binary)
        rdir, private = q(self.paths.run_dir), q(self.paths.private_binary)
        limit = int(self.job.spec.build_timeout)
        make_tmp, drop_tmp = own_tmp(self.paths.build_tmp)
        note_tmp, watch = watch_sh(bdir)  # the room at its lowest while it runs (room.py)
        # the farm's folders, noted and set back around the job's build command (work_folder.modes_sh)
        modes_before, modes_after = modes_sh(farm_folders(self.snapshot.workdir, self.paths.run_dir), self._cell)
        # made again where another cell's clean-up (remove_run_dir) took an empty parent meanwhile
        work, held = f"{rdir}/work", q(posixpath.dirname(self.paths.private_binary))
        made = f"{{ mkdir -p {work} 2>/dev/null || mkdir -p {work} 2>/dev/null || mkdir -p {work}; }}"
        copy = f"rm -rf {rdir} && {made} && mkdir -p {held} && cp {binary} {private}"
        # one that does not hash to the record is said, and rebuilt in the same trip
        # a cached build one of whose files (a header of the node's) changed since is built again
        cached = (
            f"if [ -f {bdir}/.farm-built ] && [ -f {binary} ]; then {stale_check(self.paths.build_dir)}"
            f'if [ -n "$stale" ]; then echo "@@farm cache-stale ${{stale%: *}}"; else {copy} && '
            f"got=$(sha256sum < {private} | cut -c1-64); "
            f'if [ "$got" = {q(recorded or "none")} ]; then echo "@@farm cached $got"; exit 0; fi; '
            f'echo "@@farm cache-mismatch ${{got:-none}}"; fi; fi; '
            if reuse
            else ""
        )
        # what the build read, but the farm's own verified folders and its own products; a build
        # whose list cannot be made runs unmarked, never reused
        skip = [self.paths.build_dir, self.paths.build_tmp, *(p.folder for _, p in input_checks(self.paths))]
        reading = reads_env(self.paths.build_dir)  # gcc lists what it read (build_reads.py)
        named, search = named_files(command), library_search(command, self.snapshot)
        # with the libraries its linker found on its own (build_links.py)
        listed = (
            f"{{ {write_list(skip, named, linked_sh(search, named))} && touch .farm-built || rm -f {READ_LIST}; }}; "
        )
        return (
            f"{cached}"
            f'{verify_inputs_script(self.paths, "altered")}; [ -z "$bad" ] || exit 0; '
            f"{remove_sh(bdir)} && mkdir -p {bdir} && cd {bdir} && "
            f"{{ {note_tmp}{make_tmp}{modes_before}"
            f"{guarded(command, limit, '> build.log 2>&1 < /dev/null', reading + self.marker, watch)}; "
            "wait $farm_rp; "
            # what it left (a daemon out of its group) killed before the check, as the python runner's kill_orphans
            f"{self._reap_cell('build-leftover')}; {modes_after}{drop_tmp}; "
            f"{verify_inputs_script(self.paths, 'altered-during')}; "
            f"{toolchain_script(self._toolchain)}"  # nvcc, a host compiler replaced since the probe
            f'if [ $rc -eq 0 ]; then echo "@@farm built $(sha256sum < {binary} | cut -c1-64)"; '
            # only a build whose inputs stayed intact is marked reusable
            f'if [ -z "$bad" ]; then {listed}if {copy}; then '
            f'echo "@@farm copy $(sha256sum < {private} | cut -c1-64)"; else farm_p={private}; {COPY_BLOCKED_SH}; fi; '
            f"fi; else rm -rf {rdir}; fi; "
            f'echo "@@farm rc=$rc"; }}'
        )

    def _build_trip(self, command: str, reuse: bool, recorded: str | None) -> Trip:
        limit = int(self.job.spec.build_timeout)
        # its first and last output_cap / 2 bytes and its size, as a stream's (file_ends.py): a
        # template error's megabytes keep nvcc's last errors, and the farm ships no more than the cap
        log = FileEnds(self.output_cap)
        return Trip(
            "build",
            lambda: self._build_script(command, reuse, recorded),
            limit + KILL_GRACE + CHANNEL_MARGIN + VERIFY_TIMEOUT,
            [("log", f"{self.paths.build_dir}/build.log", self.output_cap, log.feed)],
            state=log,
            ends=("log",),
            spec={
                "reuse": reuse,
                "recorded": recorded or "none",
                "build_dir": self.paths.build_dir,
                "binary": self.paths.binary,
                "run_dir": self.paths.run_dir,
                "private": self.paths.private_binary,
                "command": command,
                "named": named_files(command),  # files the linker may read, listed with the compiler's
                "linked": library_search(command, self.snapshot),  # and where it looks for its -l
                "limit": limit,
                "tmp": self.paths.build_tmp,
                "room_need": list(ROOM_NEED),  # under which the room watch sizes its folder (node/room.py)
                "inputs": [[name, placed.folder, placed.digest] for name, placed in input_checks(self.paths)],
                "tools": self._toolchain,  # checked after the build, as the shell's toolchain_script does
                "unreadable": self.unreadable,  # the farm's secrets, on its own machine (farm_secrets.py)
                "folders": farm_folders(self.snapshot.workdir, self.paths.run_dir),
            },
        )

    def _keep_log(self, log: FileEnds) -> None:
        """The build log as kept, its cut said (output_cuts) where it was longer than the cap; the
        farm's notes go after it, and its readers (first_error...) read the head and the tail."""
        kept = log.finish()
        self.result.build_log = kept.kept
        self.result.build_log_cut = (*kept.cut, kept.size) if kept.cut else None

    @functools.cached_property
    def _toolchain(self) -> dict | None:
        return toolchain_checks(self.snapshot, self.paths.toolchain is not None)

    def _checked(self, outcome: CommandResult) -> None:
        """The script's checks found an input or a tool not the one staged or probed: where its
        stderr says a process could not start (the shell runner's sha256sum, find), their digests
        are empty or partial, the node out of processes, not a tampering (node_limits.py)."""
        if said := forkless(outcome.stderr):
            raise InfraError(out_of_processes(self.t.name, "check of the build's inputs and tools", said))

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
            stale = _CACHE_STALE.search(text)
            if stale:
                read = stale.group(1)
                self._detail.append(
                    "a cached build with no list of the files it read (made before round 61): rebuilt"
                    if read == NO_LIST
                    else f"a file the cached build read changed on the node since ({read}): rebuilt"
                )
            if _CACHE_MISMATCH.search(text):
                self._detail.append(unrecorded)
            cached = _CACHED.search(text)
            if cached:
                if recorded == cached.group(1):
                    self.result.build_cached = True
                    self._built_sha = recorded
                    self.result.binary_sha256 = recorded
                    self.result.evidence.build_exit = 0
                    self._keep_log(log)
                    return "cached"
                self._detail.append(unrecorded)
                reuse = False
                continue
            altered = _ALTERED.findall(text)
            if altered:
                self._checked(outcome)
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
        self._build_room = lowest_room(text)  # read by the look after a failed build (base._node_trouble)
        note_folders(self.result.evidence, "build", text)  # the farm's folders its command changed (work_folder.py)
        drift = _TOOLCHAIN_CHANGED.findall(text)
        if drift or _ALTERED_DURING.search(text):
            self._checked(outcome)
        if drift:  # whatever the build's status: nvcc's word about another toolchain is not the node's
            raise InfraError(
                f"node {self.t.name!r}: the toolchain the build ran with ({', '.join(drift)}) changed on the node "
                "since its probe, whose nvcc and host compilers name the build and its record: the binary cannot "
                "be vouched for"
            )
        during = _ALTERED_DURING_FILE.findall(text)
        if during:
            names = ", ".join(name for name, _ in during)
            raise InfraError(
                f"node {self.t.name!r}: inputs changed on the node while nvcc ran ({names}); "
                "the binary cannot be trusted"
            )
        unmade = _BUILD_LOCK_FAILED.search(text)
        if unmade:  # the node's own words (a read-only work folder), not a lock someone holds
            raise InfraError(
                f"node {self.t.name!r}: the lock of the build folder {self.paths.build_dir} could not be made on "
                f"the node ({unmade.group(1).strip()[:200]})"
            )
        if _BUILD_LOCK_UNSAID.search(text):
            raise InfraError(
                f"node {self.t.name!r}: the lock of the build folder {self.paths.build_dir} was held past the "
                f"build's limit ({limit} s), or could not be taken: another farm building the same cell in this "
                "node's workdir?"
            )
        rc = _RC.search(text)
        if rc is None:
            raise InfraError(
                f"node {self.t.name!r}: the build wrapper printed no status "
                f"({(outcome.stderr or text).strip()[-300:]!r})"
            )
        exit_code = int(rc.group(1))
        built = _BUILT.search(text)
        self._built_sha = built.group(1) if built else None
        self.result.binary_sha256 = self._built_sha
        self.result.evidence.build_exit = exit_code
        self._keep_log(log)
        if exit_code in (124, 137):
            self.result.build_log += f"\n[farm] build killed at its {limit} s timeout\n".encode()
        if exit_code != 0:
            # nvcc's own word that it cannot make code for the target: the toolchain's failure
            ev = self.result.evidence
            # the node's own trouble only where the node, asked, cannot fork either (node_limits.py)
            if (words := fork_failed(self.result.build_log)) and node_cannot_fork(self.t):
                self.cleaned = True  # the script removed the cell's folder
                raise InfraError(out_of_processes(self.t.name, "build", words))
            if words:  # the job's words, or a shortage gone by now: its build-fail, said so
                self.result.build_log += f"\n{forks_note(words)}\n".encode()
            ev.build_unsupported = unsupported_arch(self.result.build_log, command, self.snapshot.nvcc_version)
            ev.build_err = first_error(self.result.build_log)
            if _BUILD_CONFINED.search(text) and _REFUSED.search(self.result.build_log):
                self.result.evidence.build_denied = True
                self.result.build_log += f"\n[farm] {CONFINED_BUILD}\n".encode()
            self.cleaned = True  # the script removed the cell's folder: nothing runs from it
            return "failed"
        if self._built_sha is None:  # nothing at {binary} to hash: a job whose build writes no binary there
            self.result.evidence.build_no_binary = True
            said = f"\n[farm] the build exited 0 but wrote no binary at {self.paths.binary}\n"
            self.result.build_log += said.encode()
            return "failed"
        copy = _COPY.search(text)
        if copy is None and (blocked := copy_blocked(text)):  # the runner's words why (work_folder.py)
            raise InfraError(
                f"node {self.t.name!r}: the cell's copy of its binary could not be made: the node's user can no "
                f"longer write or search the farm's folder {blocked}, taken by a program of its user "
                "(an earlier kernel's chmod?); no verdict on the kernel"
            )
        if copy is None or copy.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the binary changed while it was copied into the cell's folder "
                f"(built {str(self._built_sha)[:12]}, copy {copy.group(1)[:12] if copy else 'missing'})"
            )
        if self._built_sha:
            self.remember_binary(self.paths.build_key, self._built_sha)
        return "ok"
