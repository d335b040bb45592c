"""The inspect stage: cuobjdump's disassembly and target lists of the binary that was built."""

from __future__ import annotations

import functools
import re
import secrets
import shlex

from orchestrator.config.inputs import FOLDER_DIGEST_SH
from orchestrator.config.shell import lex, unquoted
from orchestrator.errors import InfraError
from orchestrator.outcomes import Outcome
from orchestrator.run.commands import CHANNEL_MARGIN, KILL_GRACE, guarded
from orchestrator.run.machine_code import (
    ELF_TARGETS,
    PTX_TARGETS,
    case_slips,
    code_path_for,
    count_for_card,
    count_instructions,
)
from orchestrator.run.runtime_code import JIT_NAMES, JIT_VARIABLES, RUNTIME_LOADERS, runtime_loads
from orchestrator.run.stage_trip import Trip
from orchestrator.run.stages.base import CellStages
from orchestrator.run.stages.build_tools import cuobjdump_check_sh, cuobjdump_seen, jit_tools, older_cuobjdump
from orchestrator.run.stages.jit_shell import jit_script, lists_kept
from orchestrator.run.work_folder import farm_folders, modes_sh, note_folders

# the stage's control lines, compiled once (issue 11: a cell reads a dozen)
_TOOLKIT_ALTERED = re.compile(r"^@@farm toolkit-altered (\S+)$", re.M)
_CUOBJDUMP_CHANGED = re.compile(r"^@@farm toolchain-changed cuobjdump$", re.M)
_JIT_TOOL_CHANGED = re.compile(r"^@@farm toolchain-changed jit:(\S+)$", re.M)
_RC = re.compile(r"@@farm rc=(\d+)")
_SHA = re.compile(r"@@farm sha\n([0-9a-f]{64})")
_JIT_FAILED = re.compile(r"^@@farm jit-failed (.*)$", re.M)

INSPECT_TIMEOUT = 300.0
# each of cuobjdump's lists after the dump (ELF and PTX targets), within the farm's wait for the
# stage: with the dump's budget each, a hung cuobjdump kept the node past it, and the cell's trip
# went out again and again (found by a red-team helper; the runner's is noderunner.LIST_TIMEOUT)
LIST_TIMEOUT = 30
SASS_LIMIT = 256 << 20  # bytes of disassembly read back for counting
SAID_LIMIT = 4096  # bytes of the disassembler's stderr read back, for a failed inspect's reason
# the node's compile of the PTX a card JITs (node/jit.py): per tool it starts (the PTX cut out,
# each module's nvcc, each cubin's dump); three for the trip's budget
JIT_LIMIT = 120


def first_words(said: bytes) -> str:
    """The first non-empty line the disassembler printed on stderr, bounded, as a failed inspect's
    reason ends (`: "..."`; "" for none): its error comes first (objdump's usage, printed after it,
    ends with where to report bugs)."""
    line = next((s for s in said.decode("utf-8", "replace").splitlines() if s.strip()), "").strip()
    return f': "{line if len(line) <= 300 else line[:299] + "…"}"' if line else ""


@functools.lru_cache(maxsize=512)  # a variant's text, read again for each of its cells
def reads_cuda(inspect: str) -> bool:
    """Whether the inspect is cuobjdump's dump, `{cuobjdump}` or cuobjdump named by its path: its
    instructions count in the code the card runs (machine_code.count_for_card), the binary's
    targets listed by the farm's cuobjdump. Named by its path it was read as another
    disassembler's text, counted whole: a T4 passed `HMMA: 1` on an sm_90 cubin it never loads
    (round 58's finding back, by a red-team helper)."""
    if "{cuobjdump}" in inspect:
        return True
    lexed = lex(inspect)
    for command in [] if lexed.problem else lexed.commands:
        program = command.program()
        words = command.words[program[0] :] if program else []
        if words and unquoted(words[0].text)[0].rsplit("/", 1)[-1] == "cuobjdump":
            return True
    return False


