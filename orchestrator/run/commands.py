"""The shell the stages send to a node: each command under a remote `timeout -k`
(guarded), the job's run with the kernel's commands given the farm's files
(kernel_run), the checks of a build's inputs, and the node's python3 reading the
runner. Built from quoted parts only."""

from __future__ import annotations

import posixpath
import secrets
import shlex

from orchestrator.config.inputs import FOLDER_DIGEST_SH
from orchestrator.config.job_spec import VariantSpec
from orchestrator.config.jobs import Job
from orchestrator.config.kernel_calls import prefix_kernel_calls
from orchestrator.run.bundle import Placed
from orchestrator.run.cell import CellPaths
from orchestrator.run.preload import PRELOAD_FILE, preload_check
from orchestrator.run.probe import RUNNER_SOURCE
from orchestrator.run.removal import remove_sh
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.transport.base import ended_sh


def runner_command(python: str, version: str = "", code: bytes = b"") -> tuple[str, bytes]:
    """The node's python3 reading the runner from stdin, and what goes on stdin before
    the plan. Isolated (-I) from the login's PYTHON* variables and user site, and -S:
    the runner needs no site packages, and starts faster without. With `code` (the
    runner as the probe's python3 compiled it, of sys.version `version`), a python3
    of that very version loads it (no compiling: a quarter of the node's CPU per
    cell); any other compiles the source, which is sent beside it."""
    # a runner cut short says so in words the farm knows (stdin_gate.stdin_hint): a login's reader of
    # stdin took it (review 128: an empty read compiled to nothing, or marshal's bare EOFError)
    cut = "sys.exit('farm-runner: stdin ended early')"
    if not code:
        boot = (
            f"import sys; s = sys.stdin.buffer.read({len(RUNNER_SOURCE)}); "
            f"exec(compile(s, 'farm-runner', 'exec')) if len(s) == {len(RUNNER_SOURCE)} else {cut}"
        )
        return f"{shlex.quote(python)} -I -S -c {shlex.quote(boot)}", RUNNER_SOURCE
    boot = (
        f"import sys, marshal; r = sys.stdin.buffer.read; c = r({len(code)}); s = r({len(RUNNER_SOURCE)}); "
        f"{cut} if len(c) + len(s) != {len(code) + len(RUNNER_SOURCE)} else "
        f"exec(marshal.loads(c) if sys.version == {version!r} else compile(s, 'farm-runner', 'exec'))"
    )
    return f"{shlex.quote(python)} -I -S -c {shlex.quote(boot)}", code + RUNNER_SOURCE


KILL_GRACE = 5  # seconds between TERM and KILL of a timed-out command


CHANNEL_MARGIN = 30.0  # channel timeout beyond the remote timeout


# The most any file the kernel writes may hold, its stdout and stderr included (RLIMIT_FSIZE, by
# the POSIX shell's `ulimit -f`, in 512-byte blocks): every byte of its output is read, hashed and
# scanned, so a kernel that seeked 4 GiB ahead in its stdout held its cell past the stage's budget,
# an infra-error retried for minutes, not its own failure. Past it the kernel gets SIGXFSZ (EFBIG).
OUTPUT_LIMIT = 256 << 20


def guarded(command: str, limit: int, redirects: str, marker: str = "", watch: str = "") -> str:
    """A shell fragment running `command` under `timeout -k`, leaving its exit
    status in $rc, and then killing whatever is left of its process group, and waiting until that
    ended (ended_sh: the cell's end, and its GPU lock's release, come after it).

    `timeout` leads its own process group; but when the command's first process
    dies of the TERM and a child that ignores TERM lives on, timeout exits at
    once and never sends the KILL. The group kill afterwards catches that child.
    `marker` ("FARM_RUN=... FARM_CELL=..." and scheduler.CELL_ENV) goes into the environment of the
    command and everything it starts, so `reap` finds even those that left
    the group (a daemon's double fork and setsid keep their environment). `watch`: shell started
    once $pid is the command's (stages/room.py's sampler, which runs while $pid does).
    """
    return (
        f"{marker}timeout -k {KILL_GRACE} {limit} sh -c {shlex.quote(command)} {redirects} & pid=$!; {watch}"
        # farm_gn: how many of its group were still running once it ended (a kernel's forked child, a
        # run's `helper &`), counted before the kill (a zombie is none): the run's leftovers (red-team 257)
        f"wait $pid; rc=$?; farm_gn=0; kill -s 0 -- -$pid 2>/dev/null && {{ {GROUP_COUNT_SH}"
        f"kill -s KILL -- -$pid 2>/dev/null && {{ {GROUP_SH}{ended_sh('$farm_gk')}:; }}; }}"
    )


