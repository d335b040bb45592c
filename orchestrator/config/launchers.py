"""A kernel command's launchers (`env`, `timeout`, `nice`, `mpirun`, `compute-sanitizer`, ...) as
the farm reads them: which of their options take a value, which would send their output into
the kernel's streams or a program, and which words before {binary} are launchers at all. What
config/run_command.py refuses at load, and where the node's function looks launchers up.
"""

from __future__ import annotations

import re

from orchestrator.config.placement import mca_placed_elsewhere, placed_elsewhere
from orchestrator.config.shell import ASSIGNMENT, Command, Word, before_kernel, launcher, unquoted

_SUBCOMMANDS = {"nsys": ("profile",)}  # a launcher's own verb before its options
# a number a launcher reads (`5`, `1.5`, `10s`, `0x3`, `0-3,5`), never a name (`2to3` ran 2to3)
_NUMBER_LIKE = re.compile(r"0x[0-9a-fA-F]+|[0-9]+(?:\.[0-9]+)?[smhd]?|[0-9]+(?:[-,:][0-9]+)*")


# The options that take the next word as their value, per launcher; any other option takes none
# (write `--option=value` for one not listed). A word the launcher could take for its program is
# refused: `env -i sh -c '...' {binary}` and `env -- printf ... {binary}` ran sh and printf, with
# the kernel as their argument (a red-team helper's false passes).
_SANITIZER = {
    "--tool", "--log-file", "--save", "--print-limit", "--launch-timeout", "--check-exit-code", "--error-exitcode",
    "--kernel-name", "--kernel-name-exclude", "--exclude", "--leak-check", "--racecheck-report",
    "--racecheck-detect-level", "--target-processes", "--report-api-errors", "--show-backtrace",
    "--check-device-heap", "--check-api-memory-access", "--padding", "--filter", "--print-level", "--demangle",
    "--destroy-on-device-error", "--initcheck-address-reporting", "--track-unused-memory", "--prefix",
}  # fmt: skip
_MPI = {
    "-np", "-n", "-c", "-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-x",
    "--map-by", "--bind-to", "--rank-by", "-npernode", "--npernode", "-N", "-wdir", "--wdir", "--prefix", "-ppn",
    "-mca", "--mca", "-genv", "-gmca", "--gmca", "-env",
}  # fmt: skip
_VALUE_OPTIONS: dict[str, set[str]] = {
    "env": {"-u", "--unset", "-C", "--chdir"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid"},
    "chrt": {"-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"},
    "numactl": {
        "-C", "--physcpubind", "-N", "--cpunodebind", "-m", "--membind", "-i", "--interleave", "-p", "--preferred",
    },
    "stdbuf": {"-i", "--input", "-o", "--output", "-e", "--error"},
    "time": {"-f", "--format", "-o", "--output"},
    "prlimit": {"-p", "--pid"},
    "strace": {"-o", "-e", "-p", "-s", "-u", "-E", "-P", "-I", "-a", "-b", "-O", "-S", "-X"},
    "ltrace": {"-o", "-e", "-p", "-s", "-u", "-a", "-n", "-l", "-x", "-F", "-w", "-A", "-D"},
    "compute-sanitizer": _SANITIZER,
    "cuda-memcheck": _SANITIZER,
    "nsys": {
        "-o", "--output", "-t", "--trace", "-s", "--sample", "-f", "--force-overwrite", "-d", "--duration", "-y",
        "--delay", "--stats", "-b", "--backtrace", "-c", "--capture-range", "-e", "--env-var", "-w", "--show-output",
        "-x", "--stop-on-exit", "-p", "--nvtx-capture", "-n", "--inherit-environment", "--cuda-memory-usage",
    },
    "ncu": {
        "-o", "--export", "-k", "--kernel-name", "-c", "--launch-count", "-s", "--launch-skip", "--set", "--section",
        "--metrics", "--target-processes", "--kernel-name-base", "--replay-mode", "--cache-control",
        "--clock-control", "--kernel-id", "--nvtx-include", "--nvtx-exclude",
    },
    "mpirun": _MPI,
    "mpiexec": _MPI,
    "srun": {
        "-n", "--ntasks", "-N", "--nodes", "-p", "--partition", "-t", "--time", "-c", "--cpus-per-task", "-G",
        "--gpus", "-w", "--nodelist", "-A", "--account", "-J", "--job-name", "--mpi", "-o", "--output", "-e",
        "--error", "--gres", "--gpus-per-task", "--mem", "-q", "--qos", "-x", "--exclude", "-C", "--constraint",
        "--cpu-bind", "--gpu-bind",
    },
}  # fmt: skip
_TWO_VALUES = frozenset({"-mca", "--mca", "-genv", "-gmca", "--gmca"})  # `--mca NAME VALUE`


# A launcher's options that name where it writes its own output: a pipe to a program (`strace -o
# '|python3 ...'` ran one holding the kernel's stdout, printing the marker: a red-team finding), or
# the kernel's own streams (`-o /dev/stdout`), are refused; a file is fine.
_OUTPUT_OPTIONS = {
    "strace": {"-o", "--output"},
    "ltrace": {"-o", "--output"},
    "time": {"-o", "--output"},
    "valgrind": {"--log-file", "--xml-file", "--log-socket"},
    "compute-sanitizer": {"--log-file", "--save"},
    "cuda-memcheck": {"--log-file", "--save"},
    "nsys": {"-o", "--output"},
    "ncu": {"-o", "--export", "--log-file"},
    "srun": {"-o", "--output", "-e", "--error", "-i", "--input"},
}
_STREAM = re.compile(r"[|!&]|/dev/|/proc/|.*/fd/")  # pipes, device and /proc files, fd paths


def _output_option(program: str, option: str) -> bool:
    """Whether OPTION names one of the launcher's output options, or abbreviates one (getopt_long
    takes `--out` for `--output`: GNU time wrote to /dev/stdout so, a red-team finding)."""
    known = _OUTPUT_OPTIONS.get(program, ())
    return option in known or (len(option) > 2 and option.startswith("--") and any(o.startswith(option) for o in known))


def _refused_value(program: str, option: str, value: str) -> str | None:
    """A launcher's output option sending it into a program or a stream (_OUTPUT_OPTIONS)."""
    bare = re.sub(r"[\"'\\]", "", value)
    if _output_option(program, option) and _STREAM.match(bare):
        return f"`{program} {option} {value}`, whose output would go to a program or a stream, not a file"
    if program == "valgrind" and option in ("--log-fd", "--xml-fd"):
        return f"`valgrind {option}`, whose output would go into the kernel's streams: name a --log-file"
    return None


def _glued(program: str, text: str) -> tuple[str, str] | None:
    """The short option in a cluster that takes a value, as getopt reads it, and what is glued
    to it (`-o|cmd`; `-fo/dev/stdout`: -f, then -o with the rest; `-fo`: its value the next word)."""
    if not re.match(r"-[A-Za-z]", text):
        return None
    for at in range(1, len(text)):
        option = "-" + text[at]
        if option in _VALUE_OPTIONS.get(program, ()) or option in _OUTPUT_OPTIONS.get(program, ()):
            return option, text[at + 1 :]
    return None


_ENV_LONG = {"--ignore-environment": "clears", "--split-string": "runs"}
_ENV_VALUE_SHORT = "uCS"  # env's short options that take the rest of their cluster, or the next word


def _time_format(option: str) -> str | None:
    """GNU time's own format (`-f`, `--format`, however getopt reads it): `%x.%x` and `%e` print
    the digits a refusal marker's `\\d+\\.\\d+` wants, on the kernel's stderr (`time -f "needs
    CC %x.%x and this device is" {binary}` was an expected refusal for a kernel that failed: a
    red-team finding)."""
    why = f"`time {option}`, its own format, which prints text of the run's on the kernel's stderr"
    if option.startswith("--"):
        name = option.partition("=")[0]
        return why if len(name) > 2 and "--format".startswith(name) else None
    for letter in option[1:]:
        if letter == "f":
            return why
        if letter == "o" or not letter.isalnum():
            break
    return None


# options that run a program of the run's choosing, or print its text into the kernel's streams:
# srun's prolog and epilog (`srun --prolog=/bin/echo {binary} PASS` passed: a red-team finding),
# compute-sanitizer's prefix on each of the kernel's lines, strace's verbose environment
_RUNS_OR_PRINTS = {
    "srun": ("--prolog", "--epilog", "--task-prolog", "--task-epilog"),
    "compute-sanitizer": ("--prefix",),
    "cuda-memcheck": ("--prefix",),
    "strace": ("--no-abbrev",),
    "env": ("--debug",),
}
_RUNS_OR_PRINTS_SHORT = {"strace": "v", "env": "v"}  # env -v: "arg[1]= '...'" on the kernel's stderr


def _prints_or_runs(program: str, option: str) -> str | None:
    why = f"`{program} {option}`, which runs a program of the run's or prints its text into the kernel's streams"
    if option.startswith("--"):
        name = option.partition("=")[0]
        if len(name) > 2 and any(full.startswith(name) for full in _RUNS_OR_PRINTS.get(program, ())):
            return why
        return None
    for letter in option[1:]:
        if letter in _RUNS_OR_PRINTS_SHORT.get(program, ""):
            return why
        if not letter.isalnum() or "-" + letter in _VALUE_OPTIONS.get(program, ()):
            break
    return None


def _refused_option(program: str, option: str) -> str | None:
    """An option of `env` that clears the environment (the farm's GPU pin and the cell's
    marker with it) or runs a string of its own (`-S 'echo PASS'`), however getopt reads it:
    OPTION as the shell hands it on (quotes gone), a long one abbreviated (`--split-s=...`),
    a short one anywhere in a cluster before a letter that takes a value (`-vS...`). Each
    spelling here once passed a kernel that failed (red-team findings). And GNU time's format."""
    if why := _prints_or_runs(program, option) or placed_elsewhere(program, option):
        return why
    if program == "time":
        return _time_format(option)
    if program != "env":
        return None
    clears = f"`env {option}`, which clears the environment: the GPU the farm pinned the cell to, and its marker"
    runs = f"`env {option}`, which runs a command of its own text"
    if option == "-":
        return clears
    if option.startswith("--"):
        name = option.partition("=")[0]
        for full, does in _ENV_LONG.items():
            if len(name) > 2 and full.startswith(name):
                return clears if does == "clears" else runs
        return None
    for letter in option[1:]:
        if letter == "i":
            return clears
        if letter == "S":
            return runs
        if letter in _ENV_VALUE_SHORT or not letter.isalnum():
            break
    return None


def _splits(text: str) -> bool:
    """A word the shell may turn into several, or none: an unquoted `$`, backquote, glob or
    brace (bash) outside quotes. Inside double quotes a `$` expands to one word."""
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "$`*?[{":
            return True
    return False


def _launcher_walk(command: Command) -> tuple[list[Word], str | None]:
    """A kernel command's launchers as the shell will run them (its program, where it is one,
    and the launchers among its words before {binary}), and why the command is refused, or
    None: a launcher's word before {binary} that it could run as its program (`env echo
    {binary} PASS` ran echo, with the kernel as its argument): only options (with the values
    of those _VALUE_OPTIONS lists), assignments, numbers and other launchers may come before
    the kernel. A launcher is named bare (looked up on the node's PATH) or by its absolute
    path: `./nice {binary}` ran a nice the run had written (a red-team finding)."""
    found = command.program()
    if found is None or "whole" in command.words[found[0]].binaries:
        return [], None
    program = command.words[found[0]]
    launchers = [program]
    current = program.text.rsplit("/", 1)[-1]
    verbs = _SUBCOMMANDS.get(current, ())
    owed = 0  # values still owed to the last option
    option = ""
    for index, word in enumerate(before_kernel(command)):
        text = word.text
        plain, whole = unquoted(text)  # as the launcher gets it: `-"S"` is `-S`
        if owed:
            owed -= 1
            # the first of `--mca NAME VALUE`'s two: a parameter naming the hosts (round 101)
            if why := _refused_value(current, option, text) or (
                owed == 1 and mca_placed_elsewhere(current, option, text)
            ):
                return launchers, why
            continue
        if index == 0 and text in verbs:
            continue
        if ASSIGNMENT.match(text):  # `env PROFILER=/opt/nvidia/bin/nsys {binary}`: a variable, no launcher
            continue
        if launcher(text):
            current = text.rsplit("/", 1)[-1]
            launchers.append(word)
            continue
        if text.startswith("-"):
            if not whole and "=" not in plain:  # `env -"$O"`: `env -`, which clears it, where O is empty
                return launchers, (
                    f"the option {text!r}, whose name the shell fills in: write a launcher's options as they are"
                )
            if why := _refused_option(current, plain):
                return launchers, why
            name, given, value = plain.partition("=")
            if why := _refused_value(current, name, value) if given else _refused_value(current, name, "-"):
                return launchers, why
            option = name
            if "=" not in plain and name in _VALUE_OPTIONS.get(current, ()):
                owed = 2 if name in _TWO_VALUES else 1
            elif (glued := _glued(current, plain)) is not None and not given:
                option, rest = glued
                if why := _refused_value(current, option, rest) if rest else None:
                    return launchers, why
                owed = 0 if rest else 1
            continue
        if _NUMBER_LIKE.fullmatch(text):
            continue
        return launchers, (
            f"{text!r} between the launcher and {{binary}}, where only options (those of {current!r} that "
            "take a value: as `--option=value` where the farm does not know it takes one), numbers, "
            "assignments and other launchers may stand"
        )
    if owed:  # `strace -o {binary} echo PASS`: the copy a file strace writes, echo the program it runs
        return launchers, f"{{binary}} as the value of {option!r}, not the program {current!r} runs"
    # the farm's function is told where the launchers stand among the command's words: each word
    # up to {binary} must stay one word (`$A/nice` with A="/usr/bin/nice /bin/echo PASS" ran echo,
    # unchecked; `env -u nice nice {binary}` had the option's value looked up: red-team findings)
    cut = next((i for i, w in enumerate(command.words) if "whole" in w.binaries), len(command.words))
    for word in command.words[found[0] : cut]:
        if _splits(word.text):
            return launchers, (
                f"{word.text!r} before {{binary}} in a launcher's command, which the shell may turn into "
                "several words or none (an unquoted `$`, backquote, `*`, `?`, `[` or `{`): quote it, "
                "and name launchers as they are"
            )
    for word in launchers:
        bare = re.sub(r"[\"'\\]", "", word.text)
        if "/" in bare and not bare.startswith(("/", "~")):
            return launchers, (
                f"the launcher {word.text!r} by a relative path (a file the run may have written): "
                "name it bare, as the node's PATH has it, or by its absolute path"
            )
    return launchers, None


def launcher_words(command: Command) -> list[Word]:
    """The launchers of a kernel command, as written (_launcher_walk)."""
    return _launcher_walk(command)[0]


def launcher_places(command: Command) -> list[int]:
    """Where a kernel command's launchers stand among its arguments, from 1 (its program)."""
    found = command.program()
    if found is None:
        return []
    # each word holds its own place in the text: equal words at two places are two words
    return [command.words.index(word) - found[0] + 1 for word in launcher_words(command)]


def launched_otherwise(command: Command) -> str | None:
    return _launcher_walk(command)[1]