def imports_sh(binary: str) -> str:
    """Shell saying what node/imports.py says of the copy, through readelf: the libraries it
    needs, its undefined dynamic symbols of RUNTIME_LOADERS, and the login's JIT variables."""
    pattern = "^(" + "|".join(RUNTIME_LOADERS) + ")"
    # a binary linked dynamically (readelf finds its dynamic section, by its segment where its
    # section headers are stripped) with no .dynsym section names none of the imports the loader
    # resolves: unread, as node/imports.py says it (a review finding: it passed on its NEEDED lines)
    awk = (
        "/^Dynamic section at offset/ { d = 1 } /^Symbol table '\\.dynsym'/ { s = 1 } "
        '$2 == "(NEEDED)" { n = $0; sub(/.*\\[/, "", n); sub(/\\].*$/, "", n); gsub(/[^!-~]/, "?", n); '
        'o[++k] = "@@farm needs " n; next } '
        '$2 == "(RPATH)" || $2 == "(RUNPATH)" { n = $0; sub(/^[^[]*\\[/, "", n); sub(/\\][^]]*$/, "", n); '
        'gsub(/[^!-~]/, "?", n); c = split(n, f, ":"); '
        'for (i = 1; i <= c; i++) o[++k] = "@@farm runpath " (f[i] == "" ? "(empty)" : f[i]); next } '
        '$7 == "UND" && $8 != "" { n = $8; sub(/@.*/, "", n); if (n ~ p) o[++k] = "@@farm imports " n } '
        'END { if (d && !s) { print "@@farm imports-unread"; exit } for (i = 1; i <= k; i++) print o[i] }'
    )
    return (
        f"if farm_re=$(LC_ALL=C readelf -W -d --dyn-syms {binary} 2>/dev/null); then "
        f'printf "%s\\n" "$farm_re" | LC_ALL=C awk -v p={shlex.quote(pattern)} {shlex.quote(awk)} | LC_ALL=C sort -u; '
        "else echo '@@farm imports-unread'; fi; "
        + "".join(
            f'[ -z "${{{v}-}}" ] || echo "@@farm cuda-env {v}=$(printf %s "${v}" | tr -s "\\n\\t" "  " | cut -c1-64)"; '
            for v in JIT_NAMES
        )
    )


