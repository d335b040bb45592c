"""The rule a variant's `run` meets at load: its output and failure are the kernel's own.

On the node (run/commands.py kernel_run), only a command that runs the kernel, with
{binary} as its program or as the operand of a launcher (config/shell.py LAUNCHERS:
env, timeout, numactl, valgrind, ...), prints into the farm's files, and its status is
noted. So a run may prepare the kernel and check after it, but {binary} must stand
where the shell runs it: as a word of its own, never quoted, inside `$( )`, glued to
other text or in a here-document, and never as another program's argument (`echo
{binary} PASS` once passed a kernel that never ran). Found by red-team helpers:
`{binary} 2>&1 | tee run.log` passed a kernel that failed its numbers (tee's exit 0,
its stderr in stdout), `{binary}; echo PASS` passed whatever ran, and a quoted
`"$(cat expected.txt)"` before the kernel had the farm read cat's output as the
kernel's.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.config.job_spec import JobSpec
from orchestrator.config.kernel_calls import kernel_launchers
from orchestrator.config.launchers import launched_otherwise, launcher_words
from orchestrator.config.shell import (
    ASSIGNMENT,
    BINARY,
    Command,
    Redirect,
    kernel_command,
    lex,
    unquoted,
)
from orchestrator.errors import ConfigError
from orchestrator.run.streams import compile_marker

RUN_EXPECTED = (
    "a run whose output and failure are the kernel's own: '{binary}' as a command with its "
    "arguments (or the operand of a launcher: env, timeout, numactl, taskset, nice, valgrind, "
    "compute-sanitizer, mpirun, srun, ...), after commands that prepare it if need be; its output "
    "neither piped, sent to the background, nor redirected (the farm keeps it: farm show ID); no "
    "`||` after it; no use of the farm's fds 6-8; and no text before it that the job's markers match"
)
_FARM_FDS = ("6", "7", "8")
_CONTEXT = {
    "quoted": "inside quotes (the shell passes it to another program as text)",
    "substituted": "inside `$( )` or backquotes (its output would be the run's, not the farm's)",
    "glued": "glued to other text or as a file (`{binary}.log`, `X={binary}`, `> {binary}`)",
}


# what sh and bash read differently (a bash /bin/sh on some nodes, dash on others), or what
# could take the farm's own words away from it: refused wherever they stand
_OTHER_SHELLS = (
    (re.compile(r"(?<!\$)\(\("), "`((` (not `$((`)"),
    (re.compile(r"\[\["), "`[[`"),
    (re.compile(r"\$'"), "`$'...'`"),
    (re.compile(r"&>"), "`&>` (dash reads `&` and `>`)"),
)
# the farm's own words on the node: its shell function and variables (farm_kernel, farm_r), its
# files beside the kernel (.farm-status, .farm-other), and the fd bash would write its trace
# into: a run naming them could speak for the kernel
_FARMS_OWN = (
    (
        # its function and every variable it and the trampoline's call use (`farm_py=...` replaced
        # the trampoline: a red-team review's); a file named so is fine (`./farm_x`, `a/farm_x`)
        re.compile(r"(?<![A-Za-z0-9_./-])farm_[A-Za-z0-9_]"),
        "the farm's own shell names (farm_kernel, farm_r, farm_py, ...: any farm_*)",
    ),
    (re.compile(r"\.farm-"), "the farm's own files beside the kernel (.farm-status, .farm-other)"),
    (re.compile(r"BASH_XTRACEFD"), "BASH_XTRACEFD, which writes bash's trace into an fd the run names"),
    # valgrind's options from outside its command line: `VALGRIND_OPTS=--log-fd=1 valgrind {binary}`
    # sent its output, the kernel's command line in it, into the kernel's stdout; and the folder it
    # starts its tool from: `VALGRIND_LIB=v valgrind {binary}` ran a tool the run wrote, printing the
    # marker, in the kernel's place (red-team findings)
    (re.compile(r"VALGRIND_|valgrindrc"), "valgrind's options or tools from outside its command line"),
)
# fds 6-8 named anywhere in the run's text: `6>x`, `>&7`, `/dev/fd/8`, inside `$( )` too (where
# the lexer does not look: `$(echo PASS >&7)` printed for a kernel that never ran)
_FARM_FDS_ANYWHERE = re.compile(r"(?<![0-9A-Za-z_])[678][<>]|[<>]&\s*[678](?![0-9])|/fd/+[678](?![0-9])")
# the dynamic loader's variables and CUDA's injection libraries: the code the kernel's process
# loads. Where the runner starts a kernel command for a request (noderunner.KernelFiles) it gives
# the kernel the node's, whatever the request says (a program of the run asked for the copy with
# LD_PRELOAD naming a library that printed the marker: a red-team finding); a run may read them
# but not set them, so the kernel loads the same code on either path
_LOADS_CODE = re.compile(
    r"(?<![A-Za-z0-9_$])(?<!\$\{)(?:LD_[A-Za-z0-9_]*|[A-Za-z0-9_]*INJECTION[A-Za-z0-9_]*|GCONV_PATH)\b"
)
# where the launchers find their messages (gettext reads LANGUAGE as a folder under the node's
# locales, `../` included: a catalog of the run's had `env -C nodir {binary}` print the kernel's
# refusal, an expected refusal for a kernel that never ran: a red-team finding); the node's
_LANGUAGE_SET = re.compile(r"(?<![A-Za-z0-9_$])(?:LANGUAGE|LOCPATH|NLSPATH)\b(?!\}|:?[-+?])")
# what a shell started as a launcher (nsys and ncu are bash scripts) reads before its own text: a
# startup file (BASH_ENV, ENV), functions (BASH_FUNC_*), options (SHELLOPTS: xtrace) and the trace's
# prefix (PS4), printed on the kernel's stderr; the node's
_SHELL_STARTUP = re.compile(
    r"(?<![A-Za-z0-9_$])(?<!\$\{)(?:BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|BASH_FUNC_[A-Za-z0-9_%]*)(?![A-Za-z0-9_])"
)
# the launchers' own placement settings: `SLURM_JOB_ID=123 srun {binary}` ran the kernel as a step of
# another job (its node, its GPU), `OMPI_MCA_orte_default_hostfile=h mpirun` on the file's hosts, past
# every option round 96 reads (round 101); the node runner gives a request the node's own, and a run
# of kernel commands alone, which its shell starts as written, may not set them either: read is fine
_PLACEMENT_SET = re.compile(
    r"(?<![A-Za-z0-9_$])(?:SLURM_|SRUN_|SALLOC_|SBATCH_|OMPI_|PMIX_|PRTE_|OPAL_|HYDRA_|MPIEXEC_|I_MPI_"
    # the other schedulers' host lists, which Hydra and Open MPI read where they find them (PBS, LSF, SGE)
    r"|PBS_|LSB_|PE_HOSTFILE|COBALT_)[A-Za-z0-9_]*(?![A-Za-z0-9_])(?!\}|:?[-+?#%])"
)
_TIME_SET = re.compile(r"(?<![A-Za-z0-9_$])(?<!\$\{)TIME\b(?!\}|:?[-+?])")
# the builtins that set or unset a variable by a name of their arguments: a name the shell fills in
# (`V=PAT; export "$V"H=...`) is a variable the rules above cannot see (the run's PATH reached the
# kernel so, and ran a fake nvidia-smi: a red-team finding)
_NAMING = frozenset({"export", "readonly", "declare", "typeset", "local", "unset", "read", "getopts"})
_PIN = "CUDA_VISIBLE_DEVICES"
# reading the farm's pin is fine (`echo $CUDA_VISIBLE_DEVICES`); anything else that names it
# (`CUDA_VISIBLE_DEVICES=0 {binary}`, `unset`, `env -u`, `${...:=0}`) could move the kernel to another GPU
_PIN_READ = re.compile(r"\$CUDA_VISIBLE_DEVICES(?![A-Za-z0-9_])|\$\{#?CUDA_VISIBLE_DEVICES(?=\}|:?[-+?]|[#%])")
_NOT_PROGRAMS = {  # the program word of a command: what the farm cannot read as commands
    "eval": "`eval`, whose text the farm cannot read as commands",
    "trap": "`trap`, whose text the farm cannot read as commands",
    "builtin": "`builtin` (bash), which runs `eval` and the others by another name",
    "function": "the bash keyword `function`, which sh reads as a program",
    # where the farm's function finds a launcher, and the program a command name runs (red-team findings:
    # `hash -p ./fake nice` and bash's `enable -n command` ran a fake in the launcher's place, a false pass)
    "hash": "`hash`, which changes the program a command name runs",
    "enable": "`enable` (bash), which turns off the builtins the farm's own commands use",
    "coproc": "`coproc` (bash), which runs its command in the background, unwaited for",
    # `alias k='f &'`: a background (or any text) the farm's checks never read (a red-team finding)
    "alias": "`alias`, whose text the farm cannot read as commands",
    "unalias": "`unalias`, which changes what the run's words run",
}
# the run's own PATH: a launcher looked up there could be a program of the run's (`PATH=.:$PATH nice
# {binary}` ran a fake nice printing the marker: a false pass), or hidden (the node blamed); read is fine
_PATH_CHANGED = re.compile(r"(?<![A-Za-z0-9_${])PATH(?![A-Za-z0-9_])")
_FUNCTION = re.compile(r"(?:^|[\s;&|(){}])([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*\)")
# the commands the farm's own shell calls by name (`find`, `readlink`, `touch` and `stat` by `command` too)
_NOT_REDEFINED = frozenset(
    {"echo", "printf", "command", "exec", "return", "read", "exit", "trap", "set", "eval", "find", "readlink", "test"}
    | {"touch", "stat"}
)


def _refusal(run: str, job: JobSpec) -> str | None:
    """Why `run` cannot be judged as the kernel's, or None."""
    lexed = lex(run)
    if lexed.problem:
        return f"text the shell cannot read ({lexed.problem})"
    if "\\" + BINARY in run:
        return "an escaped {binary} (`\\{binary}`), which runs the kernel where the farm cannot see it"
    joined = run.replace("\\\n", "")  # as the shell reads a continued line: `name\<newline>()` is `name()`
    for pattern, name in _OTHER_SHELLS:
        if pattern.search(joined):
            return f"{name}, which sh and bash read differently"
    # the words as the shell hands them on, quotes and backslashes gone (`farm_""kernel`,
    # `CUDA_VISIBLE_DEVICE""S=0`, a red-team review's), and wherever they stand (inside `$( )`)
    bare = re.sub(r"[\"'\\]", "", joined)
    for pattern, name in _FARMS_OWN:
        if pattern.search(bare):
            return name
    if _PATH_CHANGED.search(bare):
        return "PATH other than read (`$PATH`): the farm looks the kernel's launcher up on the node's own PATH"
    if named := _named_by_the_shell(lexed.commands):
        return named
    if "time" in kernel_launchers(run) and _TIME_SET.search(bare):
        return "TIME other than read in a run under `time`: GNU time's format, printed on the kernel's stderr"
    if loads := _LOADS_CODE.search(bare) or re.search(r"\$\{(?:LD_\w*|\w*INJECTION\w*|GCONV_PATH):?=", bare):
        return (
            f"{loads.group(0)} other than read: the code the kernel's process loads (the dynamic loader's "
            "and CUDA's injection variables) is the node's"
        )
    if started := _SHELL_STARTUP.search(bare):
        return (
            f"{started.group(0)} other than read: what a shell started as a launcher reads before its "
            "own text (its startup file, functions, options, trace prefix) is the node's"
        )
    if spoken := _LANGUAGE_SET.search(bare):
        return (
            f"{spoken.group(0)} other than read: where the launchers find the messages they print "
            "(gettext's catalogs, the locales) is the node's"
        )
    if placing := _PLACEMENT_SET.search(bare):
        return (
            f"{placing.group(0)} other than read: the launchers' own settings (Slurm's, MPI's) that choose "
            "where the kernel runs are the node's"
        )
    if bare.count(_PIN) > len(_PIN_READ.findall(bare)):
        return f"{_PIN} other than read (`${_PIN}`): it pins the cell to the GPU the farm chose"
    for defined in _FUNCTION.findall(joined):
        if defined in _NOT_REDEFINED or defined.startswith("farm_"):
            return f"a function named {defined!r}, which the farm's own commands on the node call"
    if lexed.heredoc_binary:
        return "{binary} in a here-document's text"
    runs_kernel = False
    for command in lexed.commands:
        for redirect in command.redirects:
            if _farm_fd(redirect):
                return f"the redirection {redirect.fd}{redirect.op}{redirect.target}: fds 6, 7 and 8 are the farm's"
        for word in command.words:
            for where in word.binaries:
                if where in _CONTEXT:
                    return f"{{binary}} {_CONTEXT[where]} in {word.text!r}"
        program = command.program()
        if program and command.words[program[0]].text in _NOT_PROGRAMS:
            return _NOT_PROGRAMS[command.words[program[0]].text]
        if not any("whole" in word.binaries for word in command.words):
            continue
        if kernel_command(command) is None:
            program = command.program()
            name = command.words[program[0]].text if program else "?"
            return (
                f"{{binary}} as an argument of {name!r}, which the farm does not know to run it as its own "
                "program (and hand back its status): run it as a command, or through a launcher"
            )
        runs_kernel = True
        if found := launched_otherwise(command):
            return found
        if found := _second_program(command):
            return found
        if found := _kernels_output_taken(command):
            return found
        if found := _markers_before(command, job, run):
            return found
    if not runs_kernel:
        return "a run that never runs {binary} as a command"
    functions = set(_FUNCTION.findall(joined))
    for sent in lexed.background:
        # `{binary}; ( {binary} slow ) &`: a subshell, group, loop or function call of the run's in the
        # background may hold a kernel command; the run ended at once, the farm killed that kernel with
        # its status never noted, and the first call's exit 0 and marker passed the cell (a red-team
        # finding). A simple command (a daemon the run starts) may still go there.
        if sent in (")", "}", "done", "fi", "esac", BINARY) or sent in functions:
            what = "a subshell" if sent == ")" else repr(sent)
            return (
                f"`&` after {what} (or a list or pipeline holding it), which sends to the background what may "
                "run the kernel: the run would not wait for it, and a kernel command in it would be killed "
                "unnoted when the run ends"
            )
    if _FARM_FDS_ANYWHERE.search(bare):  # where the commands' own checks do not look
        return "a use of fds 6, 7 or 8 (inside `$( )` too): fds 6, 7 and 8 are the farm's"
    return None