# Shell setting farm_gn to how many processes of group $pid have not ended (a zombie has)
GROUP_COUNT_SH = (
    'for farm_gf in /proc/[0-9]*/stat; do read -r farm_rx 2>/dev/null < "$farm_gf" || continue; '
    "farm_rx=${farm_rx##*) }; farm_gs=${farm_rx%% *}; farm_rx=${farm_rx#* }; farm_rx=${farm_rx#* }; "
    '[ "${farm_rx%% *}" = "$pid" ] && [ "$farm_gs" != Z ] && farm_gn=$((farm_gn+1)); done; '
)

# Shell setting farm_gk to the pids of process group $pid (killed just before: the group's kill
# reached someone, else none of this runs), for ended_sh to wait until they ended (a zombie has)
GROUP_SH = (
    'farm_gk=; for farm_gf in /proc/[0-9]*/stat; do read -r farm_rx 2>/dev/null < "$farm_gf" || continue; '
    "farm_rx=${farm_rx##*) }; farm_rx=${farm_rx#* }; farm_rx=${farm_rx#* }; "
    '[ "${farm_rx%% *}" = "$pid" ] || continue; farm_gf=${farm_gf%/stat}; farm_gk="$farm_gk ${farm_gf#/proc/}"; done; '
)


def own_tmp(folder: str) -> tuple[str, str]:
    """Shell making FOLDER afresh as the stage's own $TMPDIR (as noderunner.own_tmp: the node's
    is left as it was where it cannot be made), and shell removing it."""
    q = shlex.quote(folder)
    return f"{remove_sh(q)}; if mkdir -m 700 {q} 2>/dev/null; then TMPDIR={q}; export TMPDIR; fi; ", remove_sh(q)


# A run's stdout and stderr are the kernel's own. Each command of the job's run that names
# {binary} (config/kernel_calls.py kernel_commands: `{binary} 5`, `env X=1 {binary}`,
# `valgrind {binary}`, `bash -c "{binary}"`) is called through farm_kernel, which gives it the
# farm's stdout and stderr and notes its exit status in a file the farm reads back. The run
# itself runs in a subshell whose own output goes to a file of its own: what the other commands
# print (`./prep.sh && {binary}`, `echo PA''SS`) is shown apart and never read for a marker, and
# an `exit 0` after the kernel ends only the subshell. The farm then judges the kernel's first
# failing status, else the run's own (run/stages/run.py _ran; classify says which failed). A shell
# function, not a wrapper file: `valgrind {binary}` checks the kernel itself, a launcher that
# closes its descriptors (python's subprocess, sudo) still hands the kernel the farm's files.
# The two files lie beside the kernel's work folder, not in it: where the node's python3 runs the
# cell, it opens them itself, and the kernel, confined to its work folder, can write them by no
# path (`echo 0 > .farm-status` after a failing kernel passed it: a red-team finding). A run
# that starts other programs than the kernel (`./prep.sh && {binary}`) holds none of the kernel's
# files in its shell there either: the runner starts each kernel command itself, with them, at
# its trampoline's request, and notes its status (noderunner.KernelFiles; a program among the
# other commands wrote a 0 status and the marker into fds the shell held, the kernel never
# started: a red-team finding). A run of kernel commands alone (`{binary} 5`, `nice {binary}`)
# starts nothing but the kernel and its launchers, which get them with fds 6-8 closed: there the
# runner hands the shell fds 6-8, a python3 start less per kernel command. The shell scripts (no
# python3 on the node) always hold them, unconfined, and say so on each cell. A run naming fds
# 6-8 is refused at load.
KERNEL_FILES = (".farm-status", ".farm-other")