class InspectStage(CellStages):
    """Reads the binary's machine code: the instructions it holds, the targets it carries."""

    def _inspect(self) -> str:
        trip, _, text = self._go("inspect", self._inspect_trip)
        return self._inspected(text, trip.state)

    def _inspect_trip(self) -> Trip:
        binary = shlex.quote(self.paths.private_binary)
        command = self.variant.inspect.format(cuobjdump=shlex.quote(self.cuobjdump), binary=binary)
        cuda = reads_cuda(self.variant.inspect)
        kit = self.paths.toolchain
        # the disassembler of a shipped toolkit is the farm user's, writable by any kernel: checked
        # right before it speaks for the binary (as the compiler is around each build)
        kit_check = kit is not None and self.cuobjdump.startswith(kit.folder + "/")
        # the node's cuobjdump as the probe saw it, checked before and after it speaks for the binary
        # (a shipped one is checked by its toolkit's digest): one replaced since read another binary
        seen = cuobjdump_seen(self.snapshot) if cuda and not kit_check else None
        jit = self._jit_spec(cuda)
        loaders = self._loaders(cuda)
        folders = farm_folders(self.snapshot.workdir, self.paths.run_dir)  # set back after it (work_folder.py)

        def script() -> str:  # the shell's (stage_trip.Trip.shell): the python runner reads the spec
            bdir = shlex.quote(self.paths.run_dir)
            tool = f"timeout -k {KILL_GRACE} {LIST_TIMEOUT} {shlex.quote(self.cuobjdump)}"
            lists = (
                f"echo '@@farm elf'; {tool} --list-elf {binary} 2>&1; echo '@@farm ptx'; "
                f"{tool} --list-ptx {binary} 2>&1; "
                if cuda
                else ""
            )
            kit_shell = (
                f"d=$(cd {shlex.quote(kit.folder)} 2>/dev/null && {FOLDER_DIGEST_SH}); "
                f'[ "$d" = {kit.digest} ] || {{ echo "@@farm toolkit-altered ${{d:-missing}}"; exit 0; }}; '
                if kit_check and kit is not None
                else ""
            )
            tool_check = cuobjdump_check_sh(self.cuobjdump, seen) if seen is not None else ""
            if jit is not None and not self.python:  # the python runner compiles it itself (node/jit.py)
                lists = lists_kept(tool, binary) + jit_script(jit, self.cuobjdump, binary)
            modes_before, modes_after = modes_sh(folders, self._cell)
            return (
                f"{kit_shell}{tool_check.replace('cw=1;', 'exit 0;')}{modes_before}cd {bdir} && "
                f"{guarded(command, int(INSPECT_TIMEOUT), '> inspect.txt 2> inspect.err < /dev/null', self.marker)}; "
                # a daemon it left killed before the check (red-team 251), as the python runner's kill_orphans
                f'{self._reap_cell("inspect-leftover")}; {modes_after}echo "@@farm rc=$rc"; '
                f"echo '@@farm sha'; sha256sum < {binary} | cut -c1-64; {imports_sh(binary) if loaders else ''}"
                f"{lists}{tool_check}exit 0"
            )

        dump, jit_sass, said = bytearray(), bytearray(), bytearray()
        files = [("dump", f"{self.paths.run_dir}/inspect.txt", SASS_LIMIT, dump.extend)]
        # what the disassembler printed on stderr: a failed inspect's reason ("does not contain device code")
        files.append(("inspect-err", f"{self.paths.run_dir}/inspect.err", SAID_LIMIT, said.extend))
        if jit is not None:
            files.append(("jit", f"{jit['folder']}/sass.txt", SASS_LIMIT, jit_sass.extend))
        return Trip(
            "inspect",
            script,
            INSPECT_TIMEOUT + 2 * (LIST_TIMEOUT + KILL_GRACE) + CHANNEL_MARGIN + (3 * JIT_LIMIT if jit else 0),
            files,
            state=(dump, jit_sass if jit is not None else None, said),
            # a compile-only cell ends here: its folder goes in the same round trip
            clean_up=self.result.expectation.outcome.value == "compile-only",
            spec={
                "kit": [kit.folder, kit.digest] if kit_check else None,
                "tool": [self.cuobjdump, seen] if seen is not None else None,
                "run_dir": self.paths.run_dir,
                "private": self.paths.private_binary,
                "command": command,
                "limit": int(INSPECT_TIMEOUT),
                "list_limit": LIST_TIMEOUT,
                "cuobjdump": self.cuobjdump if cuda else None,
                "instructions": dict(self.variant.instructions),
                "sass_limit": SASS_LIMIT,
                # confined as the run is: its own $TMPDIR, and the farm's own files out of its reach
                "tmp": self.paths.run_tmp,
                "guarded": self.guarded,
                "unreadable": self.unreadable,
                "jit": jit,
                "loaders": list(RUNTIME_LOADERS) if loaders else None,
                "folders": folders,
            },
        )

    def _jit_spec(self, cuda: bool) -> dict[str, object] | None:
        """Where the card may run the binary's PTX (which the lists tell the node): what the
        node's runner needs to compile it for the card, so that SASS `instructions:` are
        counted in code like the driver's (node/jit.py; stages/jit_shell.py where the farm's
        python runner does not serve the node). Only a card the kernel must pass on, only for
        SASS names."""
        cc, r = self.result.expectation.cc, self.result
        sass = any(name[:1].isupper() for name in self.variant.instructions)
        if not (cuda and sass and cc is not None and r.expectation.outcome is Outcome.PASS):
            return None
        folder = f"{self.paths.run_dir}/jit-{secrets.token_hex(8)}"  # no inspect command can know it
        # nvcc and ptxas checked after it (node/drift.jit_changed); a shipped toolkit's by its digest
        tools = None if self.paths.toolchain is not None else jit_tools(self.snapshot)
        nvcc = self.snapshot.nvcc_path
        return {"card": cc.major * 10 + cc.minor, "folder": folder, "nvcc": nvcc, "limit": JIT_LIMIT, "tools": tools}

    def _loaders(self, cuda: bool) -> bool:
        """Whether the node says what the copy imports and needs, and the login's JIT variables
        (node/imports.py): only where `instructions:` are counted for a card the kernel must pass on."""
        exp = self.result.expectation
        return bool(cuda and self.variant.instructions and exp.cc is not None and exp.outcome is Outcome.PASS)

    def _inspected(self, text: str, state: tuple[bytearray, bytearray | None, bytearray]) -> str:
        dump, jit_sass, said = state
        ev = self.result.evidence
        kit = self.paths.toolchain
        cuda = reads_cuda(self.variant.inspect)
        altered = _TOOLKIT_ALTERED.search(text)
        if altered:
            raise InfraError(
                f"node {self.t.name!r}: the shipped toolkit changed on the node before inspection "
                f"(digest {altered.group(1)[:12]}, expected {kit.digest[:12] if kit else '?'}); not inspected"
            )
        if _CUOBJDUMP_CHANGED.search(text):
            raise InfraError(
                f"node {self.t.name!r}: its cuobjdump ({self.cuobjdump}) changed on the node since its probe; "
                "what it said of the binary is not taken"
            )
        jit_tool = _JIT_TOOL_CHANGED.search(text)
        if jit_tool:
            raise InfraError(
                f"node {self.t.name!r}: its {jit_tool.group(1)} changed on the node since its probe, before the "
                "JIT step compiled the PTX the card runs with it; the SASS it counted is not taken"
            )
        shipped = kit is not None and self.cuobjdump.startswith(kit.folder + "/")  # of nvcc's own toolkit
        older = older_cuobjdump(self.snapshot) if cuda and not shipped else None
        if older:  # said once per node by the probe: no process per cell
            error = InfraError(f"node {self.t.name!r}: {older}")
            error.retryable = False  # the same cuobjdump on a retry: its cells need the node's `cuobjdump:` fixed
            raise error
        note_folders(ev, "inspect", text)  # the farm's folders its command changed (work_folder.py)
        rc = _RC.search(text)
        ev.inspect_exit = int(rc.group(1)) if rc else 255
        sha = _SHA.search(text)
        if sha is None or sha.group(1) != self._built_sha:
            raise InfraError(
                f"node {self.t.name!r}: the cell's copy of the binary changed on the node before inspection "
                f"(sha256 {sha.group(1)[:12] if sha else 'unreadable'}, built {str(self._built_sha)[:12]})"
            )
        if cuda:
            elf_part = text.split("@@farm elf", 1)[-1].split("@@farm ptx", 1)[0]
            ptx_part = text.split("@@farm ptx", 1)[-1].split("\n@@farm jit", 1)[0]
            self.result.elf_targets = sorted({f"sm_{a}{s}" for a, s in ELF_TARGETS.findall(elf_part)})
            self.result.ptx_targets = sorted({f"sm_{a}{s}" for a, s in PTX_TARGETS.findall(ptx_part)})
            cc = self.result.expectation.cc
            self.result.code_path = code_path_for(cc, self.result.elf_targets, self.result.ptx_targets)
        if ev.inspect_exit != 0:
            ev.inspect_err = first_words(bytes(said))
            return "failed"
        text_said = text
        text, names = dump.decode("utf-8", "replace"), list(self.variant.instructions)
        if cuda and names:
            # in the code the card runs, not over every cubin of a fat binary (a red-team finding)
            r = self.result
            # a card the kernel must refuse runs none of its GPU code: what it needs is about the
            # cards it serves, so the whole dump counts (counted for the card, a T4 that must
            # refuse an sm_90a build had it inspect-fail, its gate never run)
            runs = r.expectation.outcome is Outcome.PASS
            failed = _JIT_FAILED.search(text_said)
            if failed and r.code_path == "ptx-jit" and runs:
                # the node's toolkit could not make what the card runs (a card newer than its nvcc):
                # what it then misses is not the kernel's (blame.py), nor the node's health
                ev.jit_failed = failed.group(1)
            why = f"its compile failed: {failed.group(1)}" if failed else "the node compiled none of it"
            if jit_sass is None:
                why = "the farm did not compile it"
            # a compile that failed part way wrote some modules' SASS: none of it counts
            jit = ((jit_sass if jit_sass is not None and not failed else b"").decode("utf-8", "replace"), why)
            cc = r.expectation.cc if runs else None
            counted = count_for_card(text, names, cc, r.elf_targets, r.ptx_targets, jit)
            counts, ev.counted_in, ev.ptx_uncounted = counted.counts, counted.where, counted.uncounted
            self._detail.append(counted.where)
            if runs:  # code the run may execute that was not counted (classify: no pass on it)
                ran = runtime_loads(text_said)
                named = sorted(set(JIT_VARIABLES.findall(self.variant.run)))
                if named:  # which one, as the login's are said
                    ran += "; " * bool(ran) + f"its run command names {' and '.join(named)}"
                ev.runtime_code = ran
                if ran:
                    self._detail.append(f"{ran}: code the run may execute was not inspected")
        else:
            # another disassembler's text (x86 objdump's) on a card that must run the binary: a SASS
            # name counts as an opcode of SASS only (a host function named HMMA, `<HMMA>:`, met
            # `HMMA: 1` with no GPU instruction seen: a red-team finding); other names as before
            must_run = self.result.expectation.cc is not None and self.result.expectation.outcome is Outcome.PASS
            counts = count_instructions(text, names, sass=must_run)
        self.result.instruction_counts = counts
        ev.missing_instructions = {
            name: (counts[name], needed) for name, needed in self.variant.instructions.items() if counts[name] < needed
        }
        if ev.missing_instructions:  # `ffma: 1` where the dump holds FFMA: said, on any node
            ev.instructions_case = case_slips(text, ev.missing_instructions)
        return "failed" if ev.missing_instructions else "ok"