def _named_by_the_shell(commands: list[Command]) -> str | None:
    """A variable a builtin sets or unsets by a name with an expansion in it (`export "$V"H=x`,
    `read "$N"`, `printf -v "$N"`): the run's rules on PATH, the GPU pin and the loader's
    variables read names as written."""
    for command in commands:
        found = command.program()
        if found is None:
            continue
        program = unquoted(command.words[found[0]].text)[0]
        words = [word.text for word in command.words[found[0] + 1 :]]
        if program == "printf":
            words = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-v"]
        elif program not in _NAMING:
            continue
        for text in words:
            name = text.split("=", 1)[0]
            if "$" in name or "`" in name:
                return f"{program} {text!r}, which names a variable the shell fills in: name variables as they are"
    return None


_MPMD = frozenset({"mpirun", "mpiexec", "srun"})


def _second_program(command: Command) -> str | None:
    """An MPI or Slurm launcher told to start another program beside the kernel (`mpirun -np 1
    {binary} : -np 1 echo PASS`: its output in the kernel's stdout)."""
    names = {word.text.rsplit("/", 1)[-1] for word in launcher_words(command)} & _MPMD
    at = next((i for i, word in enumerate(command.words) if "whole" in word.binaries), None)
    if names and at is not None and any(unquoted(w.text)[0] == ":" for w in command.words[at + 1 :]):
        return f"a `:` after {{binary}} under {sorted(names)[0]!r}, which starts another program beside the kernel"
    return None