def kernel_files(run_dir: str) -> list[str]:
    """Where the statuses and the other commands' output of the cell's run are written."""
    return [f"{run_dir}/{name}" for name in KERNEL_FILES]


# bytes of the kernel commands' statuses read back: a run that notes more has statuses the farm
# never read (run/stages/run.py: no pass then; 4096 bytes cut off a failing status after 2048 calls)
STATUS_LIMIT = 64 << 10


OTHER_LIMIT = 64 << 10  # bytes of the other commands' output read back (their tail is shown)


CANNOT_START_NOTE = "cannot-start"  # noted (with the statuses) where a command's launcher is not there to run
COPY_GONE_NOTE = "copy-gone"  # noted where the cell's copy is no longer there, or lost its x bit
# noted as each kernel command starts, before its status (node/kernel_commands.py STARTED_NOTE): one
# with no status after it had not ended when the run did, and was killed unnoted (`f &` in a script
# the run sourced, where the loader cannot read it: the first call's exit 0 and marker passed the
# cell with a later kernel command cut off mid-run, a red-team finding); the run then fails
STARTED_NOTE = "started"
# noted before a kernel command's status where the copy's access time, set to 0 before it, was still 0
# after it (node/files.py watch, for each command): its launcher failed before it ran the kernel. The
# run's own check saw a read by any of its commands: `taskset -c 4095 {binary}; {binary}` had the second
# read the copy, and the first's "Invalid argument" was judged a refusal (a red-team finding)
UNREAD_NOTE = "unread"


# the driver's variables a kernel command starts with (node/kernel_commands.py JIT_ENV, CACHE_OFF,
# jit_notes says why): noted as `jit-env=NAME` (in its environment) or `jit-word=NAME` (in its
# launchers' words), each one token, before it starts
JIT_ENV = ("CUDA_FORCE_PTX_JIT", "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_JIT", "CUDA_DISABLE_JIT")
CACHE_OFF = ("CUDA_CACHE_DISABLE", "1")


def _jit_check(cell: str, preload_file: str = PRELOAD_FILE) -> str:
    """Shell noting the driver's variables the kernel command is about to start with, and the
    loader's (preload.py preload_check). A shell variable the run set but did not export is noted too: no
    pass on a doubt."""
    said = "".join(f'case "${{{v}-}}" in ""|0) ;; *) echo jit-env={v} >&6;; esac; ' for v in JIT_ENV)
    name, value = CACHE_OFF
    # set but not as the farm sets it (unset: a node or a test without the marker, not noted)
    said += f'case "${{{name}-{value}}}" in {value}) ;; *) echo jit-env={name} >&6;; esac; '
    return said + preload_check(cell, preload_file)


def _jit_words() -> str:
    """Shell adding `jit-word=NAME` to farm_j where the word farm_a names one of JIT_ENV."""
    return "".join(f'case "$farm_a" in *{v}*) farm_j="$farm_j jit-word={v}";; esac; ' for v in JIT_ENV)


def jit_started(notes: list[bytes]) -> str:
    """Why a kernel command may have run other code than the counted, from its `jit-env=` and
    `jit-word=` notes (node/kernel_commands.py jit_notes, _kernel_call), or ""."""
    said = {note.decode("ascii", "replace") for note in notes if note.startswith((b"jit-env=", b"jit-word="))}
    env = sorted(n.split("=", 1)[1] for n in said if n.startswith("jit-env=") and n != f"jit-env={CACHE_OFF[0]}")
    words = sorted(n.split("=", 1)[1] for n in said if n.startswith("jit-word="))
    why = []
    if env:
        why.append(
            f"a kernel command started with {', '.join(env)} set in its environment (its run or the node set it)"
        )
    if words:
        why.append(f"a kernel command's launcher words name {', '.join(words)}")
    if f"jit-env={CACHE_OFF[0]}" in said:
        why.append(
            f"a kernel command started with {CACHE_OFF[0]} other than the farm's {CACHE_OFF[1]} in its "
            "environment: the driver's JIT cache may have handed it code the farm never saw"
        )
    return "; ".join(why)


def unread_failing(notes: list[bytes]) -> bool:
    """Whether a kernel command that failed was noted unread (UNREAD_NOTE just before its status)."""
    flagged = False
    for note in notes:
        if note == UNREAD_NOTE.encode():
            flagged = True
        elif note.isdigit() and len(note) < 4:
            if flagged and int(note):
                return True
            flagged = False
    return False


# Each launcher of a kernel command (the loader names them: config/kernel_calls.py
# prefix_kernel_calls) is looked for on the node's PATH as a file, its absolute entries only,
# and run by the path found: not by `command -v` (bash's keyword `time` passed it where dash has
# none: one run, two verdicts by the node's sh), and not by the shell's own lookup, which an
# empty or `.` entry of a node's PATH sends to the run's work folder. One that lies where the run
# could have written it (its cell's folder, /tmp, /var/tmp, /dev; symlinks followed) is not
# run either: `./nice {binary}` and `/tmp/nice {binary}` ran a fake nice printing the marker, a
# false pass; so is one behind another (`nice numactl {binary}`: nice's 127 for a missing
# numactl read as the kernel's failure). All red-team findings.
# valgrind reads options from ./.valgrindrc and ~/.valgrindrc too: a run that wrote one (without
# naming it) had valgrind print its XML, with a comment the pass marker matched, on the kernel's
# stdout (a red-team finding). Each valgrind a kernel command runs is told to read its command line alone.
VALGRIND_ONLY_OPTION = "--command-line-only=yes"
LAUNCHER_WRITABLE_NOTE = "launcher-writable"  # noted where a launcher lies where the run could write
_RUN_WRITABLE = ("/tmp", "/var/tmp", "/dev")


def _launcher_look(cell: str) -> str:
    """Shell setting farm_a to the file launcher farm_a runs, or farm_miss to why there is none.
    The path is checked as found and as it resolves (a link swapped after the look: a red-team
    finding); where the node has no readlink, as found."""
    places = "|".join([f"{shlex.quote(cell)}/*", *(f"{place}/*" for place in _RUN_WRITABLE)])
    return (
        'farm_p=; case "$farm_a" in /*) farm_p=$farm_a;; */*) ;; '
        '*) farm_s="$PATH:"; while [ -n "$farm_s" ]; do farm_d=${farm_s%%:*}; farm_s=${farm_s#*:}; '
        'case "$farm_d" in /*) if [ -f "$farm_d/$farm_a" ] && [ -x "$farm_d/$farm_a" ]; then '
        "farm_p=$farm_d/$farm_a; break; fi;; esac; done;; esac; "
        'if [ -z "$farm_p" ] || [ ! -f "$farm_p" ] || [ ! -x "$farm_p" ]; then '
        f"farm_miss=${{farm_miss:-{CANNOT_START_NOTE}}}; else "
        # `|| farm_f=`: under the run's own `set -e` a missing readlink would end the shell
        'farm_f=$(command readlink -f -- "$farm_p" 2>/dev/null) || farm_f=; '
        f'for farm_x in "$farm_p" "${{farm_f:-$farm_p}}"; do case "$farm_x/" in {places}) '
        f"farm_miss=${{farm_miss:-{LAUNCHER_WRITABLE_NOTE}}};; esac; done; fi; "
        "farm_a=$farm_p; "
    )