def _kernels_output_taken(command: Command) -> str | None:
    """A pipe, `||`, `&` or an output redirection of the kernel's command."""
    if command.after in ("|", "||", "&"):
        why = {
            "|": "its output would go to the pipe, which gets nothing (the farm keeps it)",
            "||": "every kernel command's failure fails the cell, so no fallback can follow it",
            "&": "the run would not wait for it",
        }[command.after]
        return f"{command.after!r} after the kernel's command: {why}"
    for redirect in command.redirects:
        if ">" in redirect.op and redirect.fd in ("", "1", "2"):
            into = f"{redirect.fd}{redirect.op}{redirect.target}"
            if redirect.op in (">&", "<&") and redirect.target == "1":
                return f"{into!r}, which sends the kernel's stderr into its stdout"
            return f"{into!r}, which sends the kernel's output elsewhere: the farm keeps its stdout and stderr itself"
    return None


def _farm_fd(redirect: Redirect) -> bool:
    """A redirection of fds 6-8 or into them, however the target is written (`>&"7"`, `>&$fd`:
    a target the shell computes is refused after `>&` and `<&`; `/dev/fd/7`, `/proc/self/fd/7`)."""
    target = redirect.target.replace('"', "").replace("'", "").replace("\\", "")
    target = re.sub(r"/(?:\.?/)+", "/", target)  # `/dev//fd/7`, `/dev/./fd/7`: the same file
    if redirect.fd in _FARM_FDS:
        return True
    if redirect.op in (">&", "<&") and (target in _FARM_FDS or "$" in target or "`" in target):
        return True
    return bool(re.fullmatch(r"/(?:dev/fd|proc/[^/]+/fd)/[678]", target))