def _kernel_call(name: str, binary: str, served: bool) -> str:
    """The shell function each kernel command is called through, as `NAME PLACES COMMAND`:
    PLACES ("1,4," or "-") where the loader read launchers among COMMAND's arguments
    (config/kernel_calls.py prefix_kernel_calls; each argument up to the copy is one word as
    written). Its name is the cell's own (a run that called `farm_""kernel echo PASS` had
    echo's output and status noted as a kernel's that never ran: a red-team review's), and
    it runs only a command holding the cell's copy among its words, by `command`: a function
    of the run's own named like a launcher (`nice() { echo PASS; }`) is not what runs (a
    red-team finding: a failing kernel passed so). Each launcher is replaced by the file it
    runs (_launcher_look): one not there, or not executable, is noted as such, the node's
    trouble, where the shell's own words for it vary with its locale and a kernel could print
    them; the copy gone or made not executable (by a run, after an earlier call) is noted
    apart. `|| farm_r=$?`: under the run's own `set -e` a failing kernel would end the shell
    before its status was noted (a red-team finding). SERVED: the command's words go to the
    node runner's trampoline as they are, and the runner does all of that itself before it
    starts the kernel, and notes its status (noderunner.KernelFiles); else through fds 6-8."""
    if served:
        return (
            f'{name}() {{ shift; farm_r=0; command "$farm_py" -I -S -c "$farm_tr" "$farm_sock" "$@" || farm_r=$?; '
            'return "$farm_r"; }; '
        )
    copy = shlex.quote(binary)
    cell = posixpath.dirname(posixpath.dirname(binary))  # the copy lies in bin/ of the cell's folder
    note = 'echo "$farm_miss" >&6; '
    # farm_rd: the copy's access time tells a read (the runner's watch, or the shell's farm_w): 0 before
    # each command, and still 0 after it, noted (UNREAD_NOTE)
    reset = f'if [ -n "${{farm_rd-}}" ]; then command touch -a -d @0 {copy} 2>/dev/null || :; fi; '
    check = (
        f'if [ -n "${{farm_rd-}}" ] && [ "$(command stat -c %X {copy} 2>/dev/null)" = 0 ]; then '
        f"echo {UNREAD_NOTE} >&6; fi; "
    )
    call = (
        # what it starts with, as it starts (jit_started): a file the run sourced set it out of its text's sight
        f'{_jit_check(cell)}case "$farm_j" in ?*) echo "$farm_j" >&6;; esac; '
        f'echo {STARTED_NOTE} >&6; {reset}farm_r=0; command "$@" >&7 2>&8 6>&- 7>&- 8>&- || farm_r=$?; '
        f'{check}echo "$farm_r" >&6; '
    )
    return (
        f"{name}() {{ farm_k=,$1; shift; farm_ok=; farm_miss=; farm_v=; farm_j=; farm_i=0; farm_n=$#; "
        'while [ "$farm_n" -gt 0 ]; do farm_a=$1; shift; farm_n=$((farm_n - 1)); farm_i=$((farm_i + 1)); '
        # a launcher's words as the shell expanded them, up to the copy: what they set (JIT_ENV)
        f'if [ -z "$farm_ok" ]; then {_jit_words()}case "$farm_a" in {copy}) farm_ok=1;; *) '
        f'case "$farm_k" in *",$farm_i,"*) {_launcher_look(cell)}'
        'case "$farm_a" in */valgrind) farm_v=1;; esac; '
        'farm_k=${farm_k%%",$farm_i,"*},${farm_k#*",$farm_i,"};; esac;; '
        'esac; fi; set -- "$@" "$farm_a"; '
        # valgrind's options are its command line's alone (VALGRIND_ONLY_OPTION)
        f'case "$farm_v" in 1) farm_v=; set -- "$@" {VALGRIND_ONLY_OPTION};; esac; '
        'done; case "$farm_ok" in 1) ;; *) return 127;; esac; '
        # a launcher the loader placed after the copy, as the shell expanded the command: not looked at
        f'case "$farm_k" in *[0-9]*) farm_miss=${{farm_miss:-{CANNOT_START_NOTE}}};; esac; '
        # the copy still a file there with its x bit, yet not executable: a noexec mount, the node's
        f'if [ -z "$farm_miss" ] && {{ [ ! -f {copy} ] || [ ! -x {copy} ]; }}; then '
        f"if [ -f {copy} ] && [ ! -L {copy} ] && "
        f'[ -n "$(command find {copy} -prune -perm -u+x 2>/dev/null)" ]; '
        f"then farm_miss={CANNOT_START_NOTE}; else farm_miss={COPY_GONE_NOTE}; fi; fi; "
        f'if [ -n "$farm_miss" ]; then {note}return 127; fi; '
        f'{call}return "$farm_r"; }}; '
    )