# Launchers that print the command they start, its arguments included (strace's execve line,
# valgrind's "Command:", `time -f %C`), on the kernel's stdout or stderr: there the kernel's
# arguments may not hold the markers' words (`strace {binary} needs CC 9.0` printed a refusal the
# kernel never did; `time -o /dev/stdout -f %C {binary} PASS` a pass: a red-team finding).
_ECHOING = frozenset({"strace", "ltrace", "valgrind", "time"})


def _markers_before(command: Command, job: JobSpec, whole_run: str = "") -> str | None:
    """Marker text among the kernel command's words before {binary} (`env echo PASS {binary}`);
    the kernel's own arguments may hold the markers' words (`--expect PASS`), but for a
    launcher that prints them (_ECHOING)."""
    echoing = {word.text.rsplit("/", 1)[-1] for word in launcher_words(command)} & _ECHOING
    if echoing:  # words the shell changes would hide the markers from the check below
        # (`strace {binary} needs\ CC`, `"needs $C"`: a refusal the kernel never printed, a red-team finding)
        for word in command.words:
            if re.search(r"[$`\\]", word.text):
                return (
                    f"{word.text!r} in a command run under {sorted(echoing)[0]!r}, which prints the command it "
                    "starts: there its words are taken as written, without `$`, backquotes or backslashes"
                )
    before = []
    for word in command.words:
        if "whole" in word.binaries and not echoing:
            break
        if not echoing and re.search(r"[$`]", word.text) and not ASSIGNMENT.match(word.text):
            # a launcher's word the shell fills in: its own error message can hold whatever the
            # run put there (`env --"x=$M" {binary}`: "unrecognized option" and the refusal's text,
            # an expected refusal for a kernel that never ran: a red-team finding)
            return (
                f"{word.text!r} before the kernel, which the shell fills in: a launcher's words are written "
                "as they are (a launcher prints them when it refuses them)"
            )
        before.append(word.text)
    # as the shell passes them: quotes and backslashes gone (`timeout -k needs\ CC\ 9.0 5 {binary}`)
    text = re.sub(r"[\"'\\]", "", " ".join(before)).encode()
    if echoing:  # what it prints of the environment, or of files, is the run's text too: all of it
        text += b"\n" + re.sub(r"[\"'\\]", "", whole_run).encode()
    for key, marker in (("pass_marker", job.pass_marker), ("refusal_marker", job.refusal_marker)):
        if compile_marker(marker).search(text) is not None:
            if echoing:
                return (
                    f"text in a command run under {sorted(echoing)[0]!r}, which prints the command it starts, "
                    f"that the job's {key} {marker!r} matches"
                )
            return f"text before the kernel that the job's {key} {marker!r} matches"
    return None


def check_run(job: JobSpec, vname: str, run: str, file: Path) -> ConfigError | None:
    """A run command whose output or status would not be the kernel's: the farm would judge
    the command instead. The check reads the shell's words (config/shell.py), not what the
    shell will do: it refuses what the farm could not judge, not every way to mislead it."""
    if BINARY not in run:
        return ConfigError(str(file), f"variants.{vname}.run", f"{run!r}, which never runs {{binary}}", RUN_EXPECTED)
    why = _refusal(run, job)
    if why is None:
        return None
    return ConfigError(str(file), f"variants.{vname}.run", f"{run!r}, with {why}", RUN_EXPECTED)