def kernel_run(template: str, binary: str, files: list[str] | None = None, served: bool = False) -> str:
    """The run command for the shell (run in the cell's work folder, where `binary`, the
    cell's copy, lies): the job's `run` in a subshell, each command naming {binary} called
    through the cell's own farm_kernel_* function. With `files` (kernel_files: the shell
    scripts) the shell opens them as fds 6 and 1-2, the kernel's stdout and stderr going to 7
    and 8; without, the node's python3 runner opens them: as the same fds, or, SERVED (a run
    that starts other programs: config/kernel_calls.py runs_other_programs), kept by the runner,
    which starts each kernel command itself (noderunner.KernelFiles)."""
    q = shlex.quote
    name = f"farm_kernel_{secrets.token_hex(6)}"
    run = prefix_kernel_calls(template, name).replace("{binary}", q(binary))
    body = f"{_kernel_call(name, binary, served)}( {run}\n)"
    if files is None:
        return body
    status, other = (q(path) for path in files)
    return f"exec 6>{status} 7>&1 8>&2 >{other} 2>&1; {body}"


def kernel_statuses(text: bytes) -> list[int]:
    """The exit statuses the run's kernel commands noted, in order."""
    return [int(line) for line in text.decode("ascii", "replace").split() if line.isdigit() and len(line) < 4]


def other_output(data: bytes, limit: int = 300) -> str:
    """The tail of what a run's other commands printed (of the first OTHER_LIMIT bytes), on one line."""
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    text = " / ".join(lines)
    return text if len(text) <= limit else "..." + text[-limit:]


def render_build(job: Job, variant: VariantSpec, snapshot: NodeSnapshot, paths: CellPaths) -> str:
    fields = {
        "nvcc": shlex.quote(snapshot.nvcc_path),
        "binary": shlex.quote(paths.binary),
        "sources": " ".join(shlex.quote(f"{paths.sources.folder}/{s}") for s in job.spec.sources),
        **{name: shlex.quote(placed.folder) for name, placed in paths.dependencies.items()},
    }
    return variant.build.format(**fields)


def input_checks(paths: CellPaths) -> list[tuple[str, Placed]]:
    """The folders a build reads, each to be checked against its digest around it."""
    checks = [("sources", paths.sources)] + [(f"dependency:{n}", p) for n, p in sorted(paths.dependencies.items())]
    if paths.toolchain is not None:  # a shipped compiler is the farm user's, as writable as the sources
        checks.append(("toolchain", paths.toolchain))
    return checks


def verify_inputs_script(paths: CellPaths, tag: str) -> str:
    """Shell that prints `@@farm TAG NAME DIGEST` for every input folder whose
    digest is not the expected one, and then sets `bad=1`. Before the build
    ("altered") it notes each folder's inode; after it ("altered-during") a folder
    put in its place again meanwhile (a re-staging, by this farm or another naming
    this machine) is `@@farm TAG NAME replaced`: its digest says nothing of what
    the build read (noderunner.identities)."""
    parts = ["bad="]
    for index, (name, placed) in enumerate(input_checks(paths)):
        folder = shlex.quote(placed.folder)
        inode = f"$(ls -di {folder} 2>/dev/null)"
        if tag == "altered":
            parts.append(f"i{index}={inode}")
        parts.append(
            f"d=$(cd {folder} 2>/dev/null && {FOLDER_DIGEST_SH}); "
            f'[ "$d" = {placed.digest} ] || {{ echo "@@farm {tag} {name} ${{d:-missing}}"; bad=1; }}'
        )
        if tag != "altered":
            parts.append(
                f'[ -n "$bad" ] || [ "{inode}" = "$i{index}" ] || {{ echo "@@farm {tag} {name} replaced"; bad=1; }}'
            )
    return "; ".join(parts)


# The shell scripts' clock, in ns: the kernel's seconds and a stage's are differences of it,
# so CLOCK_BOOTTIME (/proc/uptime, 10 ms steps, read by the shell itself) where there is one: a
# wall clock stepped back mid-run (NTP) turned a timeout into `fail`. `date` elsewhere.
NOW_NS = 'read farm_t _ 2>/dev/null </proc/uptime && echo "${farm_t%.*}${farm_t#*.}0000000" || date +%s%N'
